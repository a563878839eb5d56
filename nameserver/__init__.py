"""The metadata server: state machine, gRPC services, server wiring, client library, CLI."""

import os as _os

# A node forks a child to write each snapshot (nameserver._forked). gRPC core's own fork
# handlers, on by default in the wheels, would then either stop and restart gRPC's threads
# around every fork or log that they skip it; the child never touches gRPC, so they are
# off unless the environment asks for them. Set before any module of this package imports
# grpc (gRPC core reads it once, when it starts).
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

# gRPC core's alternative completion-queue pollset: 5-8% less server CPU per call here
# (README, Performance: the noop server and a 3-node cluster at 64 clients, interleaved).
_os.environ.setdefault("GRPC_EXPERIMENTS", "pollset_alternative")
