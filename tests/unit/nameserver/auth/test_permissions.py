"""The permission check (etcd's range_perm_cache.go semantics), the per-method table,
tokens (simple and JWT) and RocketMQ ACL signatures."""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

import pytest

from nameserver.auth import acl, errors
from nameserver.auth.check import Authorizer, covers, merge, permitted
from nameserver.auth.records import (
    READ,
    READWRITE,
    WRITE,
    AuthImage,
    AuthState,
    Permission,
    Role,
    User,
)
from nameserver.auth.rules import OPEN, ROOT, RULES, prefix_end, record_key
from nameserver.auth.tokens import (
    JwtTokens,
    SimpleTokens,
    node_credential,
    parse_duration_s,
    parse_token_spec,
)
from nameserver.errors import InvalidArgument
from nameserver.kinds import REGISTRY
from nameserver.state.image import MetadataImage
from protos.etcdserverpb import rpc_pb2
from rmq.codes import RequestCode


def image_of(*items: User | Role | AuthState) -> AuthImage:
    return AuthImage({i.key: i for i in items})


AUTH = image_of(
    AuthState(enabled=True, revision=3),
    User("root", roles=("root",)),
    User("alice", roles=("r",)),
    User("bob", roles=("w",)),
    Role(
        "r",
        (
            Permission(READWRITE, b"foo/", prefix_end(b"foo/")),
            Permission(READ, b"bar", b""),
            Permission(READ, b"m", b"p"),
            Permission(READ, b"p", b"q"),
        ),
    ),
    Role("w", (Permission(WRITE, b"z", b"\x00"),)),
)


@pytest.mark.parametrize(
    ("user", "key", "range_end", "perm", "ok"),
    [
        ("alice", b"foo/a", b"", "write", True),
        ("alice", b"foo/", prefix_end(b"foo/"), "read", True),
        ("alice", b"foo", b"", "read", False),
        ("alice", b"bar", b"", "read", True),
        ("alice", b"bar", b"", "write", False),
        ("alice", b"bar", b"bas", "read", False),  # a range wider than the one key
        ("alice", b"m", b"q", "read", True),  # two touching ranges cover it together
        ("alice", b"m", b"r", "read", False),
        ("alice", b"a", b"\x00", "read", False),  # "from key" needs all keys after it
        ("bob", b"zz", b"", "write", True),  # a "from key" permission
        ("bob", b"zz", b"\x00", "write", True),
        ("bob", b"y", b"", "write", False),
        ("root", b"anything", b"\x00", "write", True),
        ("nobody", b"foo/a", b"", "read", False),
    ],
)
def test_key_ranges_are_permitted_as_etcd_checks_them(
    user: str, key: bytes, range_end: bytes, perm: str, ok: bool
) -> None:
    assert permitted(AUTH, user, [(key, range_end, perm)]) is ok


def test_intervals_merge_when_they_overlap_or_touch() -> None:
    ivl = merge([(b"c", b"d"), (b"a", b"b"), (b"b", b"c"), (b"x", None)])
    assert ivl == ([b"a", b"x"], [b"d", None])
    assert covers(ivl, b"a", b"d") and not covers(ivl, b"a", b"e")
    assert covers(ivl, b"zzz", b"") and covers(ivl, b"x", b"\x00")


class Ctx:
    """A servicer context's metadata, as the guard hands it to the hook."""

    def __init__(self, metadata: list[tuple[str, str]]) -> None:
        self.metadata = metadata

    def invocation_metadata(self) -> list[tuple[str, str]]:
        return self.metadata


class Checker:
    def __init__(self, authz: Authorizer) -> None:
        self.authz = authz

    def check(self, path: str, request: object, metadata: list[tuple[str, str]]) -> None:
        self.authz.check(path, request, Ctx(metadata))


def _authorizer(auth: AuthImage) -> tuple[Checker, SimpleTokens]:
    tokens = SimpleTokens(300)
    image = MetadataImage(REGISTRY, auth=auth)
    return Checker(Authorizer(lambda: image, tokens, node_credential("pw"))), tokens


