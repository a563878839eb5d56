"""bbolt database files (go.etcd.io/bbolt, the store under etcd's backend), sans-I/O.

A bbolt file is a row of pages (4096 bytes here). Page 0 and page 1 are meta pages (magic,
version, page size, the root bucket, the freelist page, the high-water page id, the
transaction id, an FNV-64a checksum of the fields before it); the one with the higher valid
transaction id is current. A bucket is a B+tree of branch pages (first key of each child,
child page id) over leaf pages (flags, key, value); a leaf element flagged as a bucket holds
a bucket header (root page id, sequence) and, when the root is 0, the bucket's whole leaf
page inline after it. A node larger than one page runs on into ``overflow`` following pages.
Every page below the high-water mark is either reachable from a meta page or in the
freelist (bbolt's ``tx.Check``, which ``etcdctl snapshot status`` runs).

Here a database is a ``Tree``: bucket name -> ``Tree`` (a nested bucket) or ``bytes`` (a
plain value), and the top level holds buckets only. ``write_bolt`` lays a tree out as a
fresh, compact file (every page used, an empty freelist); ``read_bolt`` reads any valid
file back, checking what it walks and naming the page of the first fault.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Union

from snapshots.etcdfmt import _leafscan

PAGE_SIZE = 4096
MAGIC = 0xED0CDAED
VERSION = 2

BRANCH_PAGE = 0x01
LEAF_PAGE = 0x02
META_PAGE = 0x04
FREELIST_PAGE = 0x10
BUCKET_LEAF_FLAG = 0x01
NO_FREELIST = 0xFFFFFFFFFFFFFFFF  # bbolt's pgidNoFreelist: the freelist is not synced

_PAGE_HEADER = struct.Struct("<QHHI")  # id, flags, count, overflow
_LEAF_ELEMENT = struct.Struct("<IIII")  # flags, pos, ksize, vsize
_BRANCH_ELEMENT = struct.Struct("<IIQ")  # pos, ksize, pgid
_BUCKET_HEADER = struct.Struct("<QQ")  # root, sequence
_META = struct.Struct(
    "<IIIIQQQQQ"
)  # magic, version, page size, flags, root, seq, freelist, pgid, txid
_CHECKSUM = struct.Struct("<Q")
HEADER_BYTES = _PAGE_HEADER.size
ELEMENT_BYTES = _LEAF_ELEMENT.size
MAX_INLINE_BUCKET_BYTES = PAGE_SIZE // 4  # bbolt's maxInlineBucketSize
MIN_KEYS_PER_PAGE = 2  # bbolt's minKeysPerPage: a node is never split below it
MAX_KEY_BYTES = 32768  # bbolt's MaxKeySize
MAX_VALUE_BYTES = (1 << 31) - 2  # bbolt's MaxValueSize
MAX_NESTING = 64  # buckets deeper than this are refused (etcd nests none)

Tree = dict[bytes, Union[bytes, "Tree"]]

#: the leaf loop of :mod:`._leafscan` pays compiled only (read_bolt of a 1M-key etcd file:
#: 0.64 us a key with it, 0.88 with the loop below); as Python it is slower than the loop
_LEAFSCAN_COMPILED = not (_leafscan.__file__ or "").endswith(".py")

#: a reader's taker of the top-level ``key`` bucket's leaf pages (see :func:`read_bolt`)
KeyLeaf = Callable[[bytes, int], bool]


class KeyLeafRefused(Exception):
    """A ``key_leaf`` taker said no to a leaf page: read the file without it (which names
    the fault, if there is one)."""


class EtcdFormatError(ValueError):
    """Root of this package's errors: the bytes are not what they should be (one line)."""


class BoltFormatError(EtcdFormatError):
    """The bytes are not a valid bbolt file; ``page`` is where the first fault is (or None)."""

    def __init__(self, message: str, page: int | None = None) -> None:
        where = f"page {page}: " if page is not None else ""
        super().__init__(f"bbolt: {where}{message}")
        self.page = page


