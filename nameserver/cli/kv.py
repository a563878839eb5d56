"""``metaledger put | get | del``: the etcd-style key-value commands.

The ``add_*_arguments`` and ``*_op`` functions are shared with ``txn``, whose success and
failure lines are these same commands (as in etcdctl).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, BinaryIO

from nameserver.cli._common import UsageError, make_client, non_negative_int, number_type, printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.client import Op

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers

#: ``--sort-by`` names (etcdctl's) → RangeRequest.SortTarget names.
SORT_TARGETS = {
    "KEY": "KEY",
    "VERSION": "VERSION",
    "CREATE": "CREATE",
    "MODIFY": "MOD",
    "VALUE": "VALUE",
}
SORT_ORDERS = ("ASCEND", "DESCEND")


#: A lease ID in hex, as etcdctl prints and takes it (``0x`` optional).
lease_id = number_type(
    lambda text: int(text, 16), "is not a hex lease ID", lambda v: v >= 0, " must be >= 0"
)


def add_put_arguments(
    p: argparse.ArgumentParser, *, value_from_input: bool = False
) -> argparse.ArgumentParser:
    """``put``'s arguments; with ``value_from_input`` (the ``put`` command, not a txn line)
    the value may come from stdin or ``--from-file`` (:func:`put_value`)."""
    p.add_argument("key")
    if value_from_input:
        p.add_argument(
            "value",
            nargs="?",
            help="the value; '-' or none (when stdin is not a terminal) reads it from stdin",
        )
        p.add_argument(
            "--from-file",
            metavar="PATH",
            help="read the value from this file (any size up to the server's limit)",
        )
    else:
        p.add_argument("value")
    p.add_argument("--lease", type=lease_id, default=0, metavar="ID", help="lease ID (hex)")
    p.add_argument("--prev-kv", action="store_true", help="return the previous key-value")
    return p


def add_get_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("key")
    p.add_argument("range_end", nargs="?", help="exclusive end of the range [KEY, RANGE_END)")
    p.add_argument("--prefix", action="store_true", help="every key starting with KEY")
    p.add_argument("--serializable", action="store_true", help="read locally (may be stale)")
    p.add_argument("--limit", type=non_negative_int, default=0, metavar="N")
    p.add_argument("--keys-only", action="store_true")
    p.add_argument("--count-only", action="store_true")
    p.add_argument("--sort-by", choices=tuple(SORT_TARGETS), type=str.upper)
    p.add_argument("--order", choices=SORT_ORDERS, type=str.upper)
    p.add_argument(
        "--rev",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="only the current revision is kept: N must be 0 or the current revision"
        " (a past revision is refused, a future one is out of range)",
    )
    return p


def add_del_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("key")
    p.add_argument("range_end", nargs="?", help="exclusive end of the range [KEY, RANGE_END)")
    p.add_argument("--prefix", action="store_true", help="every key starting with KEY")
    p.add_argument("--prev-kv", action="store_true", help="return the deleted key-values")
    return p


def put_value(ns: argparse.Namespace, stdin: BinaryIO | None = None) -> str | bytes:
    """The value to put: the argument, else ``--from-file``, else stdin (``-``, or no value
    while stdin is not a terminal, as etcdctl does)."""
    from_file = getattr(ns, "from_file", None)
    if from_file is not None:
        if ns.value is not None:
            raise UsageError("put: give VALUE or --from-file, not both")
        try:
            with open(from_file, "rb") as f:
                return f.read()
        except OSError as exc:
            raise UsageError(f"put: --from-file {from_file}: {exc.strerror or exc}") from None
    if ns.value is not None and ns.value != "-":
        return str(ns.value)
    source = stdin if stdin is not None else sys.stdin.buffer
    if ns.value is None and source.isatty():
        raise UsageError("put: no VALUE (give one, '-' to read stdin, or --from-file PATH)")
    return source.read()


def put_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    return {"key": ns.key, "value": ns.value, "lease": ns.lease, "prev_kv": ns.prev_kv}


def get_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    return {
        "key": ns.key,
        "range_end": ns.range_end,
        "prefix": ns.prefix,
        "serializable": ns.serializable,
        "limit": ns.limit,
        "keys_only": ns.keys_only,
        "count_only": ns.count_only,
        "sort_order": ns.order or ("ASCEND" if ns.sort_by else "NONE"),
        "sort_target": SORT_TARGETS[ns.sort_by or "KEY"],
        "revision": ns.rev,
    }


def del_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    return {"key": ns.key, "range_end": ns.range_end, "prefix": ns.prefix, "prev_kv": ns.prev_kv}


def put_op(ns: argparse.Namespace) -> Op:
    return Op.put(**put_kwargs(ns))


def get_op(ns: argparse.Namespace) -> Op:
    return Op.get(**get_kwargs(ns))


def del_op(ns: argparse.Namespace) -> Op:
    return Op.delete(**del_kwargs(ns))


def run_put(args: argparse.Namespace) -> int:
    value = put_value(args)
    with make_client(args) as client:
        result = client.put(**{**put_kwargs(args), "value": value})
    printer(args).put(result)
    return ExitCode.OK


def run_get(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        result = client.get(**get_kwargs(args))
    printer(args).get(result, count_only=args.count_only)
    return ExitCode.OK  # like etcdctl: no match is not an error


def run_del(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        result = client.delete(**del_kwargs(args))
    printer(args).delete(result)
    return ExitCode.OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    put = sub.add_parser(
        "put",
        parents=[common],
        help="write a key",
        description=(
            "Write KEY. The value is the VALUE argument, or the file given with --from-file,"
            " or stdin with VALUE '-' (or with no VALUE when stdin is not a terminal):"
            " 'metaledger put k < file', 'cat file | metaledger put k -'."
        ),
    )
    add_put_arguments(put, value_from_input=True).set_defaults(run=run_put)
    get = sub.add_parser("get", parents=[common], help="read a key or a range")
    add_get_arguments(get).set_defaults(run=run_get)
    delete = sub.add_parser("del", parents=[common], help="delete a key or a range")
    add_del_arguments(delete).set_defaults(run=run_del)