def test_the_hook_answers_etcds_errors() -> None:
    authz, tokens = _authorizer(AUTH)
    put = rpc_pb2.PutRequest(key=b"foo/a", value=b"v")
    with pytest.raises(errors.UserEmpty):
        authz.check("/etcdserverpb.KV/Put", put, [])
    with pytest.raises(errors.Unauthenticated):
        authz.check("/etcdserverpb.KV/Put", put, [("token", "forged")])
    alice = tokens.assign("alice", 3)
    authz.check("/etcdserverpb.KV/Put", put, [("token", alice)])
    denied = rpc_pb2.PutRequest(key=b"bar", value=b"v")
    with pytest.raises(errors.PermissionDenied):
        authz.check("/etcdserverpb.KV/Put", denied, [("token", alice)])
    txn = rpc_pb2.TxnRequest(
        compare=[rpc_pb2.Compare(key=b"foo/a")],
        success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"foo/b"))],
        failure=[rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=b"bar"))],
    )
    with pytest.raises(errors.PermissionDenied):  # every op of both branches counts
        authz.check("/etcdserverpb.KV/Txn", txn, [("token", alice)])
    with pytest.raises(errors.PermissionDenied):  # root-only
        authz.check(
            "/etcdserverpb.Cluster/MemberRemove", rpc_pb2.MemberRemoveRequest(), [("token", alice)]
        )
    authz.check("/etcdserverpb.Maintenance/Status", rpc_pb2.StatusRequest(), [])  # open
    authz.check(
        "/etcdserverpb.Auth/UserGet", rpc_pb2.AuthUserGetRequest(name="alice"), [("token", alice)]
    )
    with pytest.raises(errors.PermissionDenied):
        authz.check(
            "/etcdserverpb.Auth/UserGet", rpc_pb2.AuthUserGetRequest(name="bob"), [("token", alice)]
        )
    # another member's credential acts as root; an unknown method needs root
    member = [("token", node_credential("pw"))]
    authz.check("/etcdserverpb.Cluster/MemberRemove", rpc_pb2.MemberRemoveRequest(), member)
    with pytest.raises(errors.PermissionDenied):
        authz.check("/some.New/Method", rpc_pb2.StatusRequest(), [("token", alice)])


def test_nothing_is_checked_while_auth_is_off() -> None:
    authz, _ = _authorizer(image_of(User("alice")))
    authz.check("/etcdserverpb.KV/Put", rpc_pb2.PutRequest(key=b"x"), [("token", "forged")])


def test_every_served_method_has_a_rule() -> None:
    from protos.etcdserverpb import rpc_pb2 as rpc
    from protos.etcdserverpb import v3election_pb2, v3lock_pb2
    from protos.metaledger.v1 import (
        admin_pb2,
        auth_pb2,
        offsets_pb2,
        quotas_pb2,
        replica_groups_pb2,
        routing_pb2,
    )

    paths = {
        f"/{service.full_name}/{method.name}"
        for module in (
            rpc,
            v3election_pb2,
            v3lock_pb2,
            admin_pb2,
            auth_pb2,
            offsets_pb2,
            quotas_pb2,
            replica_groups_pb2,
            routing_pb2,
        )
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    assert paths == set(RULES)
    assert RULES["/etcdserverpb.Auth/Authenticate"] == OPEN
    assert RULES["/etcdserverpb.Maintenance/MoveLeader"] == ROOT


def test_metaledger_records_map_to_one_printable_namespace() -> None:
    assert record_key("offset", "job1/p0") == b"/_metaledger/offset/job1/p0"
    assert prefix_end(b"a\xff") == b"b" and prefix_end(b"\xff") == b"\x00"


def test_simple_tokens_expire_unless_used_and_are_dropped_with_their_user() -> None:
    clock = [0.0]
    tokens = SimpleTokens(10, now=lambda: clock[0])
    t = tokens.assign("alice", 1)
    clock[0] = 8
    assert tokens.info(t) == ("alice", 1)  # used: renewed for another 10 s
    clock[0] = 17
    assert tokens.info(t) == ("alice", 1)
    clock[0] = 28
    assert tokens.info(t) is None  # expired
    t2 = tokens.assign("alice", 1)
    tokens.invalidate_user("alice")
    assert tokens.info(t2) is None


def _pem_keys(kind: str) -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    key = (
        rsa.generate_private_key(65537, 2048)
        if kind == "RS256"
        else ec.generate_private_key(ec.SECP256R1())
    )
    priv = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return priv, pub


@pytest.mark.parametrize("method", ["HS256", "RS256", "ES256"])
def test_jwt_tokens_verify_anywhere_with_the_key_and_expire(method: str) -> None:
    clock = [1000.0]
    priv, pub = (b"hmac-secret", b"") if method == "HS256" else _pem_keys(method)
    signer = JwtTokens(method, priv, pub, ttl_s=60, now=lambda: clock[0])
    verifier = JwtTokens(
        method, priv if method == "HS256" else None, pub or None, now=lambda: clock[0]
    )
    token = signer.assign("alice", 7)
    assert verifier.info(token) == ("alice", 7)
    head, payload, sig = token.split(".")
    forged = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1]
    assert verifier.info(f"{head}.{forged}.{sig}") is None
    assert verifier.info("not.a.token") is None and verifier.info("x") is None
    clock[0] += 61
    assert verifier.info(token) is None


