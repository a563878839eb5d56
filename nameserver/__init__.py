"""The metadata server: state machine, gRPC services, server wiring, client library, CLI.

Importing this package (or :mod:`nameserver.client`) has no side effects; server processes
set gRPC core's environment through :func:`nameserver.grpc.env.apply_server_defaults`.
"""