def fnv64a(data: bytes | memoryview) -> int:
    """FNV-1a, 64 bits: the checksum of a meta page."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


# -- writing ---------------------------------------------------------------------------------


def _node_bytes(flags: int, elements: list[tuple[int, bytes, bytes]], pgid: int) -> bytes:
    """One node's page bytes, unpadded: header, elements, then the keys and values.

    ``elements`` are (flags, key, value) for a leaf and (pgid, key, b"") for a branch.
    """
    n = len(elements)
    head = bytearray()
    data = bytearray()
    data_start = HEADER_BYTES + ELEMENT_BYTES * n
    for i, (f, key, value) in enumerate(elements):
        pos = data_start + len(data) - (HEADER_BYTES + ELEMENT_BYTES * i)
        if flags == LEAF_PAGE:
            head += _LEAF_ELEMENT.pack(f, pos, len(key), len(value))
        else:
            head += _BRANCH_ELEMENT.pack(pos, len(key), f)
        data += key
        data += value
    size = data_start + len(data)
    overflow = max(0, -(-size // PAGE_SIZE) - 1)
    return _PAGE_HEADER.pack(pgid, flags, n, overflow) + bytes(head) + bytes(data)


def _chunks(elements: list[tuple[int, bytes, bytes]]) -> list[list[tuple[int, bytes, bytes]]]:
    """Split sorted elements into nodes that each fit one page, as bbolt splits a node: every
    node keeps at least ``MIN_KEYS_PER_PAGE`` elements (large ones overflow their page), so
    each branch level has at most half the nodes of the one below and the tree ends."""
    chunks: list[list[tuple[int, bytes, bytes]]] = [[]]
    size = HEADER_BYTES
    for i, element in enumerate(elements):
        grow = ELEMENT_BYTES + len(element[1]) + len(element[2])
        if (
            len(chunks[-1]) >= MIN_KEYS_PER_PAGE
            and len(elements) - i >= MIN_KEYS_PER_PAGE
            and size + grow > PAGE_SIZE
        ):
            chunks.append([])
            size = HEADER_BYTES
        chunks[-1].append(element)
        size += grow
    if len(chunks) > 1 and len(chunks[-1]) == 1 and len(chunks[-2]) > 2:
        chunks[-1].insert(0, chunks[-2].pop())  # no branch or leaf left with a single child
    return chunks


class _Writer:
    def __init__(self) -> None:
        self.pages: list[bytes] = []  # page-aligned runs from page 3 on
        self.next_pgid = 3  # 0, 1: meta; 2: freelist

    def _place(self, flags: int, elements: list[tuple[int, bytes, bytes]]) -> int:
        pgid = self.next_pgid
        raw = _node_bytes(flags, elements, pgid)
        npages = -(-len(raw) // PAGE_SIZE)
        self.pages.append(raw.ljust(npages * PAGE_SIZE, b"\0"))
        self.next_pgid += npages
        return pgid

    def bucket(self, tree: Tree, *, inline_ok: bool) -> bytes:
        """Write one bucket's pages; return its bucket value (header, maybe an inline page)."""
        elements: list[tuple[int, bytes, bytes]] = []
        for key in sorted(tree):
            value = tree[key]
            if isinstance(value, dict):
                elements.append((BUCKET_LEAF_FLAG, key, self.bucket(value, inline_ok=True)))
            else:
                elements.append((0, key, value))
        inline_size = HEADER_BYTES + sum(ELEMENT_BYTES + len(k) + len(v) for _, k, v in elements)
        nested = any(f & BUCKET_LEAF_FLAG for f, _, _ in elements)
        if inline_ok and not nested and inline_size <= MAX_INLINE_BUCKET_BYTES:
            return _BUCKET_HEADER.pack(0, 0) + _node_bytes(LEAF_PAGE, elements, 0)
        level = [
            (self._place(LEAF_PAGE, chunk), chunk[0][1] if chunk else b"")
            for chunk in _chunks(elements)
        ]
        while len(level) > 1:
            branch = [(pgid, key, b"") for pgid, key in level]
            level = [(self._place(BRANCH_PAGE, chunk), chunk[0][1]) for chunk in _chunks(branch)]
        return _BUCKET_HEADER.pack(level[0][0], 0)


def _meta_page(pgid: int, root: int, high_water: int, txid: int) -> bytes:
    body = _META.pack(MAGIC, VERSION, PAGE_SIZE, 0, root, 0, 2, high_water, txid)
    raw = _PAGE_HEADER.pack(pgid, META_PAGE, 0, 0) + body + _CHECKSUM.pack(fnv64a(body))
    return raw.ljust(PAGE_SIZE, b"\0")


def _check_sizes(tree: Tree, path: bytes = b"") -> None:
    """bbolt's own limits (``bucket.go``: MaxKeySize, MaxValueSize): a key or value past them
    cannot be in a bbolt file, so it is refused here naming where it is."""
    for key, value in tree.items():
        if not key or len(key) > MAX_KEY_BYTES:
            raise ValueError(
                f"bucket {path.decode(errors='replace') or '/'}: a key of {len(key)} bytes "
                f"(bbolt stores keys of 1 to {MAX_KEY_BYTES} bytes): {key[:40]!r}"
            )
        if isinstance(value, dict):
            _check_sizes(value, path + b"/" + key)
        elif len(value) > MAX_VALUE_BYTES:
            raise ValueError(
                f"bucket {path.decode(errors='replace')}: key {key[:40]!r} has a "
                f"value of {len(value)} bytes (bbolt's limit: {MAX_VALUE_BYTES})"
            )


