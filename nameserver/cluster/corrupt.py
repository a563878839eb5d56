"""CORRUPT: the comparison rules of etcd 3.4's corruption checks and the writes a raised
CORRUPT alarm refuses (``etcdserver/corrupt.go``). Sans-I/O: the driver that fetches the
hashes and raises the alarm is :mod:`nameserver.cluster.corrupt_check`.

- **Initial check** (``--experimental-initial-corrupt-check``, :func:`initial_findings`):
  before serving, a member hashes its kv store at its revision and asks every peer for its
  hash at that revision; a peer whose hash differs with the same compact revision is a
  mismatch (the member refuses to start: "<id> found data inconsistency with peers"); a
  differing compact revision, a peer behind ("future revision") or a member behind
  ("compacted") is only a warning.
- **Periodic check** (``--experimental-corrupt-check-time``, :func:`periodic_findings`):
  the leader hashes (h, rev, crev), asks its peers at rev, passes a read barrier and hashes
  again (h2, rev2, crev2). Its own hashes differ at the same revisions: the leader is the
  member to alarm. A peer whose revision or compact revision is past the leader's, or whose
  compact revision is the leader's first one while its hash differs: that peer. As etcd, one
  CORRUPT alarm at most is raised per check (the first member found).
- While any CORRUPT alarm is raised, every member refuses the writes etcd's
  ``applierV3Corrupt`` refuses (:func:`refused`; before proposing, and in apply by
  :class:`~nameserver.cluster.kind.AlarmGuards`, the same on every member): kv puts,
  deletes and txns that write, compactions, lease grants and revokes, with DATA_LOSS
  "etcdserver: corrupt cluster" (an expired lease waits too: its expiry is a revoke).
  Reads, alarms (``alarm disarm``), members, auth and metaledger's own records (routes,
  offsets, replica groups) still go through.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from nameserver.errors import DataLoss
from nameserver.state.image import MetadataImage
from raftlog import Entry

#: etcd's ErrGRPCCorrupt text
CORRUPT = "etcdserver: corrupt cluster"

#: The entry types etcd's applierV3Corrupt refuses (a lease entry only for grant/revoke).
_REFUSED = frozenset({"kv", "txn", "compact"})
#: LeaseOperation fields ``grant`` (1), ``revoke`` (2) and ``expire`` (4: the leader's
#: revoke of expired leases, a LeaseRevoke in etcd), length-delimited; ``refresh`` (3, the
#: keepalives' checkpoint, which etcd does not apply through its log) goes through
_LEASE_GRANT_OR_REVOKE = frozenset({0x0A, 0x12, 0x22})


def corrupt() -> DataLoss:
    return DataLoss(CORRUPT)


def refused(e: Entry) -> bool:
    """Whether a raised CORRUPT refuses ``e``."""
    if e.type in _REFUSED:
        return True
    return e.type == "lease" and bool(e.value) and e.value[0] in _LEASE_GRANT_OR_REVOKE


def refuses(image: MetadataImage, e: Entry) -> bool:
    """The serving member's check before it proposes ``e``."""
    return image.alarms.corrupt and refused(e)


@dataclass(frozen=True, slots=True)
class KvHash:
    """A member's HashKV answer: its hash at the revision asked, its current revision and
    compact revision (etcd's HashByRev: hash, currentRev, compactRev)."""

    hash: int
    revision: int
    compact_revision: int


#: why a peer gave no hash: its revision is behind the one asked / the one asked is
#: compacted there / anything else (unreachable, ...)
FUTURE_REV, COMPACTED, OTHER = "future", "compacted", "other"


@dataclass(frozen=True, slots=True)
class PeerHash:
    """One peer's answer: ``hash`` or, when it gave none, ``error`` (a kind above) and
    ``detail``."""

    member_id: int
    endpoints: tuple[str, ...]
    hash: KvHash | None = None
    error: str = OTHER
    detail: str = ""
    #: whether its store counts revisions etcd's way (its HashKV's trailing metadata says
    #: so; None: not asked, compared as it is)
    counts_etcd: bool | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """One line to log (etcd's zap message and fields) and the member it blames, if any."""

    message: str
    fields: dict[str, object] = field(default_factory=dict)
    blames: int | None = None

    def text(self) -> str:
        return self.message + " " + " ".join(f"{k}={v}" for k, v in self.fields.items())


