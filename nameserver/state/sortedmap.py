"""Immutable, persistent sorted map from ``bytes`` keys to arbitrary values.

One module over 500 lines: the tree, its iterators and its bulk builders are one data
structure with shared invariants; split, each part would reach into the others' nodes.

This is the kv sub-image of the immutable metadata image: readers grab a
reference to a published :class:`PersistentSortedMap` and read it without any
lock, while a writer derives a new version with :meth:`PersistentSortedMap.update`
that shares every untouched part of the old one.

Layout
------
The keys live in sorted *chunks* (leaves): a leaf is a pair of parallel tuples
``(keys, values)`` with strictly increasing ``bytes`` keys and at most
``chunk_size`` entries. The chunks are indexed by a shallow persistent B+tree:
an inner node is a pair ``(maxes, children)`` where ``maxes[i]`` is the largest
key under ``children[i]``, with at most ``fanout`` children. All leaves are at
the same depth. Leaves and inner nodes therefore have the same shape (a sorted
key tuple plus a parallel payload tuple), and the same split/merge code serves
both. With the defaults (256 keys per chunk, fanout 64) a 1M-key map built by
:meth:`PersistentSortedMap.from_sorted_items` is three levels deep: a root over
62 inner nodes over 3907 chunks.

* Lookups bisect one node per level, then the chunk: ``O(log n)``.
* An update of ``k`` keys rewrites only the chunks those keys fall in
  (``O(k * chunk_size)``) and the inner nodes on their paths (path copying,
  ``O(k * fanout * height)``); every other node is shared with the old version.
  This also bounds the flat "tuple of chunks" cost of ``O(n / chunk_size)``.
* Nodes that overflow are split evenly into the fewest nodes that fit; nodes
  that become empty are dropped; a node left at most a quarter full is merged
  with an adjacent sibling when the result fits. The tree grows a level when
  the root splits and shrinks when the root is left with one child.

Concurrency
-----------
Everything reachable from a map is an immutable tuple (or a value supplied by
the caller). :meth:`update` builds new nodes in private lists and freezes them
into tuples before the new map is created, so a published map is never
mutated and may be read from any number of threads while a writer derives new
versions. (Stored *values* are the caller's objects; the map does not copy or
freeze them.)
"""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, Final, Generic, TypeAlias, TypeVar, overload

__all__ = ["DEFAULT_CHUNK_SIZE", "DEFAULT_FANOUT", "PersistentSortedMap", "is_strictly_increasing"]

V = TypeVar("V")
D = TypeVar("D")

DEFAULT_CHUNK_SIZE: Final = 256
"""Default maximum number of keys per chunk (leaf)."""

DEFAULT_FANOUT: Final = 64
"""Default maximum number of children per inner node (capped at ``chunk_size``)."""

MIN_NODE_SIZE: Final = 2

# A chunk receiving at most this many operations is edited on a list copy
# (bisect + insert/delete, each an O(chunk_size) memmove); a chunk receiving
# more goes through a dict and one C-level sort, which has a much lower
# constant per key than repeated inserts into a growing list.
_SMALL_BATCH: Final = 32

_FROM_START: Final = b"\x00"
"""etcd's ``range_end`` meaning "every key >= start"."""

# A node is ``(keys, payload)``: for a leaf the payload holds the values, for
# an inner node the children (``keys[i]`` is the largest key under child i).
_Node: TypeAlias = tuple[tuple[bytes, ...], tuple[Any, ...]]

_MISSING: Final[Any] = object()


def is_strictly_increasing(keys: Sequence[bytes]) -> bool:
    """True if every key is less than the next (at C speed: no Python loop per key)."""
    return all(map(operator.lt, keys, islice(keys, 1, None)))


def _check_key(key: object) -> bytes:
    if not isinstance(key, bytes):
        raise TypeError(f"keys must be bytes, got {type(key).__name__}")
    return key


