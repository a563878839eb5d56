"""setuptools' hook for the optional mypyc build (issue 31); everything else is pyproject.toml.

Without METALEDGER_MYPYC=1 this is a plain ``setup()``: ``pip install -e '.[dev]'`` builds
and installs exactly what pyproject.toml says. With it, the modules listed in
``scripts/mypyc_modules.txt`` are compiled as well (their .py files stay in the wheel beside
the .so files)::

    METALEDGER_MYPYC=1 python3 setup.py build_ext --inplace   # scripts/build_mypyc.sh does this
    METALEDGER_MYPYC=1 pip wheel --no-build-isolation .        # mypy (dev extras) in the build env
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

MODULE_LIST = Path(__file__).parent / "scripts" / "mypyc_modules.txt"


def compiled_modules() -> list[str]:
    """The source paths in the module list (comments and blank lines skipped)."""
    lines = (line.split("#", 1)[0].strip() for line in MODULE_LIST.read_text().splitlines())
    return [line for line in lines if line]


if os.environ.get("METALEDGER_MYPYC") == "1":
    from mypyc.build import mypycify  # mypy's dev extra; only the compiled build needs it

    # the group's shared library goes inside a package (rmq/mypyc_runtime__mypyc.*.so: rmq
    # imports nothing else), so an editable install, which maps packages, not the root, finds it
    group = "rmq.mypyc_runtime"
    setup(ext_modules=mypycify(compiled_modules(), opt_level="3", group_name=group))
else:
    setup()
