"""Sans-I/O frames of RocketMQ 5's auto-switch HA: bytes in, events out, no sockets.

Big-endian (RocketMQ 5's ``store/ha/autoswitch/``: ``AutoSwitchHAClient.java``,
``AutoSwitchHAConnection.java``)::

    slave -> master handshake  16 bytes   state i32 = 1 | isSyncFromLastFile i16 |
                                          isAsyncLearner i16 | slaveBrokerId i64
    master -> slave handshake  20 + 12n   state i32 = 1 | bodySize i32 = 12n | masterMaxOffset i64 |
                                          lastEpoch i32 | n x (epoch i32 | startOffset i64)
    slave -> master ack        12 bytes   state i32 = 2 | slaveMaxOffset i64
    master -> slave data       36 + size  state i32 = 2 | size i32 | offset i64 | epoch i32 |
                                          epochStartOffset i64 | confirmOffset i64 | raw commit log

An empty data frame is the master's heartbeat. Each direction is a two-phase table,
HANDSHAKE then TRANSFER; a frame whose state field is not its phase's, a negative offset
or a size past the limits raises HAProtocolError (the connection is closed, as RocketMQ
drops it on a state mismatch). The slave's decoder also holds the replication offset: it
is set once after the handshake (``start``) and advanced by every data frame it returns,
which must begin exactly there (OffsetMismatch otherwise).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from broker.ha.epochs import EpochEntry
from broker.ha.errors import HAProtocolError, OffsetMismatch


class HAState(enum.IntEnum):
    """``HAConnectionState`` ordinals, the first field of every frame."""

    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


MAX_DATA_BYTES: Final = 4 * 1024 * 1024
"""A data frame's payload limit: the slave's read buffer in RocketMQ (4 MiB)."""
MAX_EPOCH_ENTRIES: Final = 65536

_SLAVE_HANDSHAKE: Final = struct.Struct(">ihhq")
_MASTER_HANDSHAKE: Final = struct.Struct(">iiqi")
_EPOCH: Final = struct.Struct(">iq")
_ACK: Final = struct.Struct(">iq")
_DATA: Final = struct.Struct(">iiqiqq")


@dataclass(frozen=True)
class SlaveHandshake:
    broker_id: int
    sync_from_last_file: bool = False
    async_learner: bool = False


@dataclass(frozen=True)
class MasterHandshake:
    max_offset: int
    last_epoch: int
    epochs: tuple[EpochEntry, ...]


@dataclass(frozen=True)
class SlaveAck:
    offset: int  # the slave's max commit-log offset


@dataclass(frozen=True)
class DataFrame:
    offset: int
    epoch: int
    epoch_start: int
    confirm_offset: int
    data: bytes = b""

    @property
    def is_heartbeat(self) -> bool:
        return not self.data


class NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData()

SlaveEvent = SlaveHandshake | SlaveAck
MasterEvent = MasterHandshake | DataFrame


# -- encoders -------------------------------------------------------------------------
def encode_slave_handshake(h: SlaveHandshake) -> bytes:
    return _SLAVE_HANDSHAKE.pack(
        HAState.HANDSHAKE, int(h.sync_from_last_file), int(h.async_learner), h.broker_id
    )


def encode_master_handshake(max_offset: int, epochs: Sequence[EpochEntry]) -> bytes:
    last = epochs[-1].epoch if epochs else 0
    body = b"".join(_EPOCH.pack(e.epoch, e.start_offset) for e in epochs)
    return _MASTER_HANDSHAKE.pack(HAState.HANDSHAKE, len(body), max_offset, last) + body


def encode_ack(offset: int) -> bytes:
    return _ACK.pack(HAState.TRANSFER, offset)


def encode_data(frame: DataFrame) -> bytes:
    head = _DATA.pack(
        HAState.TRANSFER,
        len(frame.data),
        frame.offset,
        frame.epoch,
        frame.epoch_start,
        frame.confirm_offset,
    )
    return head + frame.data


# -- decoders -------------------------------------------------------------------------
def _check_state(got: int, phase: HAState, frame: str) -> None:
    if got != phase:
        raise HAProtocolError(f"{frame}: state field {got}, expected {phase.name} ({int(phase)})")


def _check_offset(value: int, name: str) -> None:
    if value < 0:
        raise HAProtocolError(f"{name} {value} is negative")


class _Decoder:
    def __init__(self) -> None:
        self._buf = bytearray()
        self.phase = HAState.HANDSHAKE

    def receive_data(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def _take(self, n: int) -> bytes:
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out


class SlaveStreamDecoder(_Decoder):
    """The master's side: decodes what a slave sends (handshake, then acks)."""

    def next_event(self) -> SlaveEvent | NeedData:
        if self.phase is HAState.HANDSHAKE:
            if len(self._buf) < _SLAVE_HANDSHAKE.size:
                return NEED_DATA
            state, last_file, learner, broker_id = _SLAVE_HANDSHAKE.unpack_from(self._buf)
            _check_state(state, HAState.HANDSHAKE, "slave handshake")
            if last_file not in (0, 1) or learner not in (0, 1):
                raise HAProtocolError(f"slave handshake flags {last_file}, {learner} are not 0/1")
            _check_offset(broker_id, "slave broker id")
            self._take(_SLAVE_HANDSHAKE.size)
            self.phase = HAState.TRANSFER
            return SlaveHandshake(broker_id, bool(last_file), bool(learner))
        if len(self._buf) < _ACK.size:
            return NEED_DATA
        state, offset = _ACK.unpack_from(self._buf)
        _check_state(state, HAState.TRANSFER, "slave ack")
        _check_offset(offset, "slave max offset")
        self._take(_ACK.size)
        return SlaveAck(offset)


