"""The native engine's peer transport: one authenticated TCP connection per direction.

Each member dials every other member and writes its messages to it as length-prefixed
frames (:func:`raftlog.native.messages.encode_message`), all of one flush in one write;
replies come back on the other member's own connection. A connection starts with the
mutual handshake of :mod:`raftlog.native.auth` (over TLS when the config carries ssl
contexts, ``peer_ssl_server``/``peer_ssl_client``: etcd's peer TLS); inbound connections are bounded by
:mod:`raftlog.native.conns` (a cap, and deadlines for the handshake, between frames and
within a frame); the dialer sends a keepalive (an empty frame) every :attr:`NativeConfig.peer_keepalive_s`.

A dialled connection that goes silent is given up after ``peer_dead_timeout_ms`` and
dialled again (a black-holed connection gives no error or end-of-file, and TCP's
retransmissions back off past 10 s): nothing heard from that peer for that long
(:class:`raftlog.native.conns.OutboundDeadline`), or data written to it unacknowledged
that long (``TCP_USER_TIMEOUT`` on every peer socket). The forwards waiting for the
leader's answer are then failed at once (``on_lost``) rather than at their deadline.
Under packet loss a peer socket sends a lost segment again within a second
(:func:`raftlog.native.peer_socket.set_peer_socket_options`), rather than after TCP's
doubling back-off; with ``peer_paths`` > 1 messages move off a connection the kernel says
is stuck (:meth:`Transport.unstick`). A peer that does not answer is dialled with
overlapping connects, a SYN every quarter second (:mod:`raftlog.native.redial`), and one
that dials in while this member's own paths to it are down is dialled back at once
(:attr:`Peer.wakes`): it is reachable again (a healed partition), and until then this
member's messages to it were dropped.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import struct
import time
from collections.abc import Callable
from typing import Any

from raftlog.native.auth import PeerAuthError, PeerKey, accept, dial
from raftlog.native.config import NativeConfig
from raftlog.native.conns import (
    FRAME,
    IDLE,
    InboundConnections,
    OutboundDeadline,
    RateLimitedLog,
)
from raftlog.native.core import RaftCore
from raftlog.native.messages import Message, decode_message, encode_message
from raftlog.native.peer_socket import set_peer_socket_options, stuck
from raftlog.native.redial import connect_racing, pause
from raftlog.native.stall import TcpState, tcp_state

log = logging.getLogger(__name__)

#: a frame's length prefix (every peer frame, a snapshot chunk's included)
LEN = struct.Struct("<I")
_MAX_FRAME = 64 * 1024 * 1024
_KEEPALIVE = LEN.pack(0)  # an empty frame: keeps an idle authenticated connection open


def _peername(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?"


#: a TCP connect to a peer is given up after this (the kernel would send its SYN again
#: only now, then 3 s and 7 s after the first); meanwhile another starts every
#: :data:`raftlog.native.redial.SYN_EVERY_S`, so a peer cut off (a partition, an inbound
#: drop) is reached again within a quarter second of the heal
DIAL_TIMEOUT_S = 1.0
#: the longest pause between two dials of a peer that does not answer
DIAL_RETRY_MAX_S = 0.5


class _Keepalive:
    """Writes an empty frame on an outbound peer connection every ``every_s`` (so the
    listener's idle timeout never closes a live connection that has nothing to say, and
    the kernel always has data in flight to time out), and aborts the connection once
    ``deadline`` says the peer went silent."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        writer: asyncio.StreamWriter,
        every_s: float,
        deadline: OutboundDeadline,
        last_heard: Callable[[], float | None],
    ) -> None:
        self._loop, self._writer, self._every_s = loop, writer, every_s
        self._deadline, self._last_heard = deadline, last_heard
        self.silent = False  # aborted by the deadline
        self._handle = loop.call_later(every_s, self._beat)

    def _beat(self) -> None:
        if self._writer.is_closing():
            return
        if self._deadline.beat(time.monotonic(), self._last_heard()):
            self.silent = True
            self._writer.transport.abort()
            return
        self._writer.write(_KEEPALIVE)
        self._handle = self._loop.call_later(self._every_s, self._beat)

    def cancel(self) -> None:
        self._handle.cancel()


class Peer:
    """The outbound connections to one peer, ``paths`` of them (messages to it go to the
    current one; its replies come back on its own outbound connections to us)."""

    def __init__(self, address: str, paths: int = 1) -> None:
        self.address = address
        self.writers: list[asyncio.StreamWriter | None] = [None] * paths
        self.tasks: list[asyncio.Task[None] | None] = [None] * paths
        self.current = 0  # the path messages go to while it is up
        self.switches = 0  # times a stuck path was given up for another
        #: set when the peer dialled in while a path was down: that path's dialler stops
        #: waiting (its back-off, or a connect whose SYN a partition dropped) and dials now
        self.wakes = [asyncio.Event() for _ in range(paths)]

    @property
    def writer(self) -> asyncio.StreamWriter | None:
        """Where messages to the peer go now: the current path if it is up, else the
        first that is (which becomes the current one); None: no path is up."""
        writer = self.writers[self.current]
        if writer is not None:
            return writer
        for i, other in enumerate(self.writers):
            if other is not None:
                self.current = i
                return other
        return None