def test_token_specs_follow_etcds_format() -> None:
    assert parse_token_spec("simple") == {"type": "simple"}
    spec = parse_token_spec("jwt,sign-method=RS256,priv-key=a,pub-key=b,ttl=10m")
    assert spec["sign-method"] == "RS256" and parse_duration_s(spec["ttl"]) == 600
    assert parse_duration_s("1h30m") == 5400
    for bad in (
        "jwt",
        "jwt,sign-method=HS512",
        "simple,x=1",
        "oauth",
        "jwt,sign-method=HS256,ttl=5x",
    ):
        with pytest.raises(InvalidArgument):
            parse_token_spec(bad)


def test_the_acl_signature_is_rocketmqs_hmac_sha1_of_sorted_values_and_body() -> None:
    ext = {"topic": "T", "AccessKey": "alice", "clusterName": "c"}
    expected_content = b"alice" + b"c" + b"T" + b"BODY"  # AccessKey < clusterName < topic
    assert acl.content(ext, b"BODY") == expected_content
    mac = hmac.new(b"sk", expected_content, hashlib.sha1).digest()
    assert acl.signature("sk", ext, b"BODY") == base64.b64encode(mac).decode()
    signed = {"topic": "T"}
    acl.sign("alice", "sk", signed, b"")
    assert signed["Signature"] == acl.signature("sk", signed, b"")  # Signature is left out


def test_remoting_writes_need_a_valid_signature_and_write_permission() -> None:
    auth = image_of(
        AuthState(enabled=True),
        User("broker1", roles=("b",), remoting_secret="sk1"),
        User("nosecret", roles=("b",)),
        Role(
            "b",
            (Permission(READWRITE, b"/_metaledger/broker/", prefix_end(b"/_metaledger/broker/")),),
        ),
    )
    code = RequestCode.UNREGISTER_BROKER
    ext = {"brokerName": "b-a", "brokerAddr": "1:1", "clusterName": "c", "brokerId": "0"}
    assert acl.refusal(auth, code, ext, b"") == "No accessKey is configured"
    assert (
        acl.refusal(auth, code, {**ext, "AccessKey": "nosecret"}, b"")
        == "No acl config for nosecret"
    )
    signed = dict(ext)
    acl.sign("broker1", "sk1", signed, b"")
    assert acl.refusal(auth, code, signed, b"") is None
    assert (
        acl.refusal(auth, code, signed, b"extra body")
        == "Check signature failed for accessKey=broker1"
    )
    topic = {"topic": "T"}
    acl.sign("broker1", "sk1", topic, b"")
    assert "No permission" in (
        acl.refusal(auth, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic, b"") or ""
    )
    assert (
        acl.refusal(auth, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, b"") is None
    )  # reads open
    off = image_of(User("broker1", remoting_secret="sk1"))
    assert acl.refusal(off, code, ext, b"") is None  # auth off: nothing checked


def test_listing_alarms_is_open_and_changing_them_is_roots() -> None:
    authz, tokens = _authorizer(AUTH)
    alice = [("token", tokens.assign("alice", 3))]
    path = "/etcdserverpb.Maintenance/Alarm"
    authz.check(path, rpc_pb2.AlarmRequest(action=rpc_pb2.AlarmRequest.GET), alice)
    with pytest.raises(errors.PermissionDenied):
        authz.check(path, rpc_pb2.AlarmRequest(action=rpc_pb2.AlarmRequest.DEACTIVATE), alice)
    root = [("token", tokens.assign("root", 3))]
    authz.check(path, rpc_pb2.AlarmRequest(action=rpc_pb2.AlarmRequest.DEACTIVATE), root)


