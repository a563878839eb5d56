"""Pure parts of locks, elections and the lease/lock CLI: owner keys, who holds a prefix and
whom a waiter waits for, argument parsing, and the client's checks before any request."""

from __future__ import annotations

import argparse

import pytest

from nameserver import cli
from nameserver.cli.lease import lease_id
from nameserver.cli.lock import _lock_command
from nameserver.client import Client, InvalidArgument
from nameserver.kinds import REGISTRY
from nameserver.kv.records import KeyValue, KvImage
from nameserver.locks.recipes import first_created, owner_key
from nameserver.state.image import MetadataImage


def image_of(*kvs: KeyValue) -> MetadataImage:
    items = sorted((kv.key, kv) for kv in kvs)
    return MetadataImage(REGISTRY, kv=KvImage.from_sorted_items(items))


def kv(key: bytes, create: int) -> KeyValue:
    return KeyValue(key, b"", create, create, 1, 0)


def test_owner_key_is_etcds() -> None:
    assert owner_key(b"jobs/a", 0x694D805A3A6E2F06) == b"jobs/a/694d805a3a6e2f06"


def test_holder_is_the_first_created_and_waiters_wait_for_their_predecessor() -> None:
    image = image_of(
        kv(b"L/c", 7),
        kv(b"L/a", 9),
        kv(b"L/b", 5),
        kv(b"L0", 1),  # not under "L/"
        kv(b"L.x", 2),  # "." sorts before "/": not under it either
        kv(b"Lx/y", 3),
    )
    holder = first_created(image, b"L")
    assert holder is not None and holder.key == b"L/b"
    pred = first_created(image, b"L", max_create_rev=8)  # the waiter created at 9
    assert pred is not None and pred.key == b"L/c"
    assert first_created(image, b"L", max_create_rev=4) is None  # the holder waits for nobody
    assert first_created(image, b"M") is None
    # a store counting etcd's way from revision 0 gives the first key revision 1: its
    # waiter bound is 0, which is a bound (it waits for nobody), not "no bound"
    first = image_of(kv(b"L/a", 1))
    assert first_created(first, b"L", max_create_rev=0) is None


def test_lease_ids_are_hex_and_positive() -> None:
    assert lease_id("694d805a3a6e2f06") == 0x694D805A3A6E2F06
    for bad in ("", "xyz", "0", "-1", "8000000000000000"):
        with pytest.raises(argparse.ArgumentTypeError):
            lease_id(bad)


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["lock", *argv])


@pytest.mark.parametrize(
    ("argv", "command", "ttl"),
    [
        (("L",), [], 10),
        (("L", "--ttl", "3"), [], 3),
        (("--ttl", "4", "L", "--", "sh", "-c", "x"), ["sh", "-c", "x"], 4),
        (("L", "--ttl", "5", "--", "sh", "--ttl", "9"), ["sh", "--ttl", "9"], 5),
        (("L", "echo", "--ttl"), ["echo", "--ttl"], 10),
    ],
)
def test_lock_command_and_options(argv: tuple[str, ...], command: list[str], ttl: int) -> None:
    args = parse(*argv)
    assert _lock_command(args) == command
    assert args.ttl == ttl


def test_lock_options_after_the_name_are_checked() -> None:
    with pytest.raises(SystemExit):
        _lock_command(parse("L", "--ttl", "0", "--", "true"))


def test_client_checks_before_sending() -> None:
    with Client(["127.0.0.1:1"], timeout_s=0.5) as client:
        for bad_ttl in (0, -3, True):
            with pytest.raises(InvalidArgument, match="ttl_s"):
                client.lease_grant(bad_ttl)
        with pytest.raises(InvalidArgument, match="lease_id"):
            client.lease_revoke(0)
        with pytest.raises(InvalidArgument, match="lease_id"):
            client.keep_alive(-1)
        with pytest.raises(InvalidArgument, match="name"):
            client.election("")
        with pytest.raises(InvalidArgument, match="timeout_s"), client.lock("L", timeout_s=0):
            pass
