"""Auth compatible with etcd 3.4's Auth service: users, roles, key-range permissions, tokens,
the per-method permission table, and RocketMQ ACL 1.0 signatures for the remoting port
(docs/auth.md).

Modules: :mod:`~nameserver.auth.records` (the ``auth`` sub-image), :mod:`~nameserver.auth.apply`
(its apply rules), :mod:`~nameserver.auth.kind`, :mod:`~nameserver.auth.service` (the gRPC
services), :mod:`~nameserver.auth.tokens`, :mod:`~nameserver.auth.passwords`,
:mod:`~nameserver.auth.rules` (who may call what), :mod:`~nameserver.auth.check` (the check
the gRPC guard runs), :mod:`~nameserver.auth.acl` (remoting signatures), errors in
:mod:`~nameserver.auth.errors`.
"""
