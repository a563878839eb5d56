"""Field checks the domains share: each raises :class:`~nameserver.errors.InvalidArgument`
naming the field, its value or the limit (``metaledger: job must not be empty``).

The apply rules run them again inside apply (the same on every node), and the fronts run
them first, so bad input is refused before it is proposed.
"""

from __future__ import annotations

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
