"""The metadata server: state machine, gRPC services, server wiring, client library, CLI."""
