"""RocketMQ ACL 1.0 on the remoting port: signed writes, checked against metaledger's roles.

A client with session credentials (RocketMQ's ``AclClientRPCHook``) adds the ext fields
``AccessKey`` and ``Signature`` to each request, where (``AclUtils.combineRequestContent``,
``AclUtils.calSignature``)::

    content   = the values of every ext field but Signature, ordered by field name, as UTF-8,
                followed by the body bytes
    Signature = base64(HmacSHA1(secretKey, content))

The server (``PlainAccessValidator`` / ``PlainPermissionManager.validate``) recomputes it
with the secret key it holds for the access key. Here the access key is a metaledger user
whose remoting secret key is set (``metaledger user set-secret-key``, stored in the log);
a valid signature makes the request that user's, and the user's roles decide, by the same
rule as gRPC (:func:`nameserver.auth.rules.record_key`): a write code needs write on the
record it changes. While auth is off nothing is checked. Route queries (reads) stay open,
as RocketMQ's nameserver does not check them.

Refusals answer NO_PERMISSION (16) with RocketMQ's remarks ("No accessKey is configured",
"No acl config for <ak>", "Check signature failed for accessKey=<ak>"), before the handler
runs: nothing changes. Sans-I/O: a request and an auth image in, a refusal or None out.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping

from nameserver.auth.check import permitted
from nameserver.auth.records import AuthImage
from nameserver.auth.rules import Need, record_key
from nameserver.client.acl import ACCESS_KEY, SIGNATURE, content, sign, signature
from rmq.codes import RequestCode

__all__ = ["ACCESS_KEY", "SIGNATURE", "WRITE_CODES", "content", "refusal", "sign", "signature"]


def _broker(ext: Mapping[str, str]) -> list[Need]:
    return [(record_key("broker", ext.get("brokerName", "")), b"", "write")]


def _topic(ext: Mapping[str, str]) -> list[Need]:
    return [(record_key("topic", ext.get("topic", "")), b"", "write")]


def _kvconfig(ext: Mapping[str, str]) -> list[Need]:
    key = f"{ext.get('namespace', '')}/{ext.get('key', '')}"
    return [(record_key("kvconfig", key), b"", "write")]


#: The remoting codes that change state -> the permissions they need (from their ext fields).
WRITE_CODES: dict[int, Callable[[Mapping[str, str]], list[Need]]] = {
    RequestCode.PUT_KV_CONFIG: _kvconfig,
    RequestCode.DELETE_KV_CONFIG: _kvconfig,
    RequestCode.REGISTER_BROKER: _broker,
    RequestCode.UNREGISTER_BROKER: _broker,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: _broker,
    RequestCode.ADD_WRITE_PERM_OF_BROKER: _broker,
    RequestCode.BROKER_HEARTBEAT: _broker,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: _topic,
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: _topic,
}


def refusal(auth: AuthImage, code: int, ext_fields: Mapping[str, str], body: bytes) -> str | None:
    """Why a request must be refused (RocketMQ's remark), or None to serve it."""
    needs_of = WRITE_CODES.get(code)
    if needs_of is None or not auth.enabled:
        return None
    access_key = ext_fields.get(ACCESS_KEY)
    if not access_key:
        return "No accessKey is configured"
    user = auth.user_by_access_key(access_key)
    if user is None:
        return f"No acl config for {access_key}"
    expected = signature(user.remoting_secret, ext_fields, body)
    given = ext_fields.get(SIGNATURE, "")
    if not hmac.compare_digest(expected.encode(), given.encode()):
        return f"Check signature failed for accessKey={access_key}"
    if not permitted(auth, user.name, needs_of(ext_fields)):
        return f"No permission for request code={code}, accessKey={access_key}"
    return None
