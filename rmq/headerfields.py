"""The machinery of :mod:`rmq.headers`: a header class's fields, and reading and writing them.

:mod:`rmq.headers` holds RocketMQ's table of header dataclasses and stays Python; this module
holds what runs per request (the field loop of :func:`read_fields` and :func:`write_fields`,
the number and text checks) and is compiled in the mypyc build (``scripts/mypyc_modules.txt``).
The table cannot be compiled itself: mypyc hands ``@dataclass`` its own annotations, which
lose ``ClassVar`` (each class's ``code`` would become a field) and every ``X | None`` (the
field kinds :func:`field_spec` reads). The header classes are plain Python classes either
way, so the loop builds them with ``object.__new__`` and sets their slots one by one in both
builds.

Errors: :class:`~rmq.codec.BadRequest` naming the field (missing, not a number, out of its
Java range, not a boolean, not UTF-8), as RocketMQ's ``decodeCommandCustomHeader``;
``TypeError`` for a header class this machinery cannot read (a programming error).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from rmq.codec import BadRequest, parse_bool_field, parse_int_field
from rmq.jsonfields import JAVA_INT_MAX, JAVA_INT_MIN, JAVA_LONG_MAX, JAVA_LONG_MIN

T = TypeVar("T")


def ext(
    name: str, default: Any = dataclasses.MISSING, *, int32: bool = False, read: bool = True
) -> Any:
    """A header field travelling as ext field ``name``; without a default it is required
    (RocketMQ's @CFNotNull)."""
    return field(default=default, metadata={"ext": name, "int32": int32, "read": read})


def parse_text(name: str, value: str) -> str:
    """Text that can be stored as UTF-8 (a JSON ``\\ud800`` escape decodes to a lone
    surrogate, which cannot)."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest(
                f"the custom field <{name}> is not valid UTF-8 text (a lone surrogate)"
            ) from None
    return value


def parse_long(name: str, value: str) -> int:
    number = parse_int_field(name, value)
    if not JAVA_LONG_MIN <= number <= JAVA_LONG_MAX:
        raise BadRequest(f"the custom field <{name}> is out of the range of a long")
    return number


def parse_int32(name: str, value: str) -> int:
    number = parse_int_field(name, value)
    if not JAVA_INT_MIN <= number <= JAVA_INT_MAX:
        raise BadRequest(f"the custom field <{name}> is out of the int range: {number}")
    return number


#: field kinds (how a field is read and written): a small int, so the compiled loop calls the
#: parsers directly rather than through a function object per field
TEXT: Final = 0
LONG: Final = 1
INT32: Final = 2
BOOL: Final = 3


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a header class: its attribute, its ext field name, its kind, and its
    default (``dataclasses.MISSING`` when required)."""

    attr: str
    name: str
    kind: int
    required: bool
    read: bool
    default: Any


#: each header class's fields, worked out on first use
_SPECS: Final[dict[type, tuple[Field, ...]]] = {}


def field_spec(cls: type) -> tuple[Field, ...]:
    """The fields of a header class, worked out once per class."""
    spec = _SPECS.get(cls)
    if spec is not None:
        return spec
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        kinds = set(typing.get_args(hints[f.name]) or (hints[f.name],)) - {type(None)}
        if kinds == {bool}:
            kind = BOOL
        elif kinds == {int}:
            kind = INT32 if f.metadata["int32"] else LONG
        elif kinds == {str}:
            kind = TEXT
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: a header field is str, int or bool")
        required = f.default is dataclasses.MISSING
        if required and not f.metadata["read"]:
            raise TypeError(f"{cls.__name__}.{f.name}: a field not read needs a default")
        out.append(Field(f.name, f.metadata["ext"], kind, required, f.metadata["read"], f.default))
    spec = _SPECS[cls] = tuple(out)
    return spec


def parse_value(kind: int, name: str, raw: str) -> Any:
    """Ext field ``name``'s text ``raw`` read as a field of ``kind``."""
    if kind == TEXT:
        return parse_text(name, raw)
    if kind == INT32:
        return parse_int32(name, raw)
    if kind == LONG:
        return parse_long(name, raw)
    return parse_bool_field(name, raw)


def read_fields(
    cls: type[T],
    ext_fields: Mapping[str, str],
    spec: tuple[Field, ...],
    keys: tuple[str, ...] | None,
) -> T:
    """The header of ``fields``, each field of ``spec`` read under its name, or under the
    parallel ``keys`` (the same fields under other names: SEND_MESSAGE_V2's)."""
    # Slots set one by one (no __init__, no keyword dict): this is per request on the
    # broker's send and pull paths.
    fields = ext_fields if isinstance(ext_fields, dict) else dict(ext_fields)
    header = object.__new__(cls)
    n = 0
    for f in spec:
        raw = fields.get(f.name if keys is None else keys[n]) if f.read else None
        if raw is not None:
            setattr(header, f.attr, parse_value(f.kind, f.name, raw))
        elif f.required:
            raise BadRequest(f"the custom field <{f.name}> is null")
        else:
            setattr(header, f.attr, f.default)
        n += 1
    return header


def write_fields(header: object, spec: tuple[Field, ...]) -> dict[str, str]:
    """The ext fields of ``header``, as Java writes them (None left out), in field order."""
    out: dict[str, str] = {}
    for f in spec:
        value = getattr(header, f.attr)
        if value is not None:
            out[f.name] = ("true" if value else "false") if f.kind == BOOL else str(value)
    return out
