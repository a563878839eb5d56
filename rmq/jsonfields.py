"""Typed access to the JSON of remoting headers and bodies: every field is checked for its
type and range, and a bad one raises :class:`BadRequest` naming it in words (``body:
topicConfigTable.T: readQueueNums must be an integer, got a list``), never with Python's
exception text. Values shown in a remark are short and never printed recursively. Like
the codec, this module has no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from rmq.codec import BadRequest, loads_lenient

JAVA_INT_MIN, JAVA_INT_MAX = -(2**31), 2**31 - 1
JAVA_LONG_MIN, JAVA_LONG_MAX = -(2**63), 2**63 - 1


def utf8(value: str, what: str) -> str:
    """``value`` if it can be stored as UTF-8 (a JSON ``\\ud800`` escape decodes to a lone
    surrogate, which cannot)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{what} is not valid UTF-8 text (a lone surrogate)") from None
    return value


def loads_body(body: bytes, what: str) -> Any:
    """A JSON body (fastjson or standard); anything that does not parse is a
    :class:`BadRequest` saying why in words, never Python's exception text."""
    try:
        return loads_lenient(body)
    except UnicodeDecodeError as exc:
        reason = f"it is not UTF-8 (bad byte at offset {exc.start})"
    except json.JSONDecodeError as exc:
        reason = f"{exc.msg} at offset {exc.pos}"
    except RecursionError:
        reason = "it is nested too deeply"
    except ValueError:  # an integer of more digits than Python converts (4,300)
        reason = "a number in it has too many digits"
    raise BadRequest(f"{what} body is not JSON: {reason}")


def show(value: object) -> str:
    """A short, safe description of a JSON value for a remark (never recursive)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, int):
        return str(value) if value.bit_length() < 200 else "a very long number"
    shown = repr(value)
    return shown if len(shown) <= 64 else shown[:60] + "...'"


def json_object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{where} must be a JSON object, got {show(value)}")
    return value


def optional_object(value: object, where: str) -> dict[str, Any]:
    """A JSON object (null or absent is empty)."""
    return {} if value is None else json_object(value, where)


def json_list(value: object, where: str) -> list[Any]:
    """A JSON list (null or absent is empty)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest(f"{where} must be a JSON list, got {show(value)}")
    return value


def text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise BadRequest(f"{where} must be a string, got {show(value)}")
    return utf8(value, where)


def scalar(value: object, where: str) -> str:
    """A JSON string, number or boolean as the string Java would hold."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return text(value, where)


def integer(obj: Mapping[str, Any], name: str, default: int, where: str, long: bool = False) -> int:
    """An integer field (a decimal string is accepted too, as fastjson does), in the range
    of Java's int (or long)."""
    value = obj.get(name, default)
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _DECIMAL.fullmatch(value):
        number = int(value)
    if number is None:
        raise BadRequest(f"{where}: {name} must be an integer, got {show(value)}")
    low, high = (JAVA_LONG_MIN, JAVA_LONG_MAX) if long else (JAVA_INT_MIN, JAVA_INT_MAX)
    if not low <= number <= high:
        kind = "long" if long else "int"
        raise BadRequest(f"{where}: {name} is out of the range of a Java {kind}")
    return number


def boolean(obj: Mapping[str, Any], name: str, default: bool, where: str) -> bool:
    value = obj.get(name, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise BadRequest(f"{where}: {name} must be true or false, got {show(value)}")


_DECIMAL = re.compile(r"\s*-?[0-9]{1,20}\s*", re.ASCII)
