"""RocketMQ's wire, written once for everyone who speaks it.

The nameserver's remoting front, the broker and both replicators import RocketMQ's protocol
from here and nowhere else (``docs/architecture.md``): the sans-I/O remoting codec, one table
of request and response codes, typed headers, the message encoding (stored record, batch,
properties, message ids, compressed bodies), one frame-server loop and one pipelined client
connection. The parsers are sans-I/O (bytes in, commands out); only the thin asyncio modules
touch sockets. Nothing here knows metaledger: this package imports no other project package
but the generated ``protos``.
"""


def _root_mypyc_runtime() -> None:
    """Where the compiled build keeps mypyc's runtime library, tell mypyc its package root.

    ``scripts/build_mypyc.sh`` puts the group library every compiled module loads inside this
    package (``rmq/mypyc_runtime__mypyc.*.so``) so that an editable install, which puts no
    checkout root on ``sys.path``, can import it. mypyc derives the ``__file__`` of a module one
    compiled module imports from another as *the library's directory + the dotted path*, which
    assumes the library sits at the root; each compiled module's first import passes through
    this package, so giving the library a root-level ``__file__`` here keeps every ``__file__``
    right. The pure-Python build has no such library and nothing happens.
    """
    import importlib
    import os

    try:
        runtime = importlib.import_module("rmq.mypyc_runtime__mypyc")
    except ImportError:
        return
    where = runtime.__file__ or ""
    runtime.__file__ = os.path.join(
        os.path.dirname(os.path.dirname(where)), os.path.basename(where)
    )


_root_mypyc_runtime()
