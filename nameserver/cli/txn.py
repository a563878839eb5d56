"""``metaledger txn``: etcdctl's transaction syntax, read from stdin or ``--file``.

    <txn>     ::= <compare>* "\\n" <op>* "\\n" <op>* "\\n"      compares, success ops, failure ops
    <compare> ::= <target> "(" <key> ")" ("=" | "!=" | "<" | ">") <operand>
    <target>  ::= "value" | "val" | "version" | "ver" | "create" | "c" | "mod" | "m" | "lease"
    <op>      ::= a ``put``, ``get`` or ``del`` command line with its flags
    <key>, <operand> ::= a Go-quoted string ("..." with escapes, or `...`)

A blank line ends a section, as in etcdctl (so a txn without compares starts with one). The
parser is pure: ``parse_txn(text)`` returns a :class:`TxnSpec` or raises :class:`TxnSyntaxError`.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn, TextIO, cast

from nameserver.cli import kv
from nameserver.cli._common import make_client, printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.client import ClientError, Compare, CompareOp, CompareTarget, Comparison, Op

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers


class TxnSyntaxError(ValueError):
    """The txn text does not follow etcdctl's syntax; the message names the line."""


@dataclass(frozen=True)
class TxnSpec:
    compares: list[Comparison] = field(default_factory=list)
    success: list[Op] = field(default_factory=list)
    failure: list[Op] = field(default_factory=list)


_QUOTED = r'"(?:[^"\\]|\\.)*"|`[^`]*`'
_COMPARE_RE = re.compile(
    rf"^(?P<target>[A-Za-z]+)\((?P<key>{_QUOTED})\)\s*(?P<op>!=|=|<|>)\s*(?P<operand>{_QUOTED}|\S+)$"
)
_TARGET_ALIASES = {
    "value": "value",
    "val": "value",
    "version": "version",
    "ver": "version",
    "create": "create",
    "c": "create",
    "mod": "mod",
    "m": "mod",
    "lease": "lease",
}
_SIMPLE_ESCAPES = {
    "a": 0x07,
    "b": 0x08,
    "f": 0x0C,
    "n": 0x0A,
    "r": 0x0D,
    "t": 0x09,
    "v": 0x0B,
    "\\": 0x5C,
    '"': 0x22,
    "'": 0x27,
}
_HEX = frozenset("0123456789abcdefABCDEF")


def go_unquote(token: str) -> bytes:
    """Decode a Go-quoted string (``strconv.Unquote``): ``"a\\tb\\x00"`` or a raw `` `...` ``."""
    if len(token) >= 2 and token[0] == token[-1] == "`":
        return token[1:-1].encode("utf-8", "surrogateescape")
    if len(token) < 2 or token[0] != '"' or token[-1] != '"':
        raise TxnSyntaxError(f"{token!r} is not a quoted string")
    body, out, i = token[1:-1], bytearray(), 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode("utf-8", "surrogateescape")
            i += 1
            continue
        esc = body[i + 1 : i + 2]
        if esc in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[esc])
            i += 2
        elif esc in ("x", "u", "U"):
            width = {"x": 2, "u": 4, "U": 8}[esc]
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or not set(digits) <= _HEX:
                raise TxnSyntaxError(f"bad \\{esc} escape in {token}")
            value = int(digits, 16)
            if esc == "x":
                out.append(value)
            elif value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
                raise TxnSyntaxError(f"\\{esc}{digits} is not a valid code point in {token}")
            else:
                out += chr(value).encode()
            i += 2 + width
        elif esc and esc in "01234567":
            digits = body[i + 1 : i + 4]
            if len(digits) != 3 or not set(digits) <= set("01234567") or int(digits, 8) > 0xFF:
                raise TxnSyntaxError(f"bad octal escape in {token}")
            out.append(int(digits, 8))
            i += 4
        else:
            raise TxnSyntaxError(f"unknown escape \\{esc} in {token}")
    return bytes(out)


_ARG_RE = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^'\"\s]\S*[^'\"\s]?")


def argify(line: str) -> list[str]:
    """Split an op line like etcdctl: ``"double"`` (Go escapes), ``'single'`` or bare words."""
    args = []
    for token in _ARG_RE.findall(line):
        if token.startswith('"'):
            args.append(go_unquote(token).decode("utf-8", "surrogateescape"))
        elif token.startswith("'"):
            args.append(token[1:-1])
        else:
            args.append(token)
    return args