class Transport:
    """Listening, dialling, and the frames between members (on the engine's loop)."""

    def __init__(
        self,
        config: NativeConfig,
        loop: asyncio.AbstractEventLoop,
        core: RaftCore,
        on_message: Callable[[Message], None],
        kick: Callable[[], None],
        on_unsent: Callable[[str, list[int]], None],
        on_lost: Callable[[str], None] = lambda address: None,
    ) -> None:
        """``on_message``: each message a member sent; ``kick``: a flush is needed (frames
        were queued); ``on_unsent(to, rids)``: the forwards queued with
        :meth:`send_forward` whose frames could not be written (no connection to ``to``);
        ``on_lost(to)``: the connection to ``to`` broke (what was written to it since its
        last answer may or may not have arrived)."""
        self._config = config
        self._me = config.self_address
        self._loop = loop
        self._core = core
        self._on_message = on_message
        self._kick = kick
        self._on_unsent = on_unsent
        self._on_lost = on_lost
        self._key = PeerKey(config.password or "")  # validate() refused an empty one
        self._server: asyncio.base_events.Server | None = None
        self._peers: dict[str, Peer] = {}
        self._outbuf: dict[str, list[bytes]] = {}  # frames per peer, written once per flush
        self._forwarding: dict[str, list[int]] = {}  # forwards queued per peer, this flush
        self._inbound: set[asyncio.StreamWriter] = set()
        self._inbound_conns = InboundConnections(
            config.peer_max_connections,
            config.peer_handshake_timeout_ms / 1000,
            config.peer_idle_timeout_ms / 1000,
            config.peer_frame_timeout_ms / 1000,
        )
        self._sweeper: asyncio.TimerHandle | None = None
        self._sweep_due = 0.0  # when the sweeper was meant to run (its lateness: a stall)
        self._dial_warn = RateLimitedLog(60.0)  # our dials that the other end refused
        self._path_warn = RateLimitedLog(10.0)  # stuck paths given up
        self._stopping = False

    async def listen(self, sock: socket.socket | None) -> None:
        """Serve the peer port: on ``sock`` (bound already), else bind this member's address."""
        if sock is not None:
            self._server = await asyncio.start_server(self._on_inbound, sock=sock, **self._tls())
            return
        host, _, port = self._me.rpartition(":")
        self._server = await asyncio.start_server(
            self._on_inbound, host, int(port), reuse_address=True, **self._tls()
        )

    def stop(self) -> None:
        """No more dials, no more sweeps (then :meth:`close`)."""
        self._stopping = True

    async def _on_inbound(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns = self._inbound_conns
        slot = conns.open(writer.transport.abort, _peername(writer))
        if slot is None:  # peer_max_connections reached (warned, rate-limited)
            writer.transport.abort()
            return
        self._inbound.add(writer)
        self._ensure_sweeper()
        address = "?"
        try:
            try:
                address = await accept(reader, writer, self._key)
            except PeerAuthError as exc:
                if exc.address:
                    conns.warn.warning(
                        "bad-password",
                        "refused a Raft connection claiming to be %s: bad password",
                        exc.address,
                    )
                else:
                    conns.warn.warning(
                        "bad-handshake",
                        "refused a Raft connection from %s: %s",
                        _peername(writer),
                        exc,
                    )
                return
            set_peer_socket_options(writer, self._config.peer_dead_timeout_ms)
            clock, idle_s, frame_s = conns.clock, conns.idle_s, conns.frame_s
            slot.address = address
            self._dialled_in(address)
            slot.waiting_for = IDLE
            slot.deadline = clock() + idle_s
            while True:
                n = LEN.unpack(await reader.readexactly(4))[0]
                if n > _MAX_FRAME:
                    log.warning("%s sent a %d-byte frame; closing", address, n)
                    return
                if n:  # 0: a keepalive
                    slot.waiting_for = FRAME
                    slot.deadline = clock() + frame_s
                    m = decode_message(await reader.readexactly(n))
                    m.src = address
                    self._on_message(m)
                    slot.waiting_for = IDLE
                slot.deadline = clock() + idle_s
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            # the loop ends with this connection open (a TLS close waits for the peer):
            # Python 3.11's streams log a cancelled handler task at ERROR with a traceback
            pass
        except ValueError as exc:
            log.warning("bad message from %s on a Raft connection: %s", address, exc)
        finally:
            conns.close(slot)
            self._inbound.discard(writer)
            writer.close()

    def _ensure_sweeper(self) -> None:
        """While inbound connections are open, close those past their deadline."""
        if self._sweeper is None and not self._stopping:
            conns = self._inbound_conns
            interval = conns.sweep_interval_s
            self._sweep_due = conns.clock() + interval
            self._sweeper = self._loop.call_later(interval, self._sweep_inbound)

    def _sweep_inbound(self) -> None:
        self._sweeper = None
        if self._stopping:
            return
        conns = self._inbound_conns
        # late (this process was stopped, or its loop blocked): that time is not the
        # peers' silence, their frames wait unread in the socket buffers
        conns.sweep(late_s=max(0.0, conns.clock() - self._sweep_due))
        if len(self._inbound_conns):
            self._ensure_sweeper()

    def peer(self, address: str) -> Peer:
        """The connection to ``address``, dialled (again) if it is not up."""
        peer = self._peers.get(address)
        if peer is None:
            peer = self._peers[address] = Peer(address, self._config.peer_paths)
        if not self._stopping:
            for slot, task in enumerate(peer.tasks):
                if task is None or task.done():
                    peer.tasks[slot] = self._loop.create_task(self._connect(peer, slot))
        return peer

    def unstick(self) -> None:
        """With more than one path to a peer: a current path the kernel says is stuck
        (:func:`raftlog.native.peer_socket.stuck`) is given up for another that is not,
        the stuck one aborted so that nothing it holds arrives late (its forwards are
        answered: ``on_lost``) and dialled again. Raft sends again what the peer does not
        acknowledge. Called on every engine tick."""
        for peer in self._peers.values():
            if len(peer.writers) < 2:
                continue
            current = peer.writers[peer.current]
            if current is None or not stuck(current):
                continue
            other = next(
                (
                    i
                    for i, w in enumerate(peer.writers)
                    if i != peer.current and w is not None and not stuck(w)
                ),
                None,
            )
            if other is None:
                continue  # every path is stuck: TCP's retransmissions are all there is
            state = tcp_state(current.get_extra_info("socket"))
            peer.writers[peer.current] = None
            peer.current = other
            peer.switches += 1
            current.transport.abort()
            self._path_warn.warning(
                peer.address,
                "the connection to %s was stuck (%s); writing on another",
                peer.address,
                state.describe() if state is not None else "?",
            )
            self._on_lost(peer.address)

    def _dialled_in(self, address: str) -> None:
        """``address`` dialled in: its paths that are down are dialled now."""
        peer = self._peers.get(address)
        if peer is not None:
            for writer, wake in zip(peer.writers, peer.wakes, strict=True):
                if writer is None:
                    wake.set()

    async def _connect(self, peer: Peer, slot: int) -> None:
        host, _, port = peer.address.rpartition(":")
        delay = 0.05
        handshake_s = self._config.peer_handshake_timeout_ms / 1000
        keepalive_s = self._config.peer_keepalive_s
        dead_ms = self._config.peer_dead_timeout_ms
        loop = asyncio.get_running_loop()
        inbound = self._inbound_conns
        while not self._stopping:
            try:
                opened = await self._open(host, int(port), handshake_s, peer.wakes[slot])
                if opened is None:
                    continue
                reader, writer = opened
            except ssl.SSLError as exc:  # its certificate is not one our CA signed, ...
                self._dial_warn.warning(
                    peer.address, "TLS to the Raft port of %s failed: %s", peer.address, exc
                )
                await asyncio.sleep(1.0)
                continue
            except (OSError, TimeoutError):
                await pause(peer.wakes[slot], delay)
                delay = min(DIAL_RETRY_MAX_S, delay * 2)
                continue
            try:
                set_peer_socket_options(writer, dead_ms)
                await asyncio.wait_for(dial(reader, writer, self._key, self._me), handshake_s)
                peer.writers[slot] = writer
                delay = 0.05
                deadline = OutboundDeadline(time.monotonic(), dead_ms / 1000, keepalive_s)
                beat = _Keepalive(
                    loop, writer, keepalive_s, deadline, lambda: inbound.last_heard(peer.address)
                )
                try:
                    await reader.read(1)  # the listener never writes after its proof: EOF
                finally:
                    beat.cancel()
                    if beat.silent:
                        self._dial_warn.warning(
                            peer.address,
                            "heard nothing from %s for %.1f s; dialling it again",
                            peer.address,
                            dead_ms / 1000,
                        )
            except PeerAuthError as exc:
                self._dial_warn.warning(
                    peer.address, "the Raft port of %s failed the handshake: %s", peer.address, exc
                )
                delay = 1.0
            except ssl.SSLError as exc:  # e.g. it refused our certificate (TLS 1.3: after)
                self._dial_warn.warning(
                    peer.address, "TLS to the Raft port of %s failed: %s", peer.address, exc
                )
                delay = 1.0
            except asyncio.IncompleteReadError:
                self._dial_warn.warning(
                    peer.address,
                    "%s closed the Raft connection during the handshake (a different cluster "
                    "password, or its peer_max_connections reached?)",
                    peer.address,
                )
                delay = 1.0
            except (OSError, TimeoutError):
                pass
            finally:
                # (not when unstick gave it up: it said so already)
                lost = peer.writers[slot] is writer
                if lost:
                    peer.writers[slot] = None
                writer.close()
                if lost and slot == peer.current and not self._stopping:
                    self._on_lost(peer.address)
            if self._stopping or (
                not self._core.is_member(peer.address) and peer.address != self._core.leader
            ):
                return  # no longer a member: stop redialling
            await pause(peer.wakes[slot], delay)

    def _tls(self) -> dict[str, Any]:
        """start_server's TLS arguments (none: plain TCP)."""
        ctx = self._config.peer_ssl_server
        if ctx is None:
            return {}
        return {"ssl": ctx, "ssl_handshake_timeout": self._config.peer_handshake_timeout_ms / 1000}

    async def _open(
        self, host: str, port: int, handshake_s: float, wake: asyncio.Event
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to a peer's Raft port: TCP connects overlapping, each given up after
        :data:`DIAL_TIMEOUT_S` (:func:`raftlog.native.redial.connect_racing`; None: the peer
        dialled in meanwhile), then (peer TLS) the TLS handshake within ``handshake_s``."""
        opened = await connect_racing(
            lambda: asyncio.open_connection(host, port),
            wake,
            DIAL_TIMEOUT_S,
            discard=lambda pair: pair[1].close(),
        )
        if opened is None:
            return None
        reader, writer = opened
        ctx = self._config.peer_ssl_client
        if ctx is not None:
            try:
                tls = writer.start_tls(ctx, server_hostname=host.strip("[]"))
                await asyncio.wait_for(tls, handshake_s)
            except BaseException:
                writer.close()
                raise
        return reader, writer

    def send(self, to: str, m: Message) -> None:
        """Queue a message; the flush writes each peer's messages with one write (one
        send(2) per peer per flush, not per message)."""
        if to == self._me or not to:
            return
        payload = encode_message(m)
        frames = self._outbuf.get(to)
        if frames is None:
            self._outbuf[to] = [LEN.pack(len(payload)), payload]
            self._kick()
        else:
            frames += (LEN.pack(len(payload)), payload)

    def tcp_state(self, address: str) -> TcpState | None:
        """The kernel's view of the outbound connection to ``address`` (None: not up)."""
        peer = self._peers.get(address)
        writer = peer.writer if peer is not None else None
        return None if writer is None else tcp_state(writer.get_extra_info("socket"))

    def send_forward(self, to: str, m: Message, rid: int) -> None:
        """:meth:`send` a forwarded proposal (request id ``rid``): if its frame cannot be
        written, ``on_unsent`` hears of it."""
        self.send(to, m)
        self._forwarding.setdefault(to, []).append(rid)

    def write_out(self) -> None:
        if not self._outbuf:
            return
        out, self._outbuf = self._outbuf, {}
        forwarded, self._forwarding = self._forwarding, {}
        peers = self._peers
        for to, frames in out.items():
            peer = peers.get(to)  # the current path (nearly always); else another, or a dial
            writer = peer.writers[peer.current] if peer is not None else None
            if writer is None:
                writer = self.peer(to).writer
            if writer is None:  # not connected: Raft retries (heartbeats, resends)
                rids = forwarded.get(to)
                if rids:
                    self._on_unsent(to, rids)
                continue
            writer.write(b"".join(frames))
            transport = writer.transport
            if transport.get_write_buffer_size() > _MAX_FRAME:
                log.warning("%s does not read its Raft messages; reconnecting", to)
                transport.abort()

    def close(self) -> list[asyncio.Task[None]]:
        """Close the listener and every connection, cancel the peer tasks; return them."""
        if self._server is not None:
            self._server.close()
        tasks = []
        for peer in self._peers.values():
            for task in peer.tasks:
                if task is not None:
                    task.cancel()
                    tasks.append(task)
            for writer in peer.writers:
                if writer is not None:
                    writer.close()
        tls = self._config.peer_ssl_server is not None
        for w in list(self._inbound):
            # a TLS close waits for the peer's close_notify; the reader must end now
            w.transport.abort() if tls else w.close()
        return tasks