class MasterStreamDecoder(_Decoder):
    """The slave's side: decodes what the master sends (handshake, then data frames).

    ``offset`` is the slave's replication offset: ``start(offset)`` after the handshake's
    truncation, then advanced past each data frame's bytes as it is returned.
    ``start(None)``: the slave's log is empty and takes the first frame's offset (the
    master starts an empty slave at its own oldest byte, RocketMQ's report of 0).
    """

    def __init__(self) -> None:
        super().__init__()
        self.offset: int | None = None
        self._started = False

    def start(self, offset: int | None) -> None:
        self.offset = offset
        self._started = True

    def next_event(self) -> MasterEvent | NeedData:
        if self.phase is HAState.HANDSHAKE:
            return self._handshake()
        if len(self._buf) < _DATA.size:
            return NEED_DATA
        state, size, offset, epoch, epoch_start, confirm = _DATA.unpack_from(self._buf)
        _check_state(state, HAState.TRANSFER, "data frame")
        if not 0 <= size <= MAX_DATA_BYTES:
            raise HAProtocolError(f"data frame size {size} outside [0, {MAX_DATA_BYTES}]")
        for value, name in (
            (offset, "offset"),
            (epoch, "epoch"),
            (epoch_start, "epoch start"),
            (confirm, "confirm offset"),
        ):
            _check_offset(value, f"data frame {name}")
        if size and epoch_start > offset:
            raise HAProtocolError(f"data at {offset} before its epoch's start {epoch_start}")
        if len(self._buf) < _DATA.size + size:
            return NEED_DATA
        if size:
            if not self._started:
                raise HAProtocolError("data frame before the replication offset was set")
            if self.offset is None:
                self.offset = offset
            elif offset != self.offset:
                raise OffsetMismatch(
                    f"data frame at {offset}, the slave's log ends at {self.offset}"
                )
            self.offset += size
        self._take(_DATA.size)
        return DataFrame(offset, epoch, epoch_start, confirm, self._take(size))

    def _handshake(self) -> MasterHandshake | NeedData:
        if len(self._buf) < _MASTER_HANDSHAKE.size:
            return NEED_DATA
        state, body_size, max_offset, last_epoch = _MASTER_HANDSHAKE.unpack_from(self._buf)
        _check_state(state, HAState.HANDSHAKE, "master handshake")
        if body_size < 0 or body_size % _EPOCH.size or body_size > MAX_EPOCH_ENTRIES * _EPOCH.size:
            raise HAProtocolError(f"master handshake body of {body_size} bytes")
        _check_offset(max_offset, "master max offset")
        if len(self._buf) < _MASTER_HANDSHAKE.size + body_size:
            return NEED_DATA
        self._take(_MASTER_HANDSHAKE.size)
        body = self._take(body_size)
        epochs = tuple(EpochEntry(*_EPOCH.unpack_from(body, i)) for i in range(0, body_size, 12))
        prev: EpochEntry | None = None
        for e in epochs:
            _check_offset(e.start_offset, "epoch start")
            if prev and not (e.epoch > prev.epoch and e.start_offset > prev.start_offset):
                raise HAProtocolError(f"master epochs out of order: {prev} then {e}")
            if e.start_offset > max_offset:
                raise HAProtocolError(f"epoch {e.epoch} starts past the master's end {max_offset}")
            prev = e
        if epochs and last_epoch != epochs[-1].epoch:
            raise HAProtocolError(f"lastEpoch {last_epoch} is not the last entry's {epochs[-1]}")
        self.phase = HAState.TRANSFER
        return MasterHandshake(max_offset, last_epoch, epochs)
