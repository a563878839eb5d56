"""``metaledger member add|remove|list`` and ``leader transfer``: parsing, member lookup by
name or hex id, the printed ``serve`` flags, exit codes; and the client pieces they rely on
(peer URL checks, MemberRemove avoiding the member's own endpoint, MoveLeader finding the
leader). Pure: commands get a fake client, the client gets fake stubs.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import grpc
import pytest

from nameserver import cli
from nameserver.cli import leader, member
from nameserver.cli.exitcodes import ExitCode
from nameserver.client import (
    Client,
    FailedPrecondition,
    InvalidArgument,
    LeaderTransfer,
    Member,
    NotFound,
    Unavailable,
    normalize_peer_url,
)
from protos.etcdserverpb import rpc_pb2
from protos.metaledger.v1 import admin_pb2

MEMBERS = [
    Member(0x1A, "n0", ["http://127.0.0.1:7001"], ["http://127.0.0.1:7000"]),
    Member(0x2B, "n1", ["http://127.0.0.1:7011"], ["http://127.0.0.1:7010"]),
    Member(0xABC, "abc", ["http://127.0.0.1:7021"], ["http://127.0.0.1:7020"]),
]
NEW = Member(0x3C, "", ["http://127.0.0.1:7031"], [])


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(list(argv))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("METALEDGER_ENDPOINTS", raising=False)


class FakeClient:
    """Stands in for nameserver.client.Client; ``members`` answers in turn from a list."""

    def __init__(self, **results: Any) -> None:
        self.results = results
        self.calls: list[tuple[str, Any]] = []

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _answer(self, name: str, args: Any) -> Any:
        self.calls.append((name, args))
        result = self.results[name]
        if (
            name == "members"
            and isinstance(result, list)
            and result
            and isinstance(result[0], list)
        ):
            result = result.pop(0) if len(result) > 1 else result[0]
        if isinstance(result, Exception):
            raise result
        return result

    def members(self) -> Any:
        return self._answer("members", None)

    def member_add(self, peer_url: str, learner: bool = False) -> Any:
        return self._answer("member_add", peer_url)

    def member_remove(self, member_id: int) -> Any:
        return self._answer("member_remove", member_id)

    def move_leader(self, target_id: int = 0) -> Any:
        return self._answer("move_leader", target_id)


def use_client(monkeypatch: pytest.MonkeyPatch, module: Any, client: FakeClient) -> None:
    monkeypatch.setattr(module, "make_client", lambda args: client)


# --------------------------------------------------------------------------- parsing


def test_member_and_leader_arguments() -> None:
    args = parse("member", "add", "http://h:1", "--name", "n7", "-w", "json")
    assert (args.run.__name__, args.peer_url, args.name, args.output) == (
        "run_member_add",
        "http://h:1",
        "n7",
        "json",
    )
    assert parse("member", "add", "h:1").name == ""
    args = parse("--endpoints", "a:1,b:2", "member", "remove", "8e9e05c52164694d")
    assert (args.run.__name__, args.member, args.endpoints) == (
        "run_member_remove",
        "8e9e05c52164694d",
        "a:1,b:2",
    )
    assert parse("member", "list").run.__name__ == "run_member_list"
    args = parse("leader", "transfer", "--to", "n2", "--timeout", "9")
    assert (args.run.__name__, args.to, args.timeout_s) == ("run_leader_transfer", "n2", 9.0)
    assert parse("leader", "transfer").to == ""
    assert leader.transfer_target(parse("leader", "transfer", "n1")) == "n1"
    assert leader.transfer_target(parse("leader", "transfer", "--to", "n1")) == "n1"
    assert leader.transfer_target(parse("leader", "transfer", "n1", "--to", "n1")) == "n1"
    assert leader.transfer_target(parse("leader", "transfer")) == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["member"],
        ["member", "add"],
        ["member", "remove"],
        ["member", "add", "h:1", "h:2"],
        ["leader"],
        ["leader", "transfer", "n1", "n2"],
        ["leader", "transfer", "n1", "--to", "n2"],
        ["leader", "transfer", "--to"],
        ["member", "list", "-w", "yaml"],
    ],
)
def test_usage_errors(argv: list[str]) -> None:
    assert cli.main(argv) == ExitCode.USAGE


# --------------------------------------------------------------------------- pure pieces


def test_resolve_member_by_name_or_hex_id() -> None:
    assert member.resolve_member(MEMBERS, "n1").member_id == 0x2B
    assert member.resolve_member(MEMBERS, "2b").name == "n1"
    assert member.resolve_member(MEMBERS, "0x2B").name == "n1"
    assert member.resolve_member(MEMBERS, "1a").name == "n0"
    assert member.resolve_member(MEMBERS, "abc").member_id == 0xABC  # a name that reads as hex
    with pytest.raises(NotFound, match="n0=1a"):
        member.resolve_member(MEMBERS, "n9")
    with pytest.raises(NotFound):
        member.resolve_member(MEMBERS, "ff")
    unstarted = [*MEMBERS, NEW]
    assert member.resolve_member(unstarted, "3c") is NEW
    with pytest.raises(NotFound):
        member.resolve_member(unstarted, "")  # an unstarted member's empty name is no name


def test_next_name_takes_the_first_free_n_index() -> None:
    assert member.next_name(MEMBERS) == "n2"
    assert member.next_name([]) == "n0"
    assert member.next_name([Member(1, f"n{i}", [], []) for i in (0, 1, 2)]) == "n3"


def test_serve_flags_list_every_member_and_the_new_one() -> None:
    flags = member.serve_flags([*MEMBERS, NEW, Member(0x4D, "", ["http://h:9"], [])], NEW, "n3")
    assert flags[:4] == ["--id", "n3", "--listen-peer", "127.0.0.1:7031"]
    assert flags[4] == "--initial-cluster"
    assert flags[5].split(",") == [
        "n0=127.0.0.1:7001",
        "n1=127.0.0.1:7011",
        "abc=127.0.0.1:7021",
        "4d=h:9",  # an unstarted member has no name yet: its hex id stands in
        "n3=127.0.0.1:7031",
    ]


def test_normalize_peer_url() -> None:
    assert normalize_peer_url("127.0.0.1:7031") == "http://127.0.0.1:7031"
    assert normalize_peer_url(" http://h:1/ ") == "http://h:1"
    for bad in ("https://h:1", "h", "http://h:x", "http://:1", "http://h:1/path", "unix:///s"):
        with pytest.raises(InvalidArgument):
            normalize_peer_url(bad)


# --------------------------------------------------------------------------- commands


def test_member_add_prints_id_and_serve_flags(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client = FakeClient(members=[MEMBERS, [*MEMBERS, NEW]], member_add=NEW)
    use_client(monkeypatch, member, client)
    assert cli.main(["member", "add", "127.0.0.1:7031"]) == ExitCode.OK
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Member 3c added to the cluster"
    assert out[-1] == (
        "metaledger serve --id n2 --listen-peer 127.0.0.1:7031 --initial-cluster "
        "n0=127.0.0.1:7001,n1=127.0.0.1:7011,abc=127.0.0.1:7021,n2=127.0.0.1:7031"
        " --data-dir n2 --listen-client 127.0.0.1:7030 --listen-remoting 127.0.0.1:7032"
        " --listen-metrics 127.0.0.1:7033 --cluster-password-file cluster-password"
    )
    assert "start it so" in out[-2] and "starts a new member, then adds it" in out[-2]
    assert ("member_add", "http://127.0.0.1:7031") in client.calls

    client = FakeClient(members=[MEMBERS, [*MEMBERS, NEW]], member_add=NEW)
    use_client(monkeypatch, member, client)
    assert cli.main(["member", "add", "http://127.0.0.1:7031", "--name", "n9", "-w", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["id"] == "3c" and doc["name"] == "n9"
    assert doc["member"]["peer_urls"] == ["http://127.0.0.1:7031"]
    assert doc["serve_flags"][:2] == ["--id", "n9"]


def test_member_add_prints_a_serve_command_that_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    """The printed command is complete: it parses, and its config validates (a data dir,
    ports of its own, the password file given, the cluster's token)."""
    from nameserver.cli import serve

    password = tmp_path / "pw"
    password.write_text("s3cret\n")
    client = FakeClient(members=[MEMBERS, [*MEMBERS, NEW]], member_add=NEW)
    use_client(monkeypatch, member, client)
    argv = ["member", "add", "127.0.0.1:7031", "--data-dir", str(tmp_path / "n3"), "--name", "n3"]
    argv += ["--cluster-password-file", str(password), "--initial-cluster-token", "orders-eu"]
    assert cli.main(argv) == ExitCode.OK
    command = capsys.readouterr().out.splitlines()[-1].split()
    assert command[:2] == ["metaledger", "serve"]
    config = serve.build_config(parse(*command[1:]))
    config.validate()
    assert (config.node_id, config.data_dir) == ("n3", str(tmp_path / "n3"))
    assert (config.cluster_token, config.cluster_password) == ("orders-eu", "s3cret")
    ports = [config.listen_client, config.listen_peer, config.listen_remoting]
    assert [*ports, config.listen_metrics] == [f"127.0.0.1:{p}" for p in (7030, 7031, 7032, 7033)]


def test_member_add_refuses_a_taken_name_or_a_bad_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client = FakeClient(members=MEMBERS, member_add=NEW)
    use_client(monkeypatch, member, client)
    assert cli.main(["member", "add", "h:1", "--name", "n1"]) == ExitCode.INVALID
    assert "already named 'n1'" in capsys.readouterr().err
    assert cli.main(["member", "add", "https://h:1"]) == ExitCode.INVALID
    assert not [c for c in client.calls if c[0] == "member_add"]


@pytest.mark.parametrize("given", ["n1", "2b", "0x2b"])
def test_member_remove_by_name_or_hex_id(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    rest = [MEMBERS[0], MEMBERS[2]]
    client = FakeClient(members=MEMBERS, member_remove=rest)
    use_client(monkeypatch, member, client)
    assert cli.main(["member", "remove", given]) == ExitCode.OK
    assert ("member_remove", 0x2B) in client.calls
    assert capsys.readouterr().out.startswith("Member 2b (n1) removed from the cluster")

    assert cli.main(["member", "remove", given, "-w", "json"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["id"] == "2b" and doc["removed"]["name"] == "n1"
    assert [m["name"] for m in doc["members"]] == ["n0", "abc"]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (NotFound("etcdserver: member not found"), ExitCode.NOT_FOUND),
        (FailedPrecondition("a node cannot remove itself"), ExitCode.ERROR),
        (Unavailable("no endpoint answered"), ExitCode.UNAVAILABLE),
    ],
)
def test_member_remove_errors_have_named_exit_codes(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: Exception,
    code: ExitCode,
) -> None:
    use_client(monkeypatch, member, FakeClient(members=MEMBERS, member_remove=error))
    assert cli.main(["member", "remove", "n1"]) == code
    assert capsys.readouterr().err.startswith("metaledger: ")


def test_member_remove_of_an_unknown_member_is_not_found(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client = FakeClient(members=MEMBERS, member_remove=[])
    use_client(monkeypatch, member, client)
    assert cli.main(["member", "remove", "n7"]) == ExitCode.NOT_FOUND
    assert "no member named 'n7'" in capsys.readouterr().err
    assert [c[0] for c in client.calls] == ["members"]


def test_leader_transfer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client = FakeClient(members=MEMBERS, move_leader=LeaderTransfer("n0", "n1"))
    use_client(monkeypatch, leader, client)
    assert cli.main(["leader", "transfer", "--to", "n1"]) == ExitCode.OK
    assert capsys.readouterr().out.strip() == "Leadership transferred from n0 to n1"
    assert ("move_leader", 0x2B) in client.calls
    client.calls.clear()
    assert cli.main(["leader", "transfer", "n1"]) == ExitCode.OK  # positional, as move-leader
    assert capsys.readouterr().out.strip() == "Leadership transferred from n0 to n1"
    assert ("move_leader", 0x2B) in client.calls

    assert cli.main(["leader", "transfer", "-w", "json"]) == ExitCode.OK
    assert json.loads(capsys.readouterr().out) == {
        "previous": "n0",
        "leader": "n1",
        "target_id": "",
    }
    assert client.calls[-1] == ("move_leader", 0)
    assert [c[0] for c in client.calls].count("members") == 1  # no lookup without --to

    client = FakeClient(members=MEMBERS, move_leader=LeaderTransfer("n1", "n1"))
    use_client(monkeypatch, leader, client)
    assert cli.main(["leader", "transfer", "--to", "2b"]) == ExitCode.OK
    assert capsys.readouterr().out.strip() == "n1 already leads"

    use_client(monkeypatch, leader, FakeClient(members=MEMBERS, move_leader=Unavailable("x")))
    assert cli.main(["leader", "transfer", "--to", "n1"]) == ExitCode.UNAVAILABLE
    use_client(monkeypatch, leader, FakeClient(members=MEMBERS))
    assert cli.main(["leader", "transfer", "--to", "zz"]) == ExitCode.NOT_FOUND


# --------------------------------------------------------------------------- client pieces


class FakeRpcError(grpc.RpcError):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class FakeNode:
    """Cluster, Maintenance and Admin stubs of one endpoint of a fake 3-node cluster."""

    def __init__(self, cluster: FakeCluster, endpoint: str) -> None:
        self.cluster, self.endpoint = cluster, endpoint

    @property
    def name(self) -> str:
        return self.cluster.names[self.endpoint]

    def _log(self, what: str) -> None:
        self.cluster.calls.append((self.endpoint, what))

    def MemberList(self, request: Any, timeout: float, metadata: Any = None) -> Any:
        self._log("MemberList")
        return rpc_pb2.MemberListResponse(
            members=[
                rpc_pb2.Member(
                    ID=m.member_id, name=m.name, peerURLs=m.peer_urls, clientURLs=m.client_urls
                )
                for m in MEMBERS
            ]
        )

    def MemberRemove(self, request: Any, timeout: float, metadata: Any = None) -> Any:
        self._log(f"MemberRemove {request.ID:x}")
        if MEMBERS[[m.name for m in MEMBERS].index(self.name)].member_id == request.ID:
            raise FakeRpcError(grpc.StatusCode.FAILED_PRECONDITION, "cannot remove itself")
        return rpc_pb2.MemberRemoveResponse(
            members=[rpc_pb2.Member(ID=m.member_id, name=m.name) for m in MEMBERS]
        )

    def Status(self, request: Any, timeout: float) -> Any:
        self._log("Status")
        if self.endpoint in self.cluster.down:
            raise FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused")
        leader = self.cluster.leader
        return admin_pb2.StatusResponse(
            id=self.name,
            role="leader" if self.name == leader else "follower",
            leader=leader,
            member_id=MEMBERS[[m.name for m in MEMBERS].index(self.name)].member_id,
        )

    def MoveLeader(self, request: Any, timeout: float) -> Any:
        self._log(f"MoveLeader {request.targetID:x}")
        if self.name != self.cluster.leader:
            raise FakeRpcError(grpc.StatusCode.UNAVAILABLE, "etcdserver: no leader")
        if self.cluster.refusals:
            self.cluster.refusals -= 1
            raise FakeRpcError(grpc.StatusCode.UNAVAILABLE, "target is not caught up")
        by_id = {m.member_id: m.name for m in MEMBERS}
        self.cluster.leader = by_id.get(request.targetID, "n1")
        return rpc_pb2.MoveLeaderResponse()


class FakeCluster:
    def __init__(self, leader: str = "n0") -> None:
        self.names = {
            m.client_urls[0].removeprefix("http://"): m.name for m in MEMBERS
        }  # endpoint -> name
        self.leader = leader
        self.down: set[str] = set()
        self.refusals = 0
        self.calls: list[tuple[str, str]] = []

    def client(self, endpoints: list[str]) -> Client:
        client = Client(endpoints, timeout_s=2.0)
        client._BACKOFF_FIRST_S = 0.001

        def stubs(ep: str) -> Any:
            node = FakeNode(self, ep)
            return type("Stubs", (), {"cluster": node, "maintenance": node, "admin": node})()

        client._stubs_for = stubs  # type: ignore[assignment,method-assign]
        return client


def test_member_remove_avoids_the_members_own_endpoint() -> None:
    fake = FakeCluster()
    client = fake.client(["127.0.0.1:7010", "127.0.0.1:7000"])  # n1 first
    client.member_remove(0x2B)  # n1: must go to n0
    assert [c for c in fake.calls if c[1].startswith("MemberRemove")] == [
        ("127.0.0.1:7000", "MemberRemove 2b")
    ]
    only_itself = fake.client(["127.0.0.1:7010"])
    with pytest.raises(FailedPrecondition, match="itself"):
        only_itself.member_remove(0x2B)  # the server's refusal, not a silent no-op
    with pytest.raises(InvalidArgument):
        client.member_remove(0)


def test_move_leader_finds_the_leader_and_waits_for_the_new_one() -> None:
    fake = FakeCluster(leader="abc")
    fake.refusals = 2  # "not caught up" twice: retried
    client = fake.client(["127.0.0.1:7000", "127.0.0.1:7010", "127.0.0.1:7020"])
    assert client.move_leader(0x2B) == LeaderTransfer("abc", "n1")
    moves = [c for c in fake.calls if c[1].startswith("MoveLeader")]
    assert moves == [("127.0.0.1:7020", "MoveLeader 2b")] * 3  # only to the leader
    assert client.move_leader(0x2B) == LeaderTransfer("n1", "n1")  # already leads: no call
    assert len([c for c in fake.calls if c[1].startswith("MoveLeader")]) == 3


def test_move_leader_reaches_a_leader_outside_the_endpoints() -> None:
    fake = FakeCluster(leader="abc")
    client = fake.client(["127.0.0.1:7000"])  # n0 only: abc is found by its client URL
    assert client.move_leader() == LeaderTransfer("abc", "n1")
    assert ("127.0.0.1:7020", "MoveLeader 0") in fake.calls


def test_move_leader_gives_up_at_the_deadline() -> None:
    fake = FakeCluster()
    fake.down = set(fake.names)
    client = fake.client(["127.0.0.1:7000"])
    client.timeout_s = 0.3
    with pytest.raises(Unavailable):
        client.move_leader(0x2B)
    with pytest.raises(InvalidArgument):
        client.move_leader(-1)