def parse_compare(line: str) -> Comparison:
    m = _COMPARE_RE.match(line.strip())
    if m is None:
        raise TxnSyntaxError(f"malformed comparison: {line.strip()}")
    target = _TARGET_ALIASES.get(m["target"])
    if target is None:
        raise TxnSyntaxError(f"malformed comparison: {line.strip()} (unknown target {m['target']})")
    key = go_unquote(m["key"])
    raw = m["operand"]
    operand_bytes = go_unquote(raw) if raw[0] in '"`' else raw.encode()
    operand: int | bytes = operand_bytes
    if target != "value":
        try:
            operand = int(operand_bytes.decode())
        except (UnicodeDecodeError, ValueError):
            raise TxnSyntaxError(
                f"malformed comparison: {line.strip()} ({target} needs an integer)"
            ) from None
    try:
        left: CompareTarget = getattr(Compare, target)(key)
        return left.compare(cast(CompareOp, m["op"]), operand)
    except ClientError as exc:  # an empty key
        raise TxnSyntaxError(f"malformed comparison: {line.strip()} ({exc.message})") from None


class _OpParser(argparse.ArgumentParser):
    """An argparse parser that raises instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise TxnSyntaxError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise TxnSyntaxError(message or "unexpected exit")


@functools.cache
def _op_parser() -> _OpParser:
    parser = _OpParser(prog="txn", add_help=False)
    sub = parser.add_subparsers(dest="op", required=True, parser_class=_OpParser)
    kv.add_put_arguments(sub.add_parser("put", add_help=False)).set_defaults(to_op=kv.put_op)
    kv.add_get_arguments(sub.add_parser("get", add_help=False)).set_defaults(to_op=kv.get_op)
    kv.add_del_arguments(sub.add_parser("del", add_help=False)).set_defaults(to_op=kv.del_op)
    return parser


def parse_op(line: str) -> Op:
    ns = _op_parser().parse_args(argify(line))
    try:
        op: Op = ns.to_op(ns)
    except ClientError as exc:  # e.g. both RANGE_END and --prefix
        raise TxnSyntaxError(exc.message) from None
    return op


def parse_txn(text: str) -> TxnSpec:
    spec = TxnSpec()
    section = 0  # 0 compares, 1 success, 2 failure
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            section += 1
            if section == 3:
                break
            continue
        try:
            if section == 0:
                spec.compares.append(parse_compare(line))
            else:
                (spec.success if section == 1 else spec.failure).append(parse_op(line))
        except TxnSyntaxError as exc:
            raise TxnSyntaxError(f"line {lineno}: {exc}") from None
    return spec


_PROMPTS = ("compares:", "success requests (get, put, del):", "failure requests (get, put, del):")


def read_txn(stream: TextIO, prompt_to: TextIO | None = None) -> str:
    """Read the three sections from ``stream``; with ``prompt_to``, prompt like etcdctl -i."""
    lines: list[str] = []
    for section, prompt in enumerate(_PROMPTS):
        if prompt_to is not None:
            print(("\n" if section else "") + prompt, file=prompt_to, flush=True)
        while True:
            line = stream.readline()
            if not line:
                return "".join(lines)
            lines.append(line)
            if not line.strip():
                break
    return "".join(lines)


def run_txn(args: argparse.Namespace) -> int:
    if args.file:
        with open(args.file, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    else:
        text = read_txn(sys.stdin, sys.stderr if args.interactive else None)
    try:
        spec = parse_txn(text)
    except TxnSyntaxError as exc:
        print(f"metaledger: txn: {exc}", file=sys.stderr)
        return ExitCode.INVALID
    with make_client(args) as client:
        result = client.txn(spec.compares, spec.success, spec.failure)
    printer(args).txn(result)
    if not result.succeeded and args.exit_code_on_failure:
        return ExitCode.TXN_FAILED
    return ExitCode.OK


TXN_HELP = """\
Run a transaction written in etcdctl's txn syntax, read from stdin (or --file): the
comparisons, a blank line, the operations to run if all comparisons hold, a blank line, the
operations to run otherwise, a blank line. A txn without comparisons starts with a blank line.

  comparison  value|version|create|mod|lease ( "KEY" ) =|!=|<|> OPERAND
              (short forms: val, ver, c, m; KEY and a value OPERAND are quoted strings)
  operation   a put, get or del command line with its flags

  printf 'mod("k") = "0"\\n\\nput k v1\\n\\nget k\\n\\n' | metaledger txn
"""


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "txn",
        parents=[common],
        help="run a transaction written in etcdctl's txn syntax",
        description=TXN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-f", "--file", help="read the txn from this file instead of stdin")
    p.add_argument("-i", "--interactive", action="store_true", help="prompt for each section")
    p.add_argument(
        "--exit-code-on-failure",
        action="store_true",
        help=f"exit {int(ExitCode.TXN_FAILED)} when the failure branch ran (default: exit 0)",
    )
    p.set_defaults(run=run_txn)
