"""CRC32C (Castagnoli): the ``crc32c`` package's C function, loaded without the package's
``__init__``, which imports ``importlib.metadata`` for its version string (and with it
``email``, ``zipfile``, ``csv``, ...): 10-15 ms of every command's start, a seeding's
included. The extension module is the package's own (``crc32c._crc32c``, registered under
that name, so a later ``import crc32c`` takes the same one); where it cannot be found that
way, the package is imported as usual.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from typing import Protocol, cast

__all__ = ["Crc32c", "crc32c"]


class Crc32c(Protocol):
    def __call__(self, data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...


def _load() -> Crc32c:
    """``crc32c.crc32c``, from the extension module alone where it can be."""
    name = "crc32c._crc32c"
    module = sys.modules.get(name)
    if module is None and "crc32c" not in sys.modules:
        package = importlib.util.find_spec("crc32c")  # found, not imported
        where = package.submodule_search_locations if package is not None else None
        spec = importlib.machinery.PathFinder.find_spec(name, where) if where else None
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[name] = module
    if module is None:
        import crc32c

        return cast(Crc32c, crc32c.crc32c)
    return cast(Crc32c, module.crc32c)


#: ``crc32c(data, crc)``: the CRC32C of ``data`` continuing from ``crc`` (0 to start)
crc32c: Crc32c = _load()