def member_hex(member_id: int) -> str:
    """A member id as etcd's types.ID prints it (lower-case hex)."""
    return f"{member_id:x}"


def initial_findings(me: int, local: KvHash, peers: Sequence[PeerHash]) -> list[Finding]:
    """etcd's CheckInitialHashKV: a finding with ``blames`` set is a mismatch (the member
    refuses to start if there is any); the others are warnings."""
    out: list[Finding] = []
    mine = {
        "local-member-id": member_hex(me),
        "local-member-revision": local.revision,
        "local-member-compact-revision": local.compact_revision,
        "local-member-hash": local.hash,
    }
    for p in peers:
        theirs: dict[str, object] = {
            "remote-peer-id": member_hex(p.member_id),
            "remote-peer-endpoints": list(p.endpoints),
        }
        if p.hash is not None:
            if p.hash.hash == local.hash:
                continue
            fields = mine | theirs
            fields |= {
                "remote-peer-revision": p.hash.revision,
                "remote-peer-compact-revision": p.hash.compact_revision,
                "remote-peer-hash": p.hash.hash,
            }
            if p.hash.compact_revision == local.compact_revision:
                out.append(Finding("found different hash values from remote peer", fields, me))
            else:
                out.append(
                    Finding("found different compact revision values from remote peer", fields)
                )
        elif p.error == FUTURE_REV:
            out.append(
                Finding(
                    "cannot fetch hash from slow remote peer", mine | theirs | {"error": p.detail}
                )
            )
        elif p.error == COMPACTED:
            out.append(
                Finding(
                    "cannot fetch hash from remote peer; local member is behind",
                    mine | theirs | {"error": p.detail},
                )
            )
    return out


def inconsistency(me: int) -> str:
    """The error a member whose initial check found a mismatch stops with (etcd's)."""
    return f"{member_hex(me)} found data inconsistency with peers"


def periodic_findings(
    me: int, first: KvHash, second: KvHash, peers: Sequence[PeerHash]
) -> tuple[list[Finding], int | None]:
    """etcd's checkHashKV: the leader's hash before (``first``) and after (``second``) its
    read barrier, and its peers' answers at ``first.revision``. Returns the findings and the
    member to raise CORRUPT for (the first found, as etcd raises one alarm per check)."""
    out: list[Finding] = []
    h, rev, crev = first.hash, first.revision, first.compact_revision
    h2, rev2, crev2 = second.hash, second.revision, second.compact_revision
    if h2 != h and rev2 == rev and crev == crev2:
        out.append(
            Finding(
                "found hash mismatch",
                {
                    "revision-1": rev,
                    "compact-revision-1": crev,
                    "hash-1": h,
                    "revision-2": rev2,
                    "compact-revision-2": crev2,
                    "hash-2": h2,
                },
                me,
            )
        )
    checked = 0
    for p in peers:
        if p.hash is None:
            continue
        checked += 1
        peer = member_hex(p.member_id)
        if p.hash.revision > rev2:
            out.append(
                Finding(
                    "revision from follower must be less than or equal to leader's",
                    {
                        "leader-revision": rev2,
                        "follower-revision": p.hash.revision,
                        "follower-peer-id": peer,
                    },
                    p.member_id,
                )
            )
        if p.hash.compact_revision > crev2:
            out.append(
                Finding(
                    "compact revision from follower must be less than or equal to leader's",
                    {
                        "leader-compact-revision": crev2,
                        "follower-compact-revision": p.hash.compact_revision,
                        "follower-peer-id": peer,
                    },
                    p.member_id,
                )
            )
        if p.hash.compact_revision == crev and p.hash.hash != h:
            out.append(
                Finding(
                    "same compact revision then hashes must match",
                    {
                        "leader-compact-revision": crev2,
                        "leader-hash": h,
                        "follower-compact-revision": p.hash.compact_revision,
                        "follower-hash": p.hash.hash,
                        "follower-peer-id": peer,
                    },
                    p.member_id,
                )
            )
    out.append(Finding("finished peer corruption check", {"number-of-peers-checked": checked}))
    blamed = next((f.blames for f in out if f.blames is not None), None)
    return out, blamed