def write_bolt(tree: Tree, *, txid: int = 1) -> bytes:
    """Lay ``tree`` out as a bbolt file (top-level values must be buckets); ValueError for
    what bbolt cannot hold (a top-level value, an empty or oversized key or value)."""
    for name, value in tree.items():
        if not isinstance(value, dict):
            raise ValueError(f"top-level entry {name!r} is not a bucket")
    _check_sizes(tree)
    writer = _Writer()
    root = _BUCKET_HEADER.unpack(writer.bucket(tree, inline_ok=False)[: _BUCKET_HEADER.size])[0]
    freelist = _PAGE_HEADER.pack(2, FREELIST_PAGE, 0, 0).ljust(PAGE_SIZE, b"\0")
    metas = [_meta_page(i, root, writer.next_pgid, txid - 1 + i) for i in (0, 1)]
    return b"".join([*metas, freelist, *writer.pages])


# -- reading ---------------------------------------------------------------------------------


class _Reader:
    def __init__(
        self,
        data: bytes | memoryview,
        page_size: int,
        high_water: int,
        key_leaf: KeyLeaf | None = None,
        key_pages: list[tuple[memoryview, int]] | None = None,
    ) -> None:
        self.data = data
        self.page_size = page_size
        self.high_water = high_water
        self.seen: set[int] = set()
        self.depth = 0
        self.key_leaf = key_leaf
        self.key_pages = key_pages
        self.in_key = False  # reading the top-level key bucket, its leaves to key_leaf

    def page(self, pgid: int) -> tuple[memoryview, int, int]:
        """The page's bytes (overflow included), its flags and its element count."""
        if pgid < 2 or pgid >= self.high_water:
            raise BoltFormatError(f"page id out of range (high-water mark {self.high_water})", pgid)
        start = pgid * self.page_size
        if start + HEADER_BYTES > len(self.data):
            raise BoltFormatError(
                f"beyond the end of the file ({len(self.data)} bytes): truncated", pgid
            )
        _, flags, count, overflow = _PAGE_HEADER.unpack_from(self.data, start)
        end = start + (overflow + 1) * self.page_size
        if pgid + overflow >= self.high_water or end > len(self.data):
            raise BoltFormatError(f"{overflow} overflow pages run past the end: truncated", pgid)
        for i in range(pgid, pgid + overflow + 1):
            if i in self.seen:
                raise BoltFormatError(f"page {i} is referenced twice", pgid)
            self.seen.add(i)
        return memoryview(self.data)[start:end], flags, count

    def bucket(self, value: bytes, where: int, name: bytes = b"") -> Tree:
        if len(value) < _BUCKET_HEADER.size:
            raise BoltFormatError("bucket value shorter than a bucket header", where)
        root, _ = _BUCKET_HEADER.unpack_from(value)
        if self.depth >= MAX_NESTING:
            raise BoltFormatError(f"buckets nested more than {MAX_NESTING} deep", where)
        self.in_key = (
            self.depth == 0
            and name == b"key"
            and (self.key_leaf is not None or self.key_pages is not None)
        )
        self.depth += 1
        try:
            return self._bucket(root, value, where)
        finally:
            self.depth -= 1
            self.in_key = False

    def _bucket(self, root: int, value: bytes, where: int) -> Tree:
        out: Tree = {}
        if root == 0:
            page = memoryview(value)[_BUCKET_HEADER.size :]
            if len(page) < HEADER_BYTES:
                raise BoltFormatError("inline bucket page shorter than a page header", where)
            _, flags, count, _ = _PAGE_HEADER.unpack_from(page)
            if flags != LEAF_PAGE:
                raise BoltFormatError(f"inline bucket page has flags {flags:#x}, not a leaf", where)
            self._leaf(page, count, where, out)
        else:
            self._node(root, out)
        return out

    def _node(self, pgid: int, out: Tree) -> None:
        page, flags, count = self.page(pgid)
        if flags == LEAF_PAGE:
            self._leaf(page, count, pgid, out)
        elif flags == BRANCH_PAGE:
            for i in range(count):
                off = HEADER_BYTES + ELEMENT_BYTES * i
                if off + ELEMENT_BYTES > len(page):
                    raise BoltFormatError(f"branch element {i} past the page end", pgid)
                _, _, child = _BRANCH_ELEMENT.unpack_from(page, off)
                self._node(child, out)
        else:
            raise BoltFormatError(f"flags {flags:#x} where a branch or leaf page belongs", pgid)

    def _leaf(self, page: memoryview, count: int, where: int, out: Tree) -> None:
        if self.in_key:
            if self.key_pages is not None:
                self.key_pages.append((page, count))
                return
            assert self.key_leaf is not None
            if self.key_leaf(page.tobytes(), count):
                return
            raise KeyLeafRefused(f"page {where}")
        last = next(reversed(out), None) if out else None
        size = len(page)
        table_end = HEADER_BYTES + ELEMENT_BYTES * count
        if table_end > size:  # the first element past the page end, as the loop names it
            count = (size - HEADER_BYTES) // ELEMENT_BYTES
            self._leaf(page, count, where, out)
            raise BoltFormatError(f"leaf element {count} past the page end", where)
        raw = page.tobytes()  # one copy; slices of it are the keys and values
        if _LEAFSCAN_COMPILED and _leafscan.plain_leaf(raw, count, last, out):
            return  # a leaf of plain values, in order, read natively
        off = HEADER_BYTES
        for i, (flags, pos, ksize, vsize) in enumerate(
            _LEAF_ELEMENT.iter_unpack(raw[HEADER_BYTES:table_end])
        ):
            kstart = off + pos
            kend = kstart + ksize
            vend = kend + vsize
            if vend > size:
                raise BoltFormatError(
                    f"leaf element {i}'s key and value run past the page end", where
                )
            key = raw[kstart:kend]
            if last is not None and key <= last:
                raise BoltFormatError(f"leaf element {i}: keys out of order", where)
            last = key
            value = raw[kend:vend]
            out[key] = self.bucket(value, where, key) if flags & BUCKET_LEAF_FLAG else value
            off += ELEMENT_BYTES


