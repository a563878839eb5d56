"""The apply rule of ``member`` entries: a member's name and URLs added, changed or removed.

The engine's own membership (voters, learners) is not here: this is the metadata the
Cluster service answers with (names and client URLs), replicated through the log.
"""

from __future__ import annotations

from nameserver.cluster.records import Member
from nameserver.state.image import MetadataDelta
from raftlog import Effect, Entry


def apply_member_entry(delta: MetadataDelta, e: Entry, rev: int, effects: list[Effect]) -> None:
    """One ``member`` entry: a MemberRecord, or an empty value removing the member ``key``."""
    members = delta.members
    if not e.value:  # a removed member
        mid = e.key.decode()
        if members.get(mid) is not None:
            members.delete(mid)
            effects.append(Effect("member", e.key, delete=True))
        return None
    m = Member.from_record(e.value)
    if members.get(m.id) != m:
        members.put(m)
        effects.append(Effect("member", m.id.encode(), m.to_record()))
    return None
