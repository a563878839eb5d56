"""One broker replica's clock jumps forward and back while sends go on: a quorum-write group
(three replicas, SYNC_MASTER, 3 replicas / 2 in sync, a 2 s replica heartbeat timeout) on a
metaledger node, a producer sending without pause.

The stepped replica (the master, or a slave) runs under libfaketime with its own
``FAKETIME_TIMESTAMP_FILE``, rewritten to step its real-time clock ``+60 s``, then ``-60 s``,
then back, each held 2 s; the monotonic clock is left alone, as ``date -s`` or NTP stepping
do (see ``test_clocks.py``, which steps a metaledger member the same way).

What must hold: sends are acknowledged at every step; metaledger never names two masters
for one master epoch, and no two replicas acknowledge sends in one epoch (the epoch each
acknowledgement fell in is the one metaledger named last before it); every acknowledged
message is consumable from the master afterwards.

A replica started with its real-time clock an hour off (ahead as the master, behind as a
slave) goes through a failover (the master killed, a slave elected, the old master back as a
slave and caught up, ``failover_support.kill_round``) with the same checks; so does one whose
clocks, monotonic included, run at x2 or x0.5 from its start (as the master, as a slave).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import defaultdict
from pathlib import Path

import pytest

from nameserver.client import Client
from tests.cluster.broker.failover_procs import Replica
from tests.cluster.broker.failover_support import (
    Producer,
    group_info,
    kill_round,
    pull_all,
    runtime_info,
    setup_group,
    until,
)
from tests.faults.net.broker_checker import GroupState, check_masters
from tests.faults.test_clocks import LIBFAKETIME, STEPS, cluster_at_rate, faketime_env
from tests.harness import running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.faults, pytest.mark.slow]

if not LIBFAKETIME.exists():
    pytest.skip("libfaketime is not installed (apt-get install faketime)", allow_module_level=True)

GROUP = "clock-group"
#: libfaketime's fix for condition waits on the monotonic clock slows every wake-up of a
#: thread (Python's GIL hand-over, asyncio.to_thread: 0.2 ms -> 8 ms each), so a master
#: under it answered some 30 sends a second instead of 1,000; the real-time clock alone is
#: stepped here, so the fix is not needed
FAST_FAKETIME = {"FAKETIME_FORCE_MONOTONIC_FIX": "0"}


async def watch_group(client: Client, seen: list[GroupState]) -> None:
    """Record the group's master and epoch as metaledger names them, until cancelled."""
    while True:
        with contextlib.suppress(Exception):  # a slow answer is a gap, not a failure
            g = await asyncio.to_thread(group_info, client, GROUP)
            seen.append(GroupState(time.monotonic(), g.master_address, g.master_epoch))
        await asyncio.sleep(0.05)


def ackers_by_epoch(
    acked: list[tuple[bytes, str, float]], seen: list[GroupState]
) -> dict[int, set[str]]:
    """Who acknowledged in each epoch (an acknowledgement's epoch: the last one named before
    it was received)."""
    out: dict[int, set[str]] = defaultdict(set)
    for _, addr, when in acked:
        before = [g for g in seen if g.t <= when]
        if before:
            out[before[-1].epoch].add(addr)
    return out


async def scenario(reps: list[Replica], endpoints: list[str], rc: Path) -> None:
    client = Client(endpoints, timeout_s=5.0)
    producer = Producer(client, GROUP)
    seen: list[GroupState] = []
    watch: asyncio.Task[None] | None = None
    try:
        await setup_group(reps, client, GROUP)
        watch = asyncio.create_task(watch_group(client, seen))
        producer.start(reps[0].addr)
        await until(lambda: len(producer.acked) >= 100, 30, "100 acknowledged sends")
        for offset, hold_s in STEPS:
            rc.write_text(offset + "\n")
            before = len(producer.acked)
            await asyncio.sleep(hold_s)  # the step holds while the sends go on
            await until(
                lambda b=before: len(producer.acked) > b + 20,  # type: ignore[misc]
                20,
                f"sends acknowledged with the clock at {offset} s",
            )
        await producer.halt()
        watch.cancel()
        master = group_info(client, GROUP).master_address
        got = set(await pull_all(master))
        acked = {body for body, _, _ in producer.acked}
        lost = sorted(acked - got)
        assert not lost, f"{len(lost)} of {len(acked)} acknowledged messages gone: {lost[:3]}"
        problems = check_masters([], [], seen)
        two = {e: sorted(w) for e, w in ackers_by_epoch(producer.acked, seen).items() if len(w) > 1}
        assert not problems and not two, (problems, two)
        epochs = sorted({g.epoch for g in seen})
        print(f"{len(acked)} acknowledged, none lost; master epochs {epochs}; {producer.codes}")
    finally:
        if watch is not None:
            watch.cancel()
        await producer.halt()
        await producer.close()
        client.close()


@pytest.mark.parametrize("role", ["master", "slave"])
def test_a_stepped_replica_clock_loses_nothing_and_keeps_one_master(
    tmp_path: Path, role: str
) -> None:
    target = 0 if role == "master" else 1  # replica 0 starts first: the master
    rc = tmp_path / "faketime.rc"
    with contextlib.ExitStack() as stack:
        node = stack.enter_context(running_cluster(tmp_path / "ml", n=1))
        reps = []
        for i in range(3):
            r = Replica(tmp_path, node.endpoints, GROUP, i)
            if i == target:
                r.extra_env = {**faketime_env(rc), **FAST_FAKETIME}
            stack.callback(r.stop)
            reps.append(r)
        asyncio.run(asyncio.wait_for(scenario(reps, node.endpoints, rc), 120))


