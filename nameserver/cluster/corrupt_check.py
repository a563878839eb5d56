"""The corruption checks' driver (etcd 3.4's ``CheckInitialHashKV`` and ``monitorKVHash``):
fetch this member's and its peers' HashKV, hand them to the rules of
:mod:`nameserver.cluster.corrupt`, log what they find as etcd does and raise CORRUPT.

Peers are asked through their client port's ``Maintenance.HashKV`` (etcd asks its peers'
``/members/hashkv`` on the peer port; metaledger's peer port carries Raft only), each at
the URLs of its member record, with the node credential, within the propose timeout. A
member without a record yet (not announced) is skipped, as etcd skips one without URLs,
and so is a learner: it answers no HashKV on its client port (etcd 3.4's learner rules),
where etcd would ask it on its peer port.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc

from nameserver.cluster.corrupt import (
    COMPACTED,
    FUTURE_REV,
    OTHER,
    Finding,
    KvHash,
    PeerHash,
    initial_findings,
    member_hex,
    periodic_findings,
)
from nameserver.cluster.records import ALARM_CORRUPT
from nameserver.kv.hashing import kv_hash_at
from nameserver.kv.records import KvImage, kv_size, new_kv
from nameserver.kv.revision import COUNTING_METADATA
from nameserver.state.duties import PeriodicDuties
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc

if TYPE_CHECKING:
    from nameserver.node import NodeFacade
    from nameserver.state.image import MetadataImage

log = logging.getLogger(__name__)

#: a channel to another member's client address (``host:port``)
Dial = Callable[[str], grpc.aio.Channel]


def _address(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


def _log(finding: Finding, level: int = logging.WARNING) -> None:
    log.log(level, "%s", finding.text())


class CorruptChecker(PeriodicDuties):
    """The initial check (:meth:`initial`) and, every ``interval_s`` on the leader, the
    periodic one (:meth:`check`)."""

    def __init__(self, node: NodeFacade, interval_s: float, dial: Dial) -> None:
        super().__init__(node.log)
        self.node = node
        self.interval_s = interval_s
        self.dial = dial

    async def local_hash(self) -> KvHash:
        """This member's HashKV at its current revision (one image: hash and revisions agree)."""
        image = self.node.state.image
        compact = image.mvcc.compact_revision
        digest = await asyncio.to_thread(kv_hash_at, image.kv.data.items(), compact)
        return KvHash(digest, image.revision, compact)

    async def peer_hashes(self, revision: int) -> list[PeerHash]:
        """Every other member's HashKV at ``revision`` (etcd's getPeerHashKVs)."""
        me = self.node.member_id
        learners = {m.address for m in self.node.engine.members() if m.is_learner}
        out = []
        for rec in sorted(self.node.state.image.members.members.values(), key=lambda m: m.id):
            if rec.member_id == me or not rec.client_urls or _address(rec.peer_url) in learners:
                continue
            out.append(await self._peer_hash(rec.member_id, rec.client_urls, revision))
        return out

    async def _peer_hash(self, member_id: int, urls: tuple[str, ...], revision: int) -> PeerHash:
        error, detail = OTHER, ""
        for url in urls:
            channel = self.dial(_address(url))
            try:
                call = rpc_pb2_grpc.MaintenanceStub(channel).HashKV(
                    rpc_pb2.HashKVRequest(revision=revision),
                    metadata=self.node.node_metadata,
                    timeout=self.node.timeout_s,
                )
                resp = await call
                trailing = [(k, v) for k, v in await call.trailing_metadata() or ()]
                found = KvHash(resp.hash, resp.header.revision, resp.compact_revision)
                return PeerHash(member_id, urls, found, counts_etcd=COUNTING_METADATA in trailing)
            except grpc.aio.AioRpcError as exc:
                detail = exc.details() or str(exc.code())
                if "future revision" in detail:
                    error = FUTURE_REV
                elif "compacted" in detail:
                    error = COMPACTED
                else:
                    error = OTHER
                log.warning(
                    "failed hash kv request local-member-id=%s requested-revision=%d "
                    "remote-peer-endpoint=%s error=%s",
                    member_hex(self.node.member_id),
                    revision,
                    url,
                    detail,
                )
            finally:
                await channel.close()
        return PeerHash(member_id, urls, None, error, detail)

    async def initial(self) -> bool:
        """etcd's CheckInitialHashKV: False when a peer's hash differs at this member's
        revision with the same compact revision (the member must not start)."""
        me = self.node.member_id
        log.info(
            "starting initial corruption check local-member-id=%s timeout=%gs",
            member_hex(me),
            self.node.timeout_s,
        )
        local = await self.local_hash()
        findings = initial_findings(me, local, await self.peer_hashes(local.revision))
        for f in findings:
            _log(f)
        if any(f.blames is not None for f in findings):
            return False
        log.info(
            "initial corruption checking passed; no corruption local-member-id=%s", member_hex(me)
        )
        return True

    def start(self) -> None:
        if self.interval_s > 0:
            log.info(
                "enabled corruption checking local-member-id=%s interval=%gs",
                member_hex(self.node.member_id),
                self.interval_s,
            )
            self.run_every((self.interval_s, self.tick))

    async def stop(self) -> None:
        await self.stop_jobs()

    async def tick(self) -> None:
        if self.lead() is None:
            return
        try:
            await self.check()
        except Exception as exc:  # etcd: "failed to check hash KV"; tried again next time
            log.warning("failed to check hash KV error=%s", exc)

    async def check(self) -> int | None:
        """etcd's checkHashKV; returns the member CORRUPT was raised for, if any."""
        counts_etcd = self._counts_etcd()
        first = await self.local_hash()  # of the image counts_etcd was read from
        answers = await self.peer_hashes(first.revision)
        await self.node.read_image(False)  # etcd's linearizableReadNotify
        if self._counts_etcd() != counts_etcd:
            # this store switched to etcd's revision count between the two hashes: the
            # revisions on either side of the switch do not compare (a sound member was
            # once blamed that way)
            log.info("skipped corruption check: this store switched its revision count")
            return None
        second = await self.local_hash()
        peers = [p for p in answers if self._alike(p, counts_etcd)]
        findings, blamed = periodic_findings(self.node.member_id, first, second, peers)
        for f in findings:
            _log(f, logging.INFO if f.blames is None else logging.WARNING)
        if blamed is not None:
            await self.raise_corrupt(blamed)
        return blamed

    def _counts_etcd(self) -> bool:
        """Whether this member's store counts revisions etcd's way (switched)."""
        return bool(self.node.state.image.store_rev.revision >= 0)

    @staticmethod
    def _alike(peer: PeerHash, counts_etcd: bool) -> bool:
        """Whether ``peer``'s revisions compare with ours: a store switching to etcd's count
        is switched on one member before another applies the switch, and for that moment
        the two number the same keys differently (a check then blamed a sound member)."""
        if peer.hash is None or peer.counts_etcd in (None, counts_etcd):
            return True
        log.info(
            "skipped peer corruption check of %s: its store and this one count revisions "
            "differently (the switch to etcd's count is being applied)",
            member_hex(peer.member_id),
        )
        return False

    async def raise_corrupt(self, member_id: int) -> None:
        request = rpc_pb2.AlarmRequest(
            action=rpc_pb2.AlarmRequest.ACTIVATE,
            memberID=member_id,
            alarm=ALARM_CORRUPT,  # type: ignore[arg-type]  # an AlarmType value
        )
        await self.node.change_alarm(request, None)


def tamper_kv(image: MetadataImage, spec: str) -> MetadataImage:
    """TESTS ONLY (``--debug-corrupt-kv KEY=VALUE``): ``image`` with an existing key's
    value changed and nothing else (revisions, versions, lease kept): a member whose state
    differs from its peers' while its files stay valid. ValueError if the key is absent."""
    key_text, _, value_text = spec.partition("=")
    key, value = key_text.encode(), value_text.encode()
    kv = image.kv.data.get(key)
    if kv is None:
        raise ValueError(f"--debug-corrupt-kv: no key {key_text!r} in this member's image")
    changed = new_kv(key, value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)
    sub = KvImage(
        image.kv.data.set(key, changed),
        image.kv.by_lease,
        image.kv.value_bytes - kv_size(kv) + kv_size(changed),
    )
    log.warning("--debug-corrupt-kv: key %r changed behind the log's back (tests only)", key_text)
    return image.replace(kv=sub)
