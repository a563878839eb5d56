"""At start, the kv history (:class:`~nameserver.kv.history.KvHistory`) from as far back as
this node can replay: the oldest kept snapshot that the change-log segments continue (or
offset 0 when the segments still start at offset 1 and no snapshot was ever installed from
the leader), then every kv and mvcc effect of the segments up to the restored image.

Cost: one pass over the segments from there (the effects the index keeps anyway) and one
pass over that snapshot's records, keeping only the keys the segments change (their values
before their first change). A node that cannot replay further back than its restored image
starts with its floor there, as after a snapshot installed from the leader.
"""

from __future__ import annotations

import logging

from nameserver.kv.history import KvHistory
from nameserver.kv.records import COMPACT_KEY, REVISION_KEY, Compaction, KeyValue, StoreRevision
from nameserver.kv.revision import REVISION
from nameserver.state.image import MetadataImage
from nameserver.state.machine import MetadataStateMachine
from raftlog import Effect, SegmentLog
from raftlog.log import ApplyObserver
from snapshots import FileSnapshotStore, SnapshotError, open_snapshot

log = logging.getLogger(__name__)


def open_history(
    state: MetadataStateMachine,
    then: ApplyObserver,
    store: FileSnapshotStore,
    segments: SegmentLog,
    installed_floor: int,
) -> KvHistory:
    """The node's kv history over its restored ``state``, rebuilt as far back as it can be,
    passing every apply group on to ``then`` (the watch hub); dropped below what the change
    log still holds."""
    history = KvHistory(state.image, lambda: state.image, then, lambda: segments.first_offset)
    rebuild(history, state.image, store, segments, installed_floor)
    return history


def rebuild(
    history: KvHistory,
    image: MetadataImage,
    store: FileSnapshotStore,
    segments: SegmentLog,
    installed_floor: int = 0,
) -> None:
    """Fill ``history`` (just made over ``image``) from the oldest replayable point;
    ``installed_floor``: the first offset after a snapshot installed from the leader (the
    segments before it do not hold every change). Never raises for a damaged or vanished
    snapshot: the floor then stays at the image."""
    last = image.offset
    first = segments.first_offset
    if last <= 0 or first <= 0:
        return
    candidates = [
        info
        for info in store.list()
        if info.path is not None
        and first <= info.last_offset + 1
        and installed_floor <= info.last_offset + 1
        and info.last_offset < last
    ]
    from_zero = first == 1 and installed_floor <= 1
    if not candidates and not from_zero:
        return
    base = 0 if from_zero else min(i.last_offset for i in candidates)
    # (offset, its kv, mvcc and revision effects): the revision record comes first
    changes: list[tuple[int, list[Effect]]] = []
    changed: set[bytes] = set()
    try:
        for rec in segments.read_from(base + 1):
            if rec.offset > last:
                break
            eff = Effect.decode(rec.payload)
            if eff.type == "kv" or eff.type == "mvcc" or eff.type == REVISION:
                if not changes or changes[-1][0] != rec.offset:
                    changes.append((rec.offset, []))
                changes[-1][1].append(eff)
                if eff.type == "kv":
                    changed.add(eff.key)
    except (ValueError, OSError) as exc:
        log.warning("kv history: cannot read the change log from %d (%s)", base + 1, exc)
        return
    prior: dict[bytes, KeyValue] = {}
    compacted = 0
    base_revision = base  # the store revision there: its offset unless it counts
    if base:
        info = next(i for i in candidates if i.last_offset == base)
        try:
            with open_snapshot(str(info.path)) as reader:
                for t, k, v in reader.iter_records(False):
                    if t == "kv" and k in changed:
                        prior[k] = KeyValue.from_record(v)
                    elif t == "mvcc" and k == COMPACT_KEY:
                        compacted = Compaction.from_record(v).revision
                    elif t == REVISION and k == REVISION_KEY:
                        base_revision = StoreRevision.from_record(v).revision
        except (SnapshotError, OSError) as exc:
            log.warning("kv history: cannot read snapshot %s (%s)", info.path, exc)
            return
    history.reset(image, base_revision, compacted)
    history.replay(prior.get, changes)
    log.info(
        "kv history: %d versions of %d keys from offset %d (floor %d)",
        history.versions(),
        len(changed),
        base,
        history.floor,
    )