def test_the_server_config_refuses_a_bad_token_spec_or_key_naming_the_field(
    tmp_path: Path,
) -> None:
    from nameserver.config import ServerConfig
    from raftlog import ConfigError

    base = {"node_id": "n0", "data_dir": str(tmp_path), "cluster_password": "pw"}
    ServerConfig(**base, auth_token="simple").validate()
    key = tmp_path / "k"
    key.write_bytes(b"hmac")
    ServerConfig(**base, auth_token=f"jwt,sign-method=HS256,priv-key={key},ttl=5m").validate()
    for spec, why in (
        ("jwt,sign-method=RS256,pub-key=/no/such/file", "cannot load the key"),
        (f"jwt,sign-method=RS256,pub-key={key}", "cannot load the key"),  # not PEM
        ("jwt,sign-method=HS256", "priv-key"),
        ("bogus", "is not simple or jwt"),
    ):
        with pytest.raises(ConfigError, match="auth_token") as info:
            ServerConfig(**base, auth_token=spec).validate()
        assert why in str(info.value)
    with pytest.raises(ConfigError, match="bcrypt_cost"):
        ServerConfig(**base, bcrypt_cost=40).validate()


def test_a_node_forgets_simple_tokens_when_it_applies_what_etcd_invalidates_them_for() -> None:
    from dataclasses import replace

    images = [MetadataImage(REGISTRY, auth=AUTH)]
    tokens = SimpleTokens(300)
    authz = Authorizer(lambda: images[-1], tokens)
    ctx = Ctx([])
    authz.check("/etcdserverpb.Maintenance/Status", None, ctx)  # sees the first image
    alice, bob = tokens.assign("alice", 3), tokens.assign("bob", 3)
    changed = image_of(
        *(
            replace(u, password_hash=b"new") if isinstance(u, User) and u.name == "alice" else u
            for u in AUTH.records.values()
        )
    )
    images.append(MetadataImage(REGISTRY, auth=changed))  # alice's password changed (on any node)
    authz.check("/etcdserverpb.Maintenance/Status", None, ctx)
    assert tokens.info(alice) is None and tokens.info(bob) is not None
    off = image_of(
        *(AuthState(False, 4) if isinstance(i, AuthState) else i for i in changed.records.values())
    )
    images.append(MetadataImage(REGISTRY, auth=off))  # auth disabled: every token goes
    authz.check("/etcdserverpb.Maintenance/Status", None, ctx)
    assert tokens.info(bob) is None


class TlsCtx(Ctx):
    """A context with grpc's auth context (a verified certificate's CN, or none)."""

    def __init__(self, metadata: list[tuple[str, str]], cn: bytes | None = None) -> None:
        super().__init__(metadata)
        self.cn = cn

    def auth_context(self) -> dict[str, list[bytes]]:
        return {"x509_common_name": [self.cn]} if self.cn is not None else {}


def test_a_certificates_name_counts_from_grpc_or_from_the_go_front_with_its_key() -> None:
    """Under --client-cert-auth the caller without a token is its certificate's CN: the
    one grpc verified, else the Go front's ``x-ml-front-cn`` beside the node's key; a name
    without the key, with a wrong one or with the key but no front key set is nobody."""
    tokens = SimpleTokens(300)
    image = MetadataImage(REGISTRY, auth=AUTH)
    key = "ab" * 16
    front = Authorizer(lambda: image, tokens, cert_names=True, front_key=key)
    plain = Authorizer(lambda: image, tokens, cert_names=True)
    named = [("x-ml-front-cn", "alice"), ("x-ml-front-key", key)]
    assert front.caller(TlsCtx([], b"bob")) == "bob"
    assert front.caller(TlsCtx(named, b"bob")) == "bob"  # grpc's own name first
    assert front.caller(TlsCtx(named)) == "alice"
    assert front.caller(TlsCtx([("x-ml-front-cn", "alice")])) is None
    assert front.caller(TlsCtx([("x-ml-front-cn", "alice"), ("x-ml-front-key", "0" * 32)])) is None
    assert front.caller(TlsCtx([("x-ml-front-key", key)])) is None
    assert plain.caller(TlsCtx(named)) is None  # no Go front: the metadata means nothing
    off = Authorizer(lambda: image, tokens, cert_names=False, front_key=key)
    assert off.caller(TlsCtx(named, b"bob")) is None  # no --client-cert-auth: no names
    token = tokens.assign("carol", 3)
    assert front.caller(TlsCtx([*named, ("token", token)])) == "carol"  # a token wins
