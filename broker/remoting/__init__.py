"""The broker's RocketMQ remoting front: its error tree, typed headers and the wiring of
``rmq``'s frame server (:mod:`broker.remoting.front`). Frames, codes and the server loop are
``rmq``'s, shared with the nameserver and the replicators.
"""

from broker.remoting.errors import BrokerRequestError
from broker.remoting.front import remoting_server

__all__ = ["BrokerRequestError", "remoting_server"]