async def clock_rate(addr: str, real_s: float = 3.0) -> float:
    """How fast the broker's real-time clock runs, from its runtime info (whole seconds since
    its start) over ``real_s`` seconds of ours."""

    async def runtime() -> int:
        return int((await runtime_info(addr))["runtime"].split()[0])

    first = await runtime()
    t0 = time.monotonic()
    await asyncio.sleep(real_s)
    return (await runtime() - first) / (time.monotonic() - t0)


async def skewed_failover(
    reps: list[Replica], endpoints: list[str], skewed: int | None, by_s: int, rate: float = 1.0
) -> None:
    """Replica ``skewed`` (if any) has its clock ``by_s`` off and running at ``rate``."""
    client = Client(endpoints, timeout_s=5.0)
    producer = Producer(client, GROUP)
    seen: list[GroupState] = []
    watch: asyncio.Task[None] | None = None
    try:
        await setup_group(reps, client, GROUP)
        if skewed is not None:
            boot_s = int((await runtime_info(reps[skewed].addr))["bootTimestamp"]) / 1000
            assert abs(boot_s - time.time() - by_s) < 120, "the replica's clock is off as set"
        if skewed is not None and rate != 1.0:
            seen_rate = await clock_rate(reps[skewed].addr)
            assert abs(seen_rate - rate) < rate * 0.5, f"clock at x{seen_rate:.2f}, not x{rate}"
        watch = asyncio.create_task(watch_group(client, seen))
        result = await kill_round(reps, client, GROUP, producer, 200, random.Random(7))
        watch.cancel()
        problems = check_masters([], [], seen)
        two = {e: sorted(w) for e, w in ackers_by_epoch(producer.acked, seen).items() if len(w) > 1}
        assert not problems and not two, (problems, two)
        print(result.line(), f"master epochs {sorted({g.epoch for g in seen})}")
    finally:
        if watch is not None:
            watch.cancel()
        await producer.halt()
        await producer.close()
        client.close()


@pytest.mark.parametrize(("role", "offset"), [("master", "+3600"), ("slave", "-3600")])
def test_a_replica_started_an_hour_off_fails_over_and_loses_nothing(
    tmp_path: Path, role: str, offset: str
) -> None:
    target = 0 if role == "master" else 1  # replica 0 starts first: the master
    rc = tmp_path / "faketime.rc"
    with contextlib.ExitStack() as stack:
        node = stack.enter_context(running_cluster(tmp_path / "ml", n=1))
        reps = []
        for i in range(3):
            r = Replica(tmp_path, node.endpoints, GROUP, i)
            if i == target:
                r.extra_env = {**faketime_env(rc), **FAST_FAKETIME}
                rc.write_text(offset + "\n")  # from its first instant
            stack.callback(r.stop)
            reps.append(r)
        asyncio.run(
            asyncio.wait_for(skewed_failover(reps, node.endpoints, target, int(offset)), 150)
        )


@pytest.mark.parametrize(
    # each role and each direction once (all four pass; two keep the suite's time)
    ("role", "rate"),
    [("master", "x2"), ("slave", "x0.5")],
)
def test_a_replica_whose_clocks_run_fast_or_slow_fails_over_and_loses_nothing(
    tmp_path: Path, role: str, rate: str
) -> None:
    """One replica runs at ``rate`` from its start, real-time and monotonic clocks alike (its
    heartbeat, in-sync and retry timers with them), through the same failover."""
    target = 0 if role == "master" else 1
    with contextlib.ExitStack() as stack:
        node = stack.enter_context(running_cluster(tmp_path / "ml", n=1))
        reps = []
        for i in range(3):
            r = Replica(tmp_path, node.endpoints, GROUP, i)
            if i == target:
                r.extra_env = {
                    "LD_PRELOAD": str(LIBFAKETIME),
                    "FAKETIME": f"+0 {rate}",
                    "FAKETIME_DONT_FAKE_MONOTONIC": "0",
                    **FAST_FAKETIME,
                }
            stack.callback(r.stop)
            reps.append(r)
        run = skewed_failover(reps, node.endpoints, target, 0, float(rate[1:]))
        asyncio.run(asyncio.wait_for(run, 150))


@pytest.mark.parametrize(("role", "rate"), [("follower", "x2"), ("leader", "x0.5")])
def test_a_group_on_a_member_whose_clocks_run_fast_or_slow_fails_over_and_loses_nothing(
    tmp_path: Path, role: str, rate: str
) -> None:
    """The group on a 3-node metaledger whose member n0 runs at ``rate`` (monotonic clock
    included) as its leader or a follower; the replicas reach metaledger through every member.
    A leader at x2 is left out: its fast clock expires leases early (test_clocks.py)."""
    with contextlib.ExitStack() as stack:
        c = stack.enter_context(cluster_at_rate(tmp_path / "ml", role, rate, {}))
        reps = []
        for i in range(3):
            r = Replica(tmp_path, c.endpoints, GROUP, i)
            stack.callback(r.stop)
            reps.append(r)
        asyncio.run(asyncio.wait_for(skewed_failover(reps, c.endpoints, None, 0), 150))
