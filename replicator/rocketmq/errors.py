"""Errors of the RocketMQ replicator's cluster client (``replicator.rocketmq``).

    RocketMQError                 base
    ├── TopicNotFound             the nameserver has no route for the topic (TOPIC_NOT_EXIST 17)
    ├── RemotingError             an answer with a code the request does not expect
    │                             (``code``, ``remark``; ``retriable`` depends on the code)
    ├── ClusterUnavailable        no answer: cannot connect, connection lost, timed out,
    │                             no master for a queue (retriable)
    ├── BadAnswer                 an answer that does not parse (a body that is not the JSON
    │                             or the stored-record format it should be): not retriable
    └── ConfigError               a setting of ``metaledger replicate rocketmq`` that cannot
                                  work (the message names the setting); also a ValueError

``retriable`` is a class attribute (an instance attribute for ``RemotingError``: the code is in
``rmq.codes.RETRIABLE_CODES``, what RocketMQ's clients retry), as in ``replicator/sinks/errors.py``:
callers read it, nobody matches on message text.
"""

from __future__ import annotations

from rmq.codes import RETRIABLE_CODES


class RocketMQError(Exception):
    retriable: bool = False


class TopicNotFound(RocketMQError):
    def __init__(self, topic: str, remark: str | None = None) -> None:
        super().__init__(f"no route for topic {topic!r}" + (f": {remark}" if remark else ""))
        self.topic = topic


class RemotingError(RocketMQError):
    def __init__(self, code: int, remark: str | None, where: str = "") -> None:
        text = f"answered code {code}" + (f": {remark}" if remark else "")
        super().__init__(text + (f" ({where})" if where else ""))
        self.code = code
        self.remark = remark
        self.retriable = code in RETRIABLE_CODES


class ClusterUnavailable(RocketMQError):
    retriable = True


class BadAnswer(RocketMQError):
    pass


class ConfigError(RocketMQError, ValueError):
    pass
