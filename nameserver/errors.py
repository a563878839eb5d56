"""Errors of the nameserver (their gRPC mapping is :func:`nameserver.grpc.status.to_status`).

    Rejected                    the state machine refused; ``code`` is a gRPC status name
    └── ResponseTooLarge        (nameserver.kv.semantics) RESOURCE_EXHAUSTED, max_response_bytes
    NameserverError
    └── InvalidRequest          bad input; names the field or limit (INVALID_ARGUMENT)
        └── UndecodableRequest  a payload that is not the method's message

etcd clients match on etcd's messages ("etcdserver: key not found", ...), so
messages start with etcd's text and add what metaledger knows (the limit's
name and value).
"""

from __future__ import annotations

import grpc


class Rejected(Exception):
    """An operation the state machine refuses; ``code`` is a gRPC status name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class NameserverError(Exception):
    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class InvalidRequest(NameserverError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class UndecodableRequest(InvalidRequest):
    """A request (or one message of a request stream) that protobuf cannot decode."""
