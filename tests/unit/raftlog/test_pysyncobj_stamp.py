"""The PySyncObj engine's leader restamps what a follower forwards (``restamped``): the
command PySyncObj's ``@replicated append(item)`` makes, type byte included, comes back with
``stamp(item)`` in place of the item; any other command comes back as it was."""

from __future__ import annotations

from pysyncobj import pickle as pso_pickle
from pysyncobj.syncobj import _COMMAND_TYPE

from raftlog.pysyncobj_engine import restamped

REGULAR = bytes([_COMMAND_TYPE.REGULAR])


def append_command(item: object, func_id: int = 0) -> bytes:
    return REGULAR + pso_pickle.dumps((func_id, (item,)))


def stamp(item: bytes) -> bytes:
    return b"stamped:" + item


def test_an_append_command_gets_the_stamped_item_and_keeps_its_method() -> None:
    got = restamped(append_command(b"item", func_id=3), stamp)
    assert got[:1] == REGULAR
    assert pso_pickle.loads(got[1:]) == (3, (b"stamped:item",))


def test_other_commands_come_back_as_they_were() -> None:
    membership = bytes([_COMMAND_TYPE.MEMBERSHIP]) + b"add 127.0.0.1:1"
    no_op = bytes([_COMMAND_TYPE.NO_OP])
    not_bytes = append_command("text")
    two_args = REGULAR + pso_pickle.dumps((0, (b"a", b"b")))
    with_kwargs = REGULAR + pso_pickle.dumps((0, (b"a",), {"k": 1}))
    garbage = REGULAR + b"\x00not a pickle"
    for command in (membership, no_op, not_bytes, two_args, with_kwargs, garbage, b""):
        assert restamped(command, stamp) == command


def test_a_stamp_that_fails_leaves_the_command_as_it_came() -> None:
    def broken(_item: bytes) -> bytes:
        raise ValueError("not an item")

    command = append_command(b"item")
    assert restamped(command, broken) == command
