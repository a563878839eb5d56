"""The mypyc build of the typed headers' machinery agrees with its Python source.

The headers' half of :mod:`tests.unit.test_mypyc_agreement` (same helpers, same rule).
``rmq.headers`` (the table of header classes) stays Python and ``rmq.headerfields`` (the field
loop and checks) is compiled, so the two sides here are ``rmq.headers`` as imported (on the
compiled machinery in the mypyc build) and the sources of both loaded beside it
(:func:`bench.mypyc_bench.source_family`). Every header class reads generated ext fields
(missing, numbers at and past Java's ranges, booleans in any case, lone surrogates,
SEND_MESSAGE_V2's short names) to equal headers or equal errors, and writes them back to
equal ext fields and frames.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bench.mypyc_bench import source_family
from rmq.codec import RemotingCommand, encode
from tests.unit.test_mypyc_agreement import SETTINGS, agree, outcome, plain

FAMILY = ("rmq.headerfields", "rmq.headers")


def _sides() -> tuple[ModuleType, ModuleType]:
    return importlib.import_module("rmq.headers"), source_family(FAMILY)


def _classes(m: ModuleType) -> dict[str, Any]:
    return {
        name: c
        for name, c in vars(m).items()
        if isinstance(c, type) and issubclass(c, m.Header) and c is not m.Header
    }


CLASSES = sorted(_classes(importlib.import_module("rmq.headers")))
RAW = st.one_of(
    st.sampled_from(
        [
            *("", "0", "1", "-1", " 7", "+5", "1.5", "x", "true", "TRUE", "False", "0x10"),
            *("2147483647", "2147483648", "-2147483649", "9223372036854775807"),
            *("9223372036854775808", "-9223372036854775809", "\ud800", "\uff11", "é"),
        ]
    ),
    st.text(max_size=8),
)


def _written(header: Any) -> Any:
    """What a header writes: its ext fields, and a request's and a response's frames."""
    request = header.request(b"body", opaque=3)
    answer = header.response(RemotingCommand(10, opaque=5), 0, "ok")
    return header.to_ext_fields(), encode(request), encode(answer)


def test_every_class_has_the_same_fields_in_both_builds() -> None:
    imported, source = _sides()
    for m in (imported, source):
        assert sorted(_classes(m)) == CLASSES
    assert imported.field_spec is not source.field_spec
    for name in CLASSES:
        specs = [
            [
                (f.attr, f.name, f.kind, f.required, f.read, repr(f.default))
                for f in m.field_spec(_classes(m)[name])
            ]
            for m in (imported, source)
        ]
        assert specs[0] == specs[1], name


@SETTINGS
@given(data=st.data(), name=st.sampled_from(CLASSES))
def test_headers_read_and_write_alike(data: st.DataObject, name: str) -> None:
    imported, source = _sides()
    cls = _classes(imported)[name]
    ext: dict[str, str] = {}
    for f in imported.field_spec(cls):
        raw = data.draw(st.none() | RAW)
        if raw is not None:
            ext[f.name] = raw
    extra = data.draw(st.dictionaries(st.sampled_from(["zz", "a", "n", "topic"]), RAW))
    fields = {**extra, **ext}
    got = [outcome(_classes(m)[name].from_fields, fields) for m in (imported, source)]
    assert got[0] == got[1]
    if got[0][0] == "ok":
        headers = [_classes(m)[name].from_fields(fields) for m in (imported, source)]
        assert plain(_written(headers[0])) == plain(_written(headers[1]))
    for code in (10, 11, 310, 320):
        command = RemotingCommand(code, ext_fields=fields)
        sides = [outcome(_classes(m)[name].from_command, command) for m in (imported, source)]
        assert sides[0] == sides[1], code


@SETTINGS
@given(
    values=st.lists(st.none() | RAW, min_size=14, max_size=14),
    long_names=st.booleans(),
    code=st.sampled_from([10, 310, 320]),
)
def test_send_headers_in_both_forms(values: list[str | None], long_names: bool, code: int) -> None:
    imported, source = _sides()
    v2 = imported.V2_FIELDS
    fields = {
        (v2[short] if long_names else short): raw
        for short, raw in zip(v2, values, strict=True)
        if raw is not None
    }
    command = RemotingCommand(code, ext_fields=fields)
    got = [outcome(m.SendMessageHeader.from_command, command) for m in (imported, source)]
    assert got[0] == got[1]
    if got[0][0] == "ok":
        headers = [m.SendMessageHeader.from_command(command) for m in (imported, source)]
        assert [encode(h.request_v2(b"x")) for h in headers] == [
            encode(headers[0].request_v2(b"x"))
        ] * 2


@SETTINGS
@given(kind=st.integers(0, 3), raw=RAW)
def test_field_values(kind: int, raw: str) -> None:
    agree("rmq.headerfields", "parse_value", kind, "f", raw)
    for fn in ("parse_text", "parse_long", "parse_int32"):
        agree("rmq.headerfields", fn, "f", raw)
