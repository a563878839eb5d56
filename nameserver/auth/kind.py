"""The ``auth`` record kind: users, roles and the enabled flag, registered in
:mod:`nameserver.kinds`."""

from __future__ import annotations

from nameserver.auth.apply import apply_auth_entry
from nameserver.auth.records import AuthDelta, AuthImage, decode
from nameserver.state.consistency import LINEARIZABLE
from nameserver.state.registry import RecordKind

AUTH = RecordKind(
    name="auth",
    field="auth",
    empty=AuthImage(),
    delta=AuthDelta,
    decode=decode,
    # who may do what: a revoked permission must not be read as still granted
    consistency=LINEARIZABLE,
    items=lambda image: sorted(image.records.items()),
    lookup=lambda image, key: image.records.get(key),
    rules={"auth": apply_auth_entry},
)
