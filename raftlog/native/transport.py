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
(:func:`set_peer_socket_options`), rather than after TCP's doubling back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
import sys
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
from raftlog.native.stall import TcpState, tcp_state

log = logging.getLogger(__name__)

#: a frame's length prefix (every peer frame, a snapshot chunk's included)
LEN = struct.Struct("<I")
_MAX_FRAME = 64 * 1024 * 1024
_KEEPALIVE = LEN.pack(0)  # an empty frame: keeps an idle authenticated connection open


def _peername(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?"


#: Linux's TCP_THIN_LINEAR_TIMEOUTS (``socket`` lacks the name): while fewer than four
#: segments are in flight, the first six retransmissions keep the base timeout instead of
#: doubling it each time
TCP_THIN_LINEAR_TIMEOUTS = 16
#: Linux's TCP_RTO_MAX_MS (6.15 and later; older kernels refuse it): the cap on the
#: retransmission timeout, backed-off or not (at least 1000 ms; the default is 120 s)
TCP_RTO_MAX_MS = 44
#: Linux's TCP_RTO_MIN_US (6.15 and later): the floor of the retransmission timeout
#: (at most the default, 200 ms)
TCP_RTO_MIN_US = 45
#: the cap peer sockets ask for: the kernel's lowest, an election timeout's minimum
PEER_RTO_MAX_MS = 1000
#: a dial's TCP connect: a fresh SYN each second rather than the kernel's doubling SYN
#: retransmissions (1 s, 3 s, 7 s after the first), so a peer cut off (a partition, an
#: inbound drop) is reached again about a second after the heal, not up to three
DIAL_TIMEOUT_S = 1.0
#: the longest pause between two dials of a peer that does not answer
DIAL_RETRY_MAX_S = 0.5
#: the floor peer sockets ask for (the timeout is the smoothed round trip plus at least
#: this): a quarter of the default, still above a receiver's 40 ms delayed acknowledgement
PEER_RTO_MIN_US = 50_000


def set_peer_socket_options(writer: asyncio.StreamWriter, dead_timeout_ms: int) -> None:
    """No Nagle delay; the kernel aborts the connection when data written to it stays
    unacknowledged for ``dead_timeout_ms`` (TCP_USER_TIMEOUT: Linux's; elsewhere only
    :class:`OutboundDeadline` notices); and a lost segment is sent again within a second,
    not after TCP's doubling back-off: linear timeouts while the stream is thin (a peer
    connection mostly is), and the timeout kept between 50 ms and 1 s where the kernel
    allows it (Linux 6.15 and later; otherwise 200 ms to 120 s). Under 20 % packet loss
    the retransmission timeout of a peer connection doubled to 1-4 s and every message
    written after a lost segment waited behind it: seconds without a commit, and an
    election now and then. Data flows from the dialler; the listener's side only
    acknowledges, and gets the same options."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        peer_socket_options(sock, dead_timeout_ms)


def peer_socket_options(sock: socket.socket, dead_timeout_ms: int) -> None:
    """:func:`set_peer_socket_options` on a socket (the fault harness measures plain TCP
    under packet loss with exactly these)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if not sys.platform.startswith("linux"):
        return
    for option, value in (
        (socket.TCP_USER_TIMEOUT, dead_timeout_ms),
        (TCP_THIN_LINEAR_TIMEOUTS, 1),
        (TCP_RTO_MAX_MS, PEER_RTO_MAX_MS),
        (TCP_RTO_MIN_US, PEER_RTO_MIN_US),
    ):
        with contextlib.suppress(OSError):  # an older kernel without the option
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


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
    """The outbound connection to one peer (messages to it go here; its replies come back
    on its own outbound connection to us)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None


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
            peer = self._peers[address] = Peer(address)
        if (peer.task is None or peer.task.done()) and not self._stopping:
            peer.task = self._loop.create_task(self._connect(peer))
        return peer

    async def _connect(self, peer: Peer) -> None:
        host, _, port = peer.address.rpartition(":")
        delay = 0.05
        handshake_s = self._config.peer_handshake_timeout_ms / 1000
        keepalive_s = self._config.peer_keepalive_s
        dead_ms = self._config.peer_dead_timeout_ms
        loop = asyncio.get_running_loop()
        inbound = self._inbound_conns
        while not self._stopping:
            try:
                reader, writer = await self._open(host, int(port), handshake_s)
            except ssl.SSLError as exc:  # its certificate is not one our CA signed, ...
                self._dial_warn.warning(
                    peer.address, "TLS to the Raft port of %s failed: %s", peer.address, exc
                )
                await asyncio.sleep(1.0)
                continue
            except (OSError, TimeoutError):
                await asyncio.sleep(delay)
                delay = min(DIAL_RETRY_MAX_S, delay * 2)
                continue
            try:
                set_peer_socket_options(writer, dead_ms)
                await asyncio.wait_for(dial(reader, writer, self._key, self._me), handshake_s)
                peer.writer = writer
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
                lost = peer.writer is not None
                peer.writer = None
                writer.close()
                if lost and not self._stopping:
                    self._on_lost(peer.address)
            if self._stopping or (
                not self._core.is_member(peer.address) and peer.address != self._core.leader
            ):
                return  # no longer a member: stop redialling
            await asyncio.sleep(delay)

    def _tls(self) -> dict[str, Any]:
        """start_server's TLS arguments (none: plain TCP)."""
        ctx = self._config.peer_ssl_server
        if ctx is None:
            return {}
        return {"ssl": ctx, "ssl_handshake_timeout": self._config.peer_handshake_timeout_ms / 1000}

    async def _open(
        self, host: str, port: int, handshake_s: float
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to a peer's Raft port: the TCP connect within :data:`DIAL_TIMEOUT_S`,
        then (peer TLS) the TLS handshake within ``handshake_s``."""
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), DIAL_TIMEOUT_S)
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
        for to, frames in out.items():
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
            if peer.task is not None:
                peer.task.cancel()
                tasks.append(peer.task)
            if peer.writer is not None:
                peer.writer.close()
        tls = self._config.peer_ssl_server is not None
        for w in list(self._inbound):
            # a TLS close waits for the peer's close_notify; the reader must end now
            w.transport.abort() if tls else w.close()
        return tasks
