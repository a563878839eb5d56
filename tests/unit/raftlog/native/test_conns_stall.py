"""raftlog.native.conns, sans I/O: a sweep that runs late (this process was stopped with
SIGSTOP, or its event loop blocked) does not count the time it did not run against the
peers, whose frames meanwhile wait unread in the socket buffers; a connection that was
already past its deadline when the sweep was due is still closed."""

from __future__ import annotations

from raftlog.native.conns import IDLE, InboundConnections


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_late_sweep_closes_only_what_was_past_its_deadline_when_it_was_due() -> None:
    clock = Clock()
    conns = InboundConnections(10, 5.0, 30.0, 20.0, clock=clock)
    aborted: list[str] = []
    talking = conns.open(lambda: aborted.append("talking"))
    silent = conns.open(lambda: aborted.append("silent"))
    assert talking is not None and silent is not None
    talking.waiting_for, talking.deadline = IDLE, clock.now + 30.0  # a frame just now
    silent.waiting_for, silent.deadline = IDLE, clock.now - 0.5  # overdue before the stall
    due = clock.now + conns.sweep_interval_s
    clock.now += 31.0  # stopped for half a minute: the sweep runs ~31 s late
    assert conns.sweep(late_s=clock.now - due) == 1
    assert aborted == ["silent"] and len(conns) == 1
    # the stall did not count: the talking connection keeps the 29 s it had left when
    # the sweep was due (30 s from its last frame, less the 1 s sweep interval)
    clock.now += 28.5
    assert conns.sweep() == 0
    clock.now += 1.0
    assert conns.sweep() == 1 and aborted == ["silent", "talking"]


def test_without_lateness_the_sweep_is_unchanged() -> None:
    clock = Clock()
    conns = InboundConnections(10, 5.0, 30.0, 20.0, clock=clock)
    aborted: list[int] = []
    slot = conns.open(lambda: aborted.append(1))
    assert slot is not None
    clock.now += 5.1  # the handshake deadline passed while the sweeps ran on time
    assert conns.sweep(late_s=0.0) == 1 and aborted == [1]