def _check_size(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int")
    if value < MIN_NODE_SIZE:
        raise ValueError(f"{name} must be >= {MIN_NODE_SIZE}, got {value}")
    return value


def _split(keys: Sequence[bytes], payload: Sequence[Any], cap: int) -> list[_Node]:
    """Cut parallel sorted sequences into the fewest evenly sized nodes of at
    most ``cap`` entries (no node for empty input)."""
    n = len(keys)
    if n <= cap:
        return [(tuple(keys), tuple(payload))] if n else []
    pieces = -(-n // cap)
    base, extra = divmod(n, pieces)
    out: list[_Node] = []
    lo = 0
    for p in range(pieces):
        hi = lo + base + (1 if p < extra else 0)
        out.append((tuple(keys[lo:hi]), tuple(payload[lo:hi])))
        lo = hi
    return out


def _emit(node: _Node, out_k: list[bytes], out_c: list[_Node], cap: int, low: int) -> None:
    """Append a non-empty node to a parent under construction, merging it into
    the previous sibling if either holds at most ``low`` entries and the
    result fits in ``cap``."""
    nk = node[0]
    if out_c:
        prev = out_c[-1]
        pk = prev[0]
        if (len(pk) <= low or len(nk) <= low) and len(pk) + len(nk) <= cap:
            out_c[-1] = (pk + nk, prev[1] + node[1])
            out_k[-1] = nk[-1]
            return
    out_c.append(node)
    out_k.append(nk[-1])


def _apply(
    ks: tuple[bytes, ...],
    vs: tuple[V, ...],
    op_keys: list[bytes],
    a: int,
    b: int,
    put_map: dict[bytes, V],
) -> tuple[Sequence[bytes], list[V]] | None:
    """Apply the sorted operations ``op_keys[a:b]`` to one chunk.

    A key in ``put_map`` is put, any other key deleted. Returns the new keys and
    values, or ``None`` if the chunk is unchanged (only absent keys deleted).
    """
    if b - a <= _SMALL_BATCH:
        # The keys are copied only when one is inserted or deleted: a chunk whose puts all
        # overwrite keeps (shares) its key tuple, the common case of a busy key space.
        kl: list[bytes] | None = None
        vl: list[V] | None = None
        j = 0
        for idx in range(a, b):
            k = op_keys[idx]
            cur = ks if kl is None else kl
            j = bisect_left(cur, k, j)
            found = j < len(cur) and cur[j] == k
            if k in put_map:
                if vl is None:
                    vl = list(vs)
                if found:
                    vl[j] = put_map[k]
                else:
                    if kl is None:
                        kl = list(ks)
                    kl.insert(j, k)
                    vl.insert(j, put_map[k])
                j += 1
            elif found:
                if kl is None:
                    kl = list(ks)
                if vl is None:
                    vl = list(vs)
                del kl[j]
                del vl[j]
        if vl is None:
            return None
        return (ks if kl is None else kl), vl

    d = dict(zip(ks, vs, strict=True))
    touched = False
    for idx in range(a, b):
        k = op_keys[idx]
        if k in put_map:
            d[k] = put_map[k]
            touched = True
        elif d.pop(k, _MISSING) is not _MISSING:
            touched = True
    if not touched:
        return None
    # The dict holds the chunk's sorted keys followed by the new keys in sorted
    # order: two runs, which the C-level sort merges in linear time.
    nk = sorted(d)
    return nk, [d[k] for k in nk]


class PersistentSortedMap(Generic[V]):
    """An immutable sorted map ``bytes -> V`` with cheap, structure-sharing updates.

    Build one with :meth:`empty` or :meth:`from_sorted_items`; derive new
    versions with :meth:`update` (or :meth:`set` / :meth:`delete`). A map is
    never modified after construction.
    """

    __slots__ = ("_chunk_size", "_fanout", "_height", "_len", "_root")

    _root: _Node | None
    _height: int
    _len: int
    _chunk_size: int
    _fanout: int

    def __init__(
        self, root: _Node | None, height: int, length: int, chunk_size: int, fanout: int
    ) -> None:
        """Internal constructor; use :meth:`empty` or :meth:`from_sorted_items`."""
        self._root = root
        self._height = height
        self._len = length
        self._chunk_size = chunk_size
        self._fanout = fanout

    # ------------------------------------------------------------------ build

    @staticmethod
    def _sizes(chunk_size: int, fanout: int | None) -> tuple[int, int]:
        chunk_size = _check_size("chunk_size", chunk_size)
        if fanout is None:
            fanout = min(chunk_size, DEFAULT_FANOUT)
        return chunk_size, _check_size("fanout", fanout)

    @classmethod
    def empty(
        cls, chunk_size: int = DEFAULT_CHUNK_SIZE, fanout: int | None = None
    ) -> PersistentSortedMap[V]:
        """Return an empty map.

        ``chunk_size`` bounds the keys per chunk, ``fanout`` the children per
        inner node (default ``min(chunk_size, 64)``). Maps derived from this
        one keep both settings.
        """
        chunk_size, fanout = cls._sizes(chunk_size, fanout)
        return cls(None, 0, 0, chunk_size, fanout)

    @classmethod
    def from_sorted_items(
        cls,
        items: Iterable[tuple[bytes, V]],
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        fanout: int | None = None,
    ) -> PersistentSortedMap[V]:
        """Bulk-build a map from ``(key, value)`` pairs in strictly increasing key order.

        ``O(n)``; chunks and inner nodes are packed full. Raises
        :class:`ValueError` if the keys are not strictly increasing (this
        includes duplicates) and :class:`TypeError` if a key is not ``bytes``.
        """
        pairs = items if isinstance(items, list) else list(items)
        return cls.from_columns([k for k, _ in pairs], [v for _, v in pairs], chunk_size, fanout)

    @classmethod
    def from_columns(
        cls,
        keys: list[bytes],
        values: list[V],
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        fanout: int | None = None,
    ) -> PersistentSortedMap[V]:
        """:meth:`from_sorted_items` from two parallel lists (keys strictly increasing), which
        it neither copies nor keeps: restoring a snapshot builds a big map this way without
        a million ``(key, value)`` tuples. Raises ValueError, TypeError like it."""
        chunk_size, fanout = cls._sizes(chunk_size, fanout)
        if len(keys) != len(values):
            raise ValueError(f"from_columns: {len(keys)} keys but {len(values)} values")
        for k in keys:
            if not isinstance(k, bytes):
                _check_key(k)
        if not is_strictly_increasing(keys):
            raise ValueError("from_sorted_items: keys must be strictly increasing")
        root, height = cls._build(_split(keys, values, chunk_size), 0, fanout)
        return cls(root, height, len(keys), chunk_size, fanout)

    @staticmethod
    def _build(nodes: list[_Node], height: int, fanout: int) -> tuple[_Node | None, int]:
        """Stack parents over same-height ``nodes`` until one root is left."""
        while len(nodes) > 1:
            nodes = _split([n[0][-1] for n in nodes], nodes, fanout)
            height += 1
        if not nodes:
            return None, 0
        root = nodes[0]
        while height and len(root[0]) == 1:
            root = root[1][0]
            height -= 1
        return root, height

    # ------------------------------------------------------------------ reads

    @property
    def chunk_size(self) -> int:
        """Maximum number of keys per chunk."""
        return self._chunk_size

    @property
    def fanout(self) -> int:
        """Maximum number of children per inner node."""
        return self._fanout

    @property
    def height(self) -> int:
        """Number of inner-node levels above the chunks (0: a single chunk or empty)."""
        return self._height

    @property
    def chunk_count(self) -> int:
        """Number of chunks, ``O(n / chunk_size)`` (for tests and diagnostics)."""
        return sum(1 for _ in self._leaves_from(b""))

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(len={self._len}, height={self._height}, "
            f"chunk_size={self._chunk_size}, fanout={self._fanout})"
        )

    @overload
    def get(self, key: bytes) -> V | None: ...
    @overload
    def get(self, key: bytes, default: D) -> V | D: ...
    def get(self, key: bytes, default: object = None) -> object:
        """Return the value for ``key``, or ``default`` if absent."""
        node = self._root
        if node is None:
            return default
        for _ in range(self._height):
            ks, children = node
            i = bisect_left(ks, key)
            if i == len(ks):
                return default
            node = children[i]
        ks, vs = node
        j = bisect_left(ks, key)
        if j < len(ks) and ks[j] == key:
            return vs[j]
        return default

    def __getitem__(self, key: bytes) -> V:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, bytes):
            return False
        return self.get(key, _MISSING) is not _MISSING

    def _leaves_from(self, start: bytes) -> Iterator[tuple[_Node, int]]:
        """Yield ``(chunk, i)`` for the chunks holding keys ``>= start``, in order,
        where ``i`` is the index of the first such key (0 after the first chunk)."""
        node = self._root
        if node is None:
            return
        height = self._height
        stack: list[tuple[tuple[_Node, ...], int]] = []
        for _ in range(height):
            ks, children = node
            i = bisect_left(ks, start)
            if i == len(ks):
                return
            stack.append((children, i))
            node = children[i]
        yield node, bisect_left(node[0], start)
        while stack:
            children, i = stack.pop()
            i += 1
            if i < len(children):
                stack.append((children, i))
                node = children[i]
                while len(stack) < height:
                    stack.append((node[1], 0))
                    node = node[1][0]
                yield node, 0

    def __iter__(self) -> Iterator[bytes]:
        """Iterate over the keys in increasing order."""
        for (ks, _), _i in self._leaves_from(b""):
            yield from ks

    def keys(self) -> Iterator[bytes]:
        """Iterate over the keys in increasing order."""
        return iter(self)

    def values(self) -> Iterator[V]:
        """Iterate over the values in key order."""
        for (_, vs), _i in self._leaves_from(b""):
            yield from vs

    def items(self) -> Iterator[tuple[bytes, V]]:
        """Iterate over ``(key, value)`` pairs in key order."""
        for (ks, vs), _i in self._leaves_from(b""):
            yield from zip(ks, vs, strict=True)

    def first_key(self) -> bytes | None:
        """Smallest key, or ``None`` if the map is empty."""
        node = self._root
        if node is None:
            return None
        for _ in range(self._height):
            node = node[1][0]
        return node[0][0]

    def last_key(self) -> bytes | None:
        """Largest key, or ``None`` if the map is empty."""
        return None if self._root is None else self._root[0][-1]

    def _range_end(self, start: bytes, end: bytes | None) -> bytes | bool | None:
        """Validate ``range`` arguments: ``False`` if the range is empty, ``None``
        if unbounded above, ``True`` for the single key ``start``, else ``end``."""
        _check_key(start)
        if end is None:
            return True
        _check_key(end)
        if end == _FROM_START:
            return None
        if end <= start:
            return False
        return end

    def range(self, start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, V]]:
        """Iterate ``(key, value)`` pairs in key order, with etcd range semantics.

        * ``end is None``: only the key ``start`` (if present);
        * ``end == b"\\x00"``: every key ``>= start``;
        * otherwise: every key ``k`` with ``start <= k < end`` (nothing if
          ``end <= start``; in particular ``end == b""`` selects nothing, so a
          caller translating an etcd request must map an empty ``range_end``
          to ``None``).

        Arguments are validated eagerly; iteration is lazy and reads only this
        (immutable) version, so it is unaffected by later updates.
        """
        stop = self._range_end(start, end)
        if stop is False:
            return iter(())
        if stop is True:
            value = self.get(start, _MISSING)
            return iter(()) if value is _MISSING else iter(((start, value),))
        return self._iter_range(start, stop)

    def _iter_range(self, start: bytes, stop: bytes | None) -> Iterator[tuple[bytes, V]]:
        for (ks, vs), i in self._leaves_from(start):
            if stop is None or ks[-1] < stop:
                if i:
                    yield from zip(ks[i:], vs[i:], strict=True)
                else:
                    yield from zip(ks, vs, strict=True)
            else:
                j = bisect_left(ks, stop)
                yield from zip(ks[i:j], vs[i:j], strict=True)
                return

    def count_range(self, start: bytes, end: bytes | None = None) -> int:
        """Number of keys :meth:`range` would yield, without materialising them.

        ``O(log n + m / chunk_size)`` for a range of ``m`` keys.
        """
        stop = self._range_end(start, end)
        if stop is False:
            return 0
        if stop is True:
            return 1 if start in self else 0
        count = 0
        for (ks, _), i in self._leaves_from(start):
            if stop is None or ks[-1] < stop:
                count += len(ks) - i
            else:
                return count + bisect_left(ks, stop) - i
        return count

    # ----------------------------------------------------------------- writes

    def set(self, key: bytes, value: V) -> PersistentSortedMap[V]:
        """Return a new map with ``key`` mapped to ``value``."""
        return self.update(((key, value),))

    def delete(self, key: bytes) -> PersistentSortedMap[V]:
        """Return a map without ``key`` (``self`` if it is absent)."""
        return self.update((), (key,))

    def update(
        self,
        puts: Mapping[bytes, V] | Iterable[tuple[bytes, V]] = (),
        deletes: Iterable[bytes] = (),
    ) -> PersistentSortedMap[V]:
        """Return a new map with ``deletes`` removed and then ``puts`` applied.

        A key both deleted and put ends up with the put value; if ``puts``
        repeats a key the last value wins; deleting an absent key is a no-op.
        If nothing is put and no present key is deleted, ``self`` is returned;
        otherwise a new map (a put of an equal value still makes a new
        version). ``self`` is never modified.

        Cost for ``k`` operations: ``O(k log k)`` to sort them plus
        ``O(k * (chunk_size + fanout * height))`` to rebuild the touched
        chunks and their paths; all other nodes are shared.
        """
        put_map: dict[bytes, V] = {}
        # a dict first: isinstance against the Mapping ABC is slow (the apply path's case)
        for k, v in puts.items() if type(puts) is dict or isinstance(puts, Mapping) else puts:
            put_map[_check_key(k)] = v
        del_set: set[bytes] = set()
        for k in deletes:
            if _check_key(k) not in put_map:
                del_set.add(k)
        if not put_map and not del_set:
            return self

        cls = type(self)
        if self._root is None:
            if not put_map:
                return self
            ks = sorted(put_map)
            leaves = _split(ks, [put_map[k] for k in ks], self._chunk_size)
            root, height = cls._build(leaves, 0, self._fanout)
            return cls(root, height, len(ks), self._chunk_size, self._fanout)

        op_keys = sorted(put_map.keys() | del_set) if del_set else sorted(put_map)
        delta = [0]
        nodes = self._update_node(
            self._root, self._height, op_keys, 0, len(op_keys), put_map, delta
        )
        if nodes is None:
            return self
        root, height = cls._build(nodes, self._height, self._fanout)
        return cls(root, height, self._len + delta[0], self._chunk_size, self._fanout)

    def _update_node(
        self,
        node: _Node,
        height: int,
        op_keys: list[bytes],
        a: int,
        b: int,
        put_map: dict[bytes, V],
        delta: list[int],
    ) -> list[_Node] | None:
        """Apply ``op_keys[a:b]`` (sorted, all routed to ``node``) to the subtree.

        Returns the replacement nodes of the same height (none if the subtree
        became empty, several if it overflowed), or ``None`` if unchanged.
        """
        ks, payload = node
        if height == 0:
            applied = _apply(ks, payload, op_keys, a, b, put_map)
            if applied is None:
                return None
            delta[0] += len(applied[0]) - len(ks)
            return _split(applied[0], applied[1], self._chunk_size)

        cap = self._chunk_size if height == 1 else self._fanout
        low = cap // 4
        last = len(ks) - 1
        out_k: list[bytes] = []
        out_c: list[_Node] = []
        pos = 0  # first child not yet copied to the output
        changed = False
        while a < b:
            # The operations routed to one child: keys up to its max (the
            # last child also takes every key beyond the subtree's max).
            ci = bisect_left(ks, op_keys[a], pos)
            if ci >= last:
                ci, g = last, b
            else:
                g = bisect_right(op_keys, ks[ci], a, b)
            res = self._update_node(payload[ci], height - 1, op_keys, a, g, put_map, delta)
            a = g
            if res is None:
                continue
            changed = True
            if pos < ci:
                # Unchanged children: the first may merge with a rewritten
                # neighbour, the rest are shared as is.
                _emit(payload[pos], out_k, out_c, cap, low)
                out_k.extend(ks[pos + 1 : ci])
                out_c.extend(payload[pos + 1 : ci])
            pos = ci + 1
            for child in res:
                _emit(child, out_k, out_c, cap, low)
        if not changed:
            return None
        if pos <= last:
            _emit(payload[pos], out_k, out_c, cap, low)
            out_k.extend(ks[pos + 1 :])
            out_c.extend(payload[pos + 1 :])
        return _split(out_k, out_c, self._fanout)

    # ------------------------------------------------------------- debugging

    def check_invariants(self) -> None:
        """Raise :class:`AssertionError` if the internal structure is inconsistent."""
        root = self._root
        if root is None:
            if self._len or self._height:
                raise AssertionError("empty root with non-zero length or height")
            return
        if self._height and len(root[0]) < 2:
            raise AssertionError("inner root with fewer than two children")
        prev: list[bytes | None] = [None]
        total = self._check_node(root, self._height, prev)
        if total != self._len:
            raise AssertionError(f"length {self._len} != actual {total}")

    def _check_node(self, node: object, height: int, prev: list[bytes | None]) -> int:
        if not (isinstance(node, tuple) and len(node) == 2):
            raise AssertionError("node is not a pair")
        ks, payload = node
        if not isinstance(ks, tuple) or not isinstance(payload, tuple):
            raise AssertionError("node halves are not tuples")
        cap = self._chunk_size if height == 0 else self._fanout
        if not ks or len(ks) > cap or len(ks) != len(payload):
            raise AssertionError(f"bad node size {len(ks)}/{len(payload)} (cap {cap})")
        if height == 0:
            for k in ks:
                if not isinstance(k, bytes):
                    raise AssertionError("non-bytes key")
                last = prev[0]
                if last is not None and not last < k:
                    raise AssertionError("keys not strictly increasing")
                prev[0] = k
            return len(ks)
        total = 0
        for mx, child in zip(ks, payload, strict=True):
            total += self._check_node(child, height - 1, prev)
            if prev[0] != mx:
                raise AssertionError("inner key is not the child's max")
        return total
