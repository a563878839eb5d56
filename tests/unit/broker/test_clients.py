"""broker.clients: connected clients by protocol, language and version, and their forgetting
(connection closed, NotifyClientTermination, silence beyond the timeout)."""

from __future__ import annotations

from broker.clients import ClientKey, ConnectedClients, GrpcClients, RemotingClients
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from rmq.codec import RemotingCommand
from rmq.server import Peer


def request(language: str = "JAVA", version: int = 401) -> RemotingCommand:
    return RemotingCommand.request(34, language=language, version=version)


def ua(language: int = v2.NODE_JS, version: str = "1.0.8") -> v2.UA:
    return v2.UA(language=language, version=version)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_remoting_connections_by_their_latest_request_and_forgotten_on_close() -> None:
    r = RemotingClients()
    a, b, c = Peer(1, "10.0.0.1:1"), Peer(2, "10.0.0.2:2"), Peer(3, "10.0.0.3:3")
    r.request(request(), a)
    r.request(request(), a)  # the same connection again: still one
    r.request(request("CPP", 37), b)
    r.request(request("GO", 413), c)
    r.request(request("GO", 479), c)  # its latest request counts
    assert sorted(r.keys(), key=str) == sorted(
        [
            ClientKey("remoting", "java", "v4_9_4"),
            ClientKey("remoting", "cpp", "v3_0_11"),
            ClientKey("remoting", "go", "v5_3_3"),
        ],
        key=str,
    )
    r.closed(b)
    r.closed(b)  # twice: harmless
    assert ClientKey("remoting", "cpp", "v3_0_11") not in r.keys() and len(r.keys()) == 2


def test_remoting_header_pairs_remembered_are_bounded() -> None:
    r = RemotingClients()
    for v in range(2000):
        r.request(request(version=v), Peer(v, f"h:{v}"))
    assert len(r._known) == 1024 and len(r.keys()) == 2000


def test_grpc_clients_by_user_agent_forgotten_on_termination_and_silence() -> None:
    clock = Clock()
    gone: list[str] = []
    g = GrpcClients(timeout_s=120, clock=clock)
    g.on_gone = gone.append
    g.settings("node-1", ua())
    g.settings("py-1", ua(v2.PYTHON, "5.1.2"))
    g.settings("odd", ua(99, ""))  # a language newer than our protos, no version
    assert sorted(k.language + "/" + k.version for k in g.keys()) == [
        "language_99/unknown",
        "node_js/1.0.8",
        "python/5.1.2",
    ]
    assert all(k.protocol == "grpc" for k in g.keys())
    g.forget("odd")
    g.forget("odd")  # a second NotifyClientTermination: nothing more
    assert gone == ["odd"]

    clock.now += 100
    g.seen("node-1")  # a heartbeat keeps it
    g.seen("never")  # a heartbeat of an unknown client adds nothing
    clock.now += 30
    assert g.expire() == ["py-1"] and "py-1" not in g and "node-1" in g
    assert gone == ["odd", "py-1"]
    clock.now += 121
    assert g.expire() == ["node-1"] and g.keys() == []


def test_counts_add_both_protocols() -> None:
    clients = ConnectedClients()
    clients.remoting.request(request(), Peer(1, "h:1"))
    clients.remoting.request(request(), Peer(2, "h:2"))
    clients.grpc.settings("c1", ua())
    assert clients.counts() == {
        ClientKey("remoting", "java", "v4_9_4"): 2,
        ClientKey("grpc", "node_js", "1.0.8"): 1,
    }
    clients.expire()  # nothing is old yet
    assert sum(clients.counts().values()) == 3
