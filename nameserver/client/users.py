"""Users' remoting secret keys (metaledger.v1.AuthExtra): the RocketMQ ACL 1.0 access key of
a signed remoting request is a user's name, its secret key set here (docs/auth.md). Users,
roles and auth on/off are etcd's Auth service: use etcdctl, or any etcd client."""

from __future__ import annotations

from typing import Any

from nameserver.client.transport import Transport
from protos.metaledger.v1 import auth_pb2, auth_pb2_grpc

__all__ = ["UsersApi"]


def _extra(method: str) -> Any:
    return lambda s: getattr(auth_pb2_grpc.AuthExtraStub(s.channel), method)


class UsersApi(Transport):
    """metaledger.v1.AuthExtra (root only while auth is on)."""

    def user_set_secret_key(self, name: str, secret_key: str) -> int:
        """Set (``""``: clear) ``name``'s remoting secret key; returns the revision."""
        req = auth_pb2.SetSecretKeyRequest(name=name, secret_key=secret_key)
        r = self._call(_extra("SetSecretKey"), req, write=True)
        return int(r.revision)
