"""The client-delay nemesis without a kernel: every member's client traffic delayed alike,
from the seed, and the same draw as the member-to-member delay."""

from __future__ import annotations

import random

from tests.faults.net.nemesis import FAULTS, client_delay, delay
from tests.faults.net.netns import CLIENTS


class _RecordingNet:
    members = ["a", "b", "c"]

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[int, ...], int]] = []

    def delay(self, a: int, b: int, delay_ms: int, jitter_ms: int = 0, *, seed: int = 0) -> None:
        if a == CLIENTS:
            self.calls.append(("clients", (b, delay_ms, jitter_ms), seed))
        else:
            self.calls.append(("members", (a, b, delay_ms, jitter_ms), seed))


def test_client_delay_holds_every_member_s_clients_alike_from_the_seed() -> None:
    assert FAULTS["client-delay"] is client_delay
    net = _RecordingNet()
    text = client_delay(net, 1, random.Random(3))  # type: ignore[arg-type]
    assert [c[1][0] for c in net.calls] == [0, 1, 2]
    assert {c[0] for c in net.calls} == {"clients"}
    assert len({(c[1][1:], c[2]) for c in net.calls}) == 1
    delay_ms, jitter_ms = net.calls[0][1][1:]
    assert 50 <= delay_ms <= 150 and jitter_ms == delay_ms // 4
    assert text == f"delay {delay_ms} ms (+- {jitter_ms} ms) between clients and members"
    members = _RecordingNet()
    delay(members, 1, random.Random(3))  # type: ignore[arg-type]
    assert members.calls[0][1][2:] == (delay_ms, jitter_ms)  # the same draw
    assert members.calls[0][2] == net.calls[0][2]
