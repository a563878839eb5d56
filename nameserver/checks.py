"""Field checks the domains share: each raises :class:`~nameserver.errors.InvalidArgument`
naming the field, its value or the limit (``metaledger: job must not be empty``); and
:func:`parse_go_duration`, the durations etcd's flags and tokens take (ValueError).

The apply rules run them again inside apply (the same on every node), and the fronts run
them first, so bad input is refused before it is proposed.
"""

from __future__ import annotations

import re

from nameserver.errors import InvalidArgument

#: Longest name (job, partition, cluster, broker, topic owner, ...), in UTF-8 bytes.
MAX_NAME_BYTES = 1024


def invalid(message: str) -> InvalidArgument:
    return InvalidArgument("metaledger: " + message)


def check_name(field: str, value: str, *, nul_ok: bool = False) -> None:
    """``value`` is a non-empty name of at most :data:`MAX_NAME_BYTES` bytes, without a NUL
    character unless ``nul_ok`` (replica-group names have always accepted one)."""
    if not value:
        raise invalid(f"{field} must not be empty")
    if not nul_ok and "\x00" in value:
        raise invalid(f"{field} must not contain a NUL character")
    size = len(value.encode())
    if size > MAX_NAME_BYTES:
        raise invalid(f"{field} is too long: {size} bytes > limit {MAX_NAME_BYTES}")


def check_non_negative(field: str, value: int) -> None:
    if value < 0:
        raise invalid(f"{field} must be >= 0 ({field}: {value})")


_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_GO_UNITS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` (what etcd's duration flags take: "1h30m", "10m", "5s",
    "250ms"), in seconds. ValueError if it is not one."""
    pos, total = 0, 0.0
    for m in _GO_DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _GO_UNITS_S[m.group(2)]
        pos = m.end()
    if not text or pos != len(text):
        raise ValueError(f"{text!r} is not a duration (e.g. 1h, 30m, 90s)")
    return total
