"""Content hashes of snapshot records, per type, order-independent (:class:`RecordDigest`).

Content hash (``HASH_ALGORITHM`` = ``"blake2b-128-sum-v1"``), per type, so that any writer
(the server, a Spark job) gets the same hash for the same *set* of records in any order::

    record_hash(type, key, value) = int.from_bytes(blake2b(
        u64le(len(type_utf8)) + type_utf8 + u64le(len(key)) + key + u64le(len(value)) + value,
        digest_size=16, person=b"metaledger.snap1").digest(), "little")
    hash(type) = sum of record_hash over the type's records, mod 2**128,
                 written as 32 lowercase hex digits (most significant first)

Sums of partial digests add up, so :class:`RecordDigest` merges (a job hashes each
partition and combines the results) and takes records away again (:meth:`~RecordDigest.
discard`, for a digest kept up to date as an image changes). The sum is an integrity
check between cooperating writers, not a defence against someone forging collisions.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = [
    "HASH_ALGORITHM",
    "RecordDigest",
    "is_hash_text",
    "pack_len",
    "record_hash",
    "type_hasher",
]

#: Name of the content-hash definition above, recorded in every header.
HASH_ALGORITHM: Final = "blake2b-128-sum-v1"

_PERSON = b"metaledger.snap1"
_HASH_MOD = 2**128
_LEN = struct.Struct("<Q")
#: The u64le length prefix of the hash definition.
pack_len = _LEN.pack
_HEX_DIGITS = frozenset("0123456789abcdef")


_BASE_HASHER = hashlib.blake2b(digest_size=16, person=_PERSON)


def type_hasher(type_: str) -> Any:
    """A blake2b state that has absorbed the type's length prefix and name."""
    encoded = type_.encode()
    hasher = _BASE_HASHER.copy()
    hasher.update(_LEN.pack(len(encoded)) + encoded)
    return hasher


def is_hash_text(text: str) -> bool:
    return len(text) == 32 and _HEX_DIGITS.issuperset(text)


def record_hash(type_: str, key: bytes, value: bytes) -> int:
    """The 128-bit hash of one record (see the module docstring)."""
    hasher = type_hasher(type_)
    hasher.update(_LEN.pack(len(key)) + key + _LEN.pack(len(value)) + value)
    return int.from_bytes(hasher.digest(), "little")


class RecordDigest:
    """Per-type record counts and order-independent content hashes, built incrementally.

    ``add`` every record once (order does not matter); ``merge`` digests of disjoint parts
    to get the digest of the whole; ``discard`` takes a record added before away again.
    Types whose count is 0 do not appear in :attr:`counts` and :attr:`hashes`. Picklable.
    """

    __slots__ = ("_counts", "_hashers", "_sums")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._sums: dict[str, int] = {}
        self._hashers: dict[str, Any] = {}  # cache of type_hasher, not state

    def add(self, type_: str, key: bytes, value: bytes) -> None:
        hasher = self._hashers.get(type_) or self._start(type_)
        h = hasher.copy()
        h.update(b"".join((pack_len(len(key)), key, pack_len(len(value)), value)))
        self._sums[type_] += int.from_bytes(h.digest(), "little")
        self._counts[type_] += 1

    def discard(self, type_: str, key: bytes, value: bytes) -> None:
        """Take away one record that was added (the digest of the remaining records)."""
        hasher = self._hashers.get(type_) or self._start(type_)
        h = hasher.copy()
        h.update(b"".join((pack_len(len(key)), key, pack_len(len(value)), value)))
        self._sums[type_] -= int.from_bytes(h.digest(), "little")
        self._counts[type_] -= 1

    def _start(self, type_: str) -> Any:
        """The type's hasher, creating the type's entries (sums are reduced mod 2**128 only
        when read: adding unreduced ints is cheaper)."""
        self._counts.setdefault(type_, 0)
        self._sums.setdefault(type_, 0)
        hasher = self._hashers[type_] = type_hasher(type_)
        return hasher

    def merge(self, other: RecordDigest) -> None:
        """Add `other`'s records to this digest (in place; `other` is unchanged)."""
        for type_, count in other._counts.items():
            self._counts[type_] = self._counts.get(type_, 0) + count
            self._sums[type_] = (self._sums.get(type_, 0) + other._sums[type_]) % _HASH_MOD

    @classmethod
    def from_sums(cls, counts: Mapping[str, int], sums: Mapping[str, int]) -> RecordDigest:
        """The digest of records hashed elsewhere: per type, their count and the sum of
        their :func:`record_hash` (not yet reduced mod 2**128). For a reader that hashes
        records by type itself (``SnapshotReader.read_columns``)."""
        result = cls()
        result._counts = dict(counts)
        result._sums = dict(sums)
        return result

    @classmethod
    def combine(cls, digests: Iterable[RecordDigest]) -> RecordDigest:
        """A new digest of all the parts' records (e.g. a reduce over partitions)."""
        result = cls()
        for digest in digests:
            result.merge(digest)
        return result

    @classmethod
    def from_summary(cls, counts: Mapping[str, int], hashes: Mapping[str, str]) -> RecordDigest:
        """The digest that :attr:`counts` and :attr:`hashes` describe.

        Raises ValueError unless both name the same types and every hash is 32 lowercase
        hex digits.
        """
        if set(counts) != set(hashes):
            raise ValueError(f"counts name types {sorted(counts)}, hashes {sorted(hashes)}")
        result = cls()
        for type_, count in counts.items():
            text = hashes[type_]
            if not is_hash_text(text):
                raise ValueError(f"hash of type {type_!r} is not 32 lowercase hex digits")
            result._counts[type_] = count
            result._sums[type_] = int(text, 16)
        return result

    def _live(self) -> list[str]:
        for type_, total in self._sums.items():
            self._sums[type_] = total % _HASH_MOD
        return sorted(t for t, c in self._counts.items() if c != 0 or self._sums[t] != 0)

    @property
    def counts(self) -> dict[str, int]:
        """Records per type, sorted by type."""
        return {t: self._counts[t] for t in self._live()}

    @property
    def hashes(self) -> dict[str, str]:
        """Content hash per type (32 hex digits), sorted by type."""
        return {t: f"{self._sums[t]:032x}" for t in self._live()}

    @property
    def record_count(self) -> int:
        return sum(self._counts.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RecordDigest):
            return NotImplemented
        return self.counts == other.counts and self.hashes == other.hashes

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"RecordDigest(counts={self.counts}, hashes={self.hashes})"

    def __getstate__(self) -> tuple[dict[str, int], dict[str, int]]:
        return (self._counts, {t: total % _HASH_MOD for t, total in self._sums.items()})

    def __setstate__(self, state: tuple[dict[str, int], dict[str, int]]) -> None:
        self._counts, self._sums = state
        self._hashers = {}
