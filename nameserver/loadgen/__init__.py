"""The etcd-protocol load generator: ``metaledger bench``'s engine and the load of ``bench/``.

It imports only ``grpc``, the generated ``protos`` and the standard library (no server
module); what each op does and what each figure of the result means is in :mod:`.load`::

    load        LoadSpec, run(), format_result(), the command-line flags of a load
    procstats   CPU and TCP counters read from Linux /proc around the measured window
    __main__    python -m nameserver.loadgen --endpoints HOST:PORT --op put [--json]
"""

from nameserver.loadgen.load import (
    OPS,
    POPULATE_BATCH,
    LoadSpec,
    add_load_arguments,
    format_result,
    run,
    spec_from_args,
)

__all__ = [
    "OPS",
    "POPULATE_BATCH",
    "LoadSpec",
    "add_load_arguments",
    "format_result",
    "run",
    "spec_from_args",
]