def _meta(data: bytes | memoryview, offset: int) -> tuple[int, int, int, int, int] | str:
    """(page size, root, freelist, high-water pgid, txid) of a valid meta page, else why not."""
    if len(data) < offset + HEADER_BYTES + _META.size + _CHECKSUM.size:
        return "file too short for a meta page"
    _, flags, _, _ = _PAGE_HEADER.unpack_from(data, offset)
    body = data[offset + HEADER_BYTES : offset + HEADER_BYTES + _META.size]
    magic, version, page_size, _, root, _, freelist, high_water, txid = _META.unpack(body)
    if magic != MAGIC:
        return f"bad magic {magic:#010x} (not a bbolt file)"
    if version != VERSION:
        return f"bbolt version {version}, expected {VERSION}"
    (checksum,) = _CHECKSUM.unpack_from(data, offset + HEADER_BYTES + _META.size)
    if checksum != fnv64a(body):
        return "meta checksum mismatch"
    if flags != META_PAGE:
        return f"flags {flags:#x}, expected a meta page"
    return page_size, root, freelist, high_water, txid


def _current_meta(data: bytes | memoryview) -> tuple[int, int, int, int, int]:
    """The valid meta page with the higher transaction id, as bbolt picks it."""
    first = _meta(data, 0)
    page_size = first[0] if isinstance(first, tuple) else PAGE_SIZE
    if page_size < 1024 or page_size & (page_size - 1):
        raise BoltFormatError(f"page size {page_size} is not a power of two >= 1024", 0)
    second = _meta(data, page_size)
    valid = [m for m in (first, second) if isinstance(m, tuple)]
    if not valid:
        raise BoltFormatError(f"no valid meta page ({first}; {second})", 0)
    return max(valid, key=lambda m: m[4])


def bolt_size(data: bytes) -> int:
    """The database's size as bbolt counts it (``tx.Size()``: high-water page id x page size)."""
    page_size, _, _, high_water, _ = _current_meta(data)
    return page_size * high_water


def read_bolt(
    data: bytes | memoryview,
    key_leaf: KeyLeaf | None = None,
    key_pages: list[tuple[memoryview, int]] | None = None,
) -> Tree:
    """Read a bbolt file back into a ``Tree`` (raises BoltFormatError naming the fault).
    With ``key_leaf``, the top-level ``key`` bucket's leaf pages go to it instead, in the
    bucket's order (``key_leaf(page bytes, element count)``), and that bucket reads empty;
    KeyLeafRefused when it says no to a page (its pages are checked as any others are
    before it sees them: in range, each read once). With ``key_pages`` (a list), those leaf
    pages are appended to it instead, as (a view of the page, its element count), not
    read (their elements are not checked here)."""
    page_size, root, freelist, high_water, _ = _current_meta(data)
    if len(data) < high_water * page_size:
        raise BoltFormatError(
            f"file has {len(data)} bytes, the meta page needs {high_water * page_size}: truncated",
            high_water - 1,
        )
    reader = _Reader(data, page_size, high_water, key_leaf, key_pages)
    if freelist != NO_FREELIST:
        _, flags, _ = reader.page(freelist)
        if flags != FREELIST_PAGE:
            raise BoltFormatError(f"flags {flags:#x} where the freelist belongs", freelist)
    tree: Tree = {}
    reader._node(root, tree)
    for name, value in tree.items():
        if not isinstance(value, dict):
            raise BoltFormatError(f"top-level key {name!r} is not a bucket", root)
    return tree
