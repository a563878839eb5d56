"""The Redis replicator end to end: lag under a write load, and full-sync time against a raw
transfer of the same RDB.

    python -m bench.redis_replicate [--rate 20000] [--duration 20] [--load paced|redis-benchmark]
                                    [--size-mb 200] [--value-bytes 512] [--parts load,sync]
                                    [--queues 4] [--baseline-tree DIR] [--rounds N]
                                    [--note TEXT]
                                    [--out-dir DIR]

Issue 18's performance section: "Under redis-benchmark SET load: events/s delivered and
end-to-end lag p50/p99 (write on the master → message acknowledged by the broker). Goal: lag
under 1 s at 20k writes/s", and "Full sync time of a 1 GB dataset against the raw transfer
time of the same RDB".

Everything is started here on free 127.0.0.1 ports and stopped by PID: one metaledger node and
one broker (``bench.broker_group``, mode ``single``), redis-server 7.0.15
(``tests.redis_harness``) and ``metaledger replicate redis --listen-metrics`` (its
Prometheus endpoint is how this script watches it).

``load``: ``--load paced`` (default) is a writer process of its own that sends ``SET`` s in
pipelines every 10 ms, ``--rate`` writes/s for ``--duration`` s, each value the write's
send time (``time.time_ns()``). After the run every message is read back from the broker
(PULL): the end-to-end lag of a write is the broker's store timestamp (ms, the time it
stored the message, which for one replica is when it acknowledges it) minus the send time.
``redis-benchmark`` is redis-benchmark -t set -r 1000000 at full speed (it has no rate
limit; ``-n`` = rate x duration), whose values carry no time: its lag is the replicator's own
``lag_seconds`` gauge sampled every 0.25 s (age of the oldest unconfirmed batch).
Delivered events/s: messages the broker confirmed, over the time from the first write to the
last confirmation.

``sync``: a redis-server filled with random ``--value-bytes`` strings up to ``--size-mb`` of
values; raw transfer: ``redis-cli --rdb`` (a replica connection that only stores the
payload) on the same server; then a new job does its full sync, timed from the worker's start
to the last confirmation of the snapshot (its checkpoint stored), with the RDB phase (first
to last RDB byte parsed) beside it and the worker's peak RSS.
Also the CPU per MB of RDB of the worker (whole, and from its first RDB byte: the sync
without the start-up) and of the broker. ``--baseline-tree DIR``: the same full sync by
another checkout's replicator first (a job of its own, the same source and broker), for a
before/after in one run. ``--rounds N``: N rounds of a raw transfer and the syncs (the trees'
order reversed each round), reported each and as medians; the ratio is the median of each
round's sync over that round's raw transfer, since this host's speed drifts by 15-20 %
between runs minutes apart.

Results: ``bench/results/redis_replicate-<date>.json`` and ``.md`` (bench.report), and a
``.png`` (lag and delivered rate over time) when matplotlib is there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.broker_group import GROUP, MODES, BrokerGroup  # noqa: E402
from bench.report import RESULTS_DIR, fmt, machine, result_stem, timestamp, write_report  # noqa: E402

QUEUES = 4


def progress(msg: str) -> None:
    print(f"[redis_replicate] {msg}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---- the paced writer (its own process: --writer) -------------------------------------


def writer(port: int, rate: int, duration: float, prefix: str) -> dict[str, Any]:
    import redis

    r = redis.Redis(port=port)
    tick = 0.01
    per_tick = max(1, round(rate * tick))
    sent = 0
    behind = 0
    t0 = time.monotonic()
    n_ticks = int(duration / tick)
    for i in range(n_ticks):
        due = t0 + i * tick
        now = time.monotonic()
        if now < due:
            time.sleep(due - now)
        elif now - due > tick:
            behind += 1
        pipe = r.pipeline(transaction=False)
        stamp = b"%d" % time.time_ns()
        for _ in range(per_tick):
            pipe.set(f"{prefix}:{sent}", stamp)
            sent += 1
        pipe.execute()
    seconds = time.monotonic() - t0
    return {"writes": sent, "seconds": seconds, "rate": sent / seconds, "late_ticks": behind}


# ---- the replicator process ----------------------------------------------------------


class Worker:
    """``metaledger replicate redis`` with ``--listen-metrics``; stopped by its PID."""

    def __init__(
        self,
        root: Path,
        endpoints: str,
        source_port: int,
        topic: str,
        job: str,
        tree: Path | None = None,
    ):
        from tests.harness import free_ports
        from tests.integration.broker.conftest import cli_env

        self.port = free_ports(1)[0]
        self.job = job
        self.log = root / f"replicator-{job}.log"
        argv = [
            sys.executable, "-m", "nameserver.cli", "replicate", "redis",
            "--source", f"redis://127.0.0.1:{source_port}", "--topic", topic, "--job", job,
            "--endpoints", endpoints, "--listen-metrics", f"127.0.0.1:{self.port}",
        ]  # fmt: skip
        self.started = time.monotonic()
        env = cli_env(root)
        if tree is not None:  # another checkout's code (--baseline-tree) first on the path
            env["PYTHONPATH"] = os.pathsep.join([str(tree), env["PYTHONPATH"]])
        with open(self.log, "ab") as out:
            # run in the tree: ``python -m`` puts the working directory first on sys.path,
            # before PYTHONPATH (from this checkout's root, a baseline ran this checkout)
            self.proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, cwd=tree or root,
            )  # fmt: skip

    def scrape(self) -> dict[str, float]:
        from prometheus_client.parser import text_string_to_metric_families

        if self.proc.poll() is not None:
            raise RuntimeError(f"the replicator exited {self.proc.returncode}: {self.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as f:
                text = f.read().decode()
        except OSError:
            return {}
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.startswith("metaledger_redis_") and s.labels.get("job") == self.job:
                    out[s.name.removeprefix("metaledger_redis_")] = s.value
        return out

    def peak_rss_mib(self) -> float | None:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return None

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def wait_metrics(w: Worker, cond: Any, timeout: float, what: str) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = w.scrape()
        if m and cond(m):
            return m
        time.sleep(0.1)
    raise TimeoutError(f"{what} within {timeout} s; last {w.scrape()}\n{w.tail()}")


def idle(m: dict[str, float]) -> bool:
    return (
        m.get("active") == 1
        and m.get("full_sync_in_progress") == 0
        and m.get("checkpoint_offset") is not None
        and m.get("messages_sent_total") == m.get("messages_confirmed_total")
    )


# ---- part 1: load --------------------------------------------------------------------


def run_load(args: argparse.Namespace, group: BrokerGroup, tmp: Path) -> dict[str, Any]:
    from nameserver.client import Client, QueueData
    from tests.redis_harness import RedisServer

    topic = "RedisLag"
    with Client([group.endpoints], timeout_s=10) as admin:
        admin.route_topic_create(topic, [QueueData(GROUP, args.queues, args.queues, 6)])
    fast = {"repl-diskless-sync-delay": "0", "save": ""}
    with RedisServer(tmp, fast, name="load-source") as source:
        w = Worker(tmp, group.endpoints, source.port, topic, "lag")
        try:
            wait_metrics(w, idle, 60, "the replicator active and synced")
            base = w.scrape()
            total = int(args.rate * args.duration)
            samples: list[dict[str, float]] = []
            t0, wall0 = time.monotonic(), time.time()
            if args.load == "paced":
                cmd = [sys.executable, "-m", "bench.redis_replicate", "--writer", str(source.port),
                       "--rate", str(args.rate), "--duration", str(args.duration)]  # fmt: skip
            else:
                cmd = ["redis-benchmark", "-p", str(source.port), "-t", "set", "-n", str(total),
                       "-c", "50", "-r", "1000000", "-q", "--csv"]  # fmt: skip
            progress(f"load: {' '.join(cmd[:6])} ...")
            load = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=ROOT)
            pids = {"replicator": w.proc.pid, "load generator": load.pid}
            pids |= {f"broker {n}": p.pid for n, p in group.procs.items() if n != "meta"}
            if source.proc is not None:
                pids["redis-server"] = source.proc.pid
            cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
            cpu1 = dict(cpu0)
            while load.poll() is None or not drained(source, samples):
                m = w.scrape()
                m["t"] = time.monotonic() - t0
                samples.append(m)
                for name, pid in pids.items():  # the last reading while each one lives
                    cpu1[name] = cpu_seconds(pid) or cpu1[name]
                if len(samples) % 8 == 0:
                    progress(
                        f"t={m['t']:.0f}s confirmed {m.get('messages_confirmed_total', 0) - base.get('messages_confirmed_total', 0):.0f}"
                        f" lag {m.get('lag_seconds', 0):.2f} s / {m.get('lag_bytes', 0):.0f} B"
                        f" spooled {m.get('spooled_bytes', 0):.0f} B"
                    )
                if time.monotonic() - t0 > args.duration + 600:
                    raise TimeoutError("the replicator did not catch up within 10 minutes")
                time.sleep(0.25)
            out = load.stdout.read().decode() if load.stdout else ""
            end = w.scrape()
            peak = w.peak_rss_mib()
        finally:
            w.stop()
        achieved = writes_rate(args.load, out)
        used = {n: b - a for n, a in cpu0.items() if a is not None and (b := cpu1[n]) is not None}
        delivered = end["messages_confirmed_total"] - base["messages_confirmed_total"]
        last_change = last_confirmation_time(samples)
        result: dict[str, Any] = {
            "load": args.load,
            "target_rate": args.rate,
            "duration_s": args.duration,
            "writer": achieved,
            "messages_delivered": delivered,
            "delivered_per_s": delivered / last_change if last_change else None,
            "catch_up_s": max(0.0, last_change - achieved["seconds"]) if last_change else None,
            "replicator_peak_rss_mib": peak,
            "gauge_lag_s_p50": percentile([s.get("lag_seconds", 0) for s in samples], 0.5),
            "gauge_lag_s_p99": percentile([s.get("lag_seconds", 0) for s in samples], 0.99),
            "gauge_lag_s_max": max((s.get("lag_seconds", 0) for s in samples), default=None),
            "max_spooled_bytes": max((s.get("spooled_bytes", 0) for s in samples), default=0),
            # CPU seconds of each process from the load's start to the last confirmation,
            # and µs of it per write (the shared machine decides how much each one gets)
            "cpu_s": used,
            "cpu_us_per_write": {n: v / total * 1e6 for n, v in used.items()},
            "timeline": [
                {k: s.get(k) for k in ("t", "lag_seconds", "lag_bytes", "messages_confirmed_total")}
                for s in samples
            ],
        }
        if args.load == "paced":
            progress("reading the topic back from the broker for end-to-end lags")
            result |= e2e_lags(group.master_address, topic, args.queues, wall0)
    return result


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of a live process (``/proc/PID/stat``), None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drained(source: Any, samples: list[dict[str, float]]) -> bool:
    if not samples:
        return False
    m = samples[-1]
    offset = source.client().info("replication")["master_repl_offset"]
    return bool(
        m.get("confirmed_offset") == offset
        and m.get("messages_sent_total") == m.get("messages_confirmed_total")
    )


def last_confirmation_time(samples: list[dict[str, float]]) -> float | None:
    final = samples[-1].get("messages_confirmed_total") if samples else None
    for s in samples:
        if s.get("messages_confirmed_total") == final:
            return s["t"]
    return None


def writes_rate(load: str, out: str) -> dict[str, Any]:
    if load == "paced":
        return dict(json.loads(out))
    # --csv: "test","rps",...: "SET","84602.31",...
    match = re.search(r'"SET","([0-9.]+)"', out)
    rps = float(match.group(1)) if match else None
    return {"rate": rps, "seconds": None, "raw": out.strip()}


def e2e_lags(addr: str, topic: str, queues: int, wall0: float) -> dict[str, Any]:
    """Every SET of the topic: store timestamp minus the send time in its value; per second
    of the load (``wall0``: its start, wall clock) too."""
    from tests.integration.replicator.broker_env import pull_all

    lags: list[float] = []
    per_second: dict[int, list[float]] = {}
    for q in range(queues):
        for m in pull_all(addr, topic, q):
            if m.properties.get("TAGS") != "SET":
                continue
            sent_ns = int(m.body.rsplit(b"\r\n", 2)[-2])
            lag = m.store_timestamp / 1e3 - sent_ns / 1e9
            lags.append(lag)
            per_second.setdefault(int(sent_ns / 1e9 - wall0), []).append(lag)
    return {
        "e2e_messages": len(lags),
        "e2e_lag_s_p50": percentile(lags, 0.5),
        "e2e_lag_s_p99": percentile(lags, 0.99),
        "e2e_lag_s_max": max(lags, default=None),
        "e2e_per_second": [
            {"t": s + 0.5, "n": len(v), "p50": percentile(v, 0.5), "p99": percentile(v, 0.99)}
            for s, v in sorted(per_second.items())
        ],
    }


# ---- part 2: full sync ---------------------------------------------------------------


def fill(r: Any, size_mb: int, value_bytes: int) -> int:
    import os

    keys = size_mb * 1_000_000 // value_bytes
    batch = 2000
    for start in range(0, keys, batch):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(keys, start + batch)):
            pipe.set(b"sync:%d" % i, os.urandom(value_bytes))
        pipe.execute()
        if start // batch % 50 == 0:
            progress(f"filled {min(keys, start + batch)}/{keys} keys")
    return keys


def run_sync(args: argparse.Namespace, group: BrokerGroup, tmp: Path) -> dict[str, Any]:
    from nameserver.client import Client, QueueData
    from tests.redis_harness import RedisServer

    topic = "RedisSync"
    with Client([group.endpoints], timeout_s=10) as admin:
        admin.route_topic_create(topic, [QueueData(GROUP, args.queues, args.queues, 6)])
    fast = {"repl-diskless-sync-delay": "0", "save": ""}
    with RedisServer(tmp, fast, name="sync-source") as source:
        keys = fill(source.client(socket_timeout=600), args.size_mb, args.value_bytes)
        rounds: list[dict[str, Any]] = []
        trees: list[tuple[str, Path | None]] = [("this tree", None)]
        if args.baseline_tree:
            trees.insert(0, ("baseline", args.baseline_tree))
        for r in range(args.rounds):
            if r:
                # the syncs before left ~1.2 GB of dirty pages each: written out now, so that
                # no round pays for the last one's writeback (the kernel throttles writers
                # past vm.dirty_ratio)
                progress("os.sync() between rounds")
                os.sync()
            raw_s, rdb_bytes = raw_transfer(source.port, tmp)
            progress(
                f"round {r + 1}/{args.rounds}: raw {rdb_bytes / 1e6:.1f} MB in {raw_s:.2f} s;"
                " the replicator's full sync"
            )
            runs: dict[str, dict[str, Any]] = {}
            for i, (name, tree) in enumerate(trees if r % 2 == 0 else trees[::-1]):
                progress(f"full sync by the {name}'s replicator")
                run = one_sync(group, tmp, source.port, topic, f"sync{r}-{i}", tree, rdb_bytes)
                runs[name] = run | {"ratio_to_raw": run["full_sync_s"] / raw_s}
            rounds.append({"raw_transfer_s": raw_s, "runs": runs})
    out = {
        "keys": keys,
        "value_bytes": args.value_bytes,
        "rdb_bytes": rdb_bytes,
        **summarize(rounds, "this tree", rdb_bytes),
        "rounds": len(rounds),
    }
    if len(rounds) > 1:
        out["each_round"] = rounds
    if args.baseline_tree:
        baseline = summarize(rounds, "baseline", rdb_bytes)
        out["baseline"] = baseline | {"tree": str(args.baseline_tree)}
    return out


def raw_transfer(port: int, tmp: Path) -> tuple[float, int]:
    """``redis-cli --rdb`` from ``port``: its seconds and the RDB's bytes."""
    rdb = tmp / "raw.rdb"
    progress("raw transfer: redis-cli --rdb")
    t = time.monotonic()
    subprocess.run(
        [shutil.which("redis-cli") or "redis-cli", "-p", str(port), "--rdb", str(rdb)],
        check=True, capture_output=True, timeout=1800,
    )  # fmt: skip
    raw_s = time.monotonic() - t
    rdb_bytes = rdb.stat().st_size
    rdb.unlink()
    return raw_s, rdb_bytes


def summarize(rounds: list[dict[str, Any]], name: str, rdb_bytes: int) -> dict[str, Any]:
    """One tree's full syncs over the rounds: each number the median of its rounds (one
    round: that round's), the ratio the median of each round's sync over that round's raw
    transfer (a host whose speed drifts between rounds moves both halves of a ratio alike)."""
    runs = [r["runs"][name] for r in rounds]
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [run[key] for run in runs]
        numeric = all(isinstance(v, int | float) for v in values)
        out[key] = statistics.median(values) if numeric else values[0]
    raw_s = statistics.median(r["raw_transfer_s"] for r in rounds)
    out["raw_transfer_s"] = raw_s
    out["raw_mb_per_s"] = rdb_bytes / 1e6 / raw_s
    return out


def one_sync(
    group: BrokerGroup,
    tmp: Path,
    port: int,
    topic: str,
    job: str,
    tree: Path | None,
    rdb_bytes: int,
) -> dict[str, Any]:
    """One job's full sync from ``port``: its time, and the worker's and broker's CPU."""
    broker_pids = group.pids
    broker0 = sum(cpu_seconds(p) or 0.0 for p in broker_pids)
    w = Worker(tmp, group.endpoints, port, topic, job, tree)
    try:
        first_rdb = rdb_done = None
        cpu_at_first_rdb: float | None = None
        confirmed_at: tuple[float, float] | None = None  # (value, since)
        deadline = time.monotonic() + 3600
        shown = 0.0
        while True:
            m = w.scrape()
            now = time.monotonic() - w.started
            if first_rdb is None and m.get("rdb_bytes", 0) > 0:
                first_rdb = now
                cpu_at_first_rdb = cpu_seconds(w.proc.pid)
            if first_rdb is not None and rdb_done is None and not m.get("full_sync_in_progress"):
                rdb_done = now
            c = m.get("messages_confirmed_total")
            if c is not None and (confirmed_at is None or c != confirmed_at[0]):
                confirmed_at = (c, now)
            if rdb_done is not None and idle(m):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"full sync not done in an hour: {m}")
            if now - shown >= 5:
                shown = now
                progress(f"t={now:.0f}s rdb {m.get('rdb_bytes', 0) / 1e6:.0f} MB, confirmed {c}")
            time.sleep(0.1)
        assert confirmed_at is not None
        peak = w.peak_rss_mib()
        worker_cpu = cpu_seconds(w.proc.pid)
        broker_cpu = sum(cpu_seconds(p) or 0.0 for p in broker_pids) - broker0
        total_s = confirmed_at[1]
    finally:
        w.stop()
    mb = rdb_bytes / 1e6
    return {
        "full_sync_s": total_s,
        "full_sync_mb_per_s": mb / total_s,
        "rdb_phase_s": (rdb_done - first_rdb) if rdb_done and first_rdb else None,
        "worker_start_to_first_rdb_byte_s": first_rdb,
        "messages": m.get("messages_confirmed_total"),
        "replicator_peak_rss_mib": peak,
        "worker_cpu_s": worker_cpu,
        "worker_cpu_s_per_mb": worker_cpu / mb if worker_cpu is not None else None,
        # from the first RDB byte on: the sync's own CPU, without the worker's start-up
        "worker_sync_cpu_s_per_mb": (worker_cpu - cpu_at_first_rdb) / mb
        if worker_cpu is not None and cpu_at_first_rdb is not None
        else None,
        "broker_cpu_s_per_mb": broker_cpu / mb,
    }


# ---- report --------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    lines = [f"# Redis replicator end to end ({report['date']})", ""]
    m = report["machine"]
    lines.append(
        f"Machine: {m['nproc']} CPUs, {m['cpu_model']}, Python {m['python']}; one metaledger"
        f" node, one broker (one replica), redis-server 7.0.15, `metaledger replicate redis`,"
        f" {report['args']['queues']} queues, all on this machine."
    )
    if report.get("note"):
        lines.append(f"Note: {report['note']}")
    load = report.get("load")
    if load:
        wr = load["writer"]
        lines += [
            "",
            f"## Under load ({load['load']}: target {load['target_rate']} writes/s for"
            f" {load['duration_s']} s)",
            "",
            "| writes/s achieved | delivered msgs | delivered/s | catch-up after the load s"
            " | e2e lag p50 s | e2e lag p99 s | e2e lag max s | gauge lag p50 / p99 / max s"
            " | max spooled MB | replicator peak RSS MiB |",
            "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
            f"| {fmt(wr.get('rate'), '.0f')} | {load['messages_delivered']:.0f}"
            f" | {fmt(load['delivered_per_s'], '.0f')} | {fmt(load['catch_up_s'], '.1f')}"
            f" | {fmt(load.get('e2e_lag_s_p50'), '.3f')} | {fmt(load.get('e2e_lag_s_p99'), '.3f')}"
            f" | {fmt(load.get('e2e_lag_s_max'), '.3f')}"
            f" | {fmt(load['gauge_lag_s_p50'], '.2f')} / {fmt(load['gauge_lag_s_p99'], '.2f')}"
            f" / {fmt(load['gauge_lag_s_max'], '.2f')} | {load['max_spooled_bytes'] / 1e6:.1f}"
            f" | {fmt(load['replicator_peak_rss_mib'], '.0f')} |",
            "",
            "e2e lag: the broker's store timestamp (ms) minus the write's send time carried in"
            " its value; gauge lag: the worker's `lag_seconds` (oldest unconfirmed batch)"
            " sampled every 0.25 s, refreshed by the worker once a second. The gauge starts"
            " when the worker has read a write: writes still in the master's replica output"
            " buffer or the socket are not in it, so a worker that reads late (CPU-bound) shows"
            " a small gauge while the e2e lag grows. Goal (issue 18): under 1 s at 20k writes/s.",
        ]
        per_write = load.get("cpu_us_per_write")
        if per_write:
            lines += [
                "",
                "CPU per write (µs; each process's user + system CPU from the load's start to"
                " the last confirmation, over the writes): "
                + ", ".join(f"{n} {v:.1f}" for n, v in sorted(per_write.items()))
                + " (the metaledger node, ~2% of a core, not counted).",
            ]
    sync = report.get("sync")
    if sync:
        lines += [
            "",
            f"## Full sync ({sync['keys']} keys of {sync['value_bytes']} random bytes,"
            f" RDB {sync['rdb_bytes'] / 1e6:.1f} MB)",
            "",
            "| | seconds | MB/s |",
            "|---|---:|---:|",
            f"| raw transfer (`redis-cli --rdb`) | {sync['raw_transfer_s']:.2f}"
            f" | {sync['raw_mb_per_s']:.1f} |",
            f"| replicator: worker start → snapshot confirmed | {sync['full_sync_s']:.2f}"
            f" | {sync['full_sync_mb_per_s']:.1f} |",
            f"| of which the RDB phase (first → last byte parsed) | {fmt(sync['rdb_phase_s'], '.2f')}"
            f" | |",
            "",
            f"Ratio full sync / raw transfer: **{sync['ratio_to_raw']:.1f}x**;"
            f" {sync['messages']:.0f} messages; worker peak RSS"
            f" {fmt(sync['replicator_peak_rss_mib'], '.0f')} MiB; CPU s per MB of RDB:"
            f" worker {fmt(sync['worker_cpu_s_per_mb'], '.3f')}"
            f" ({fmt(sync['worker_sync_cpu_s_per_mb'], '.3f')} from the first RDB byte),"
            f" broker {fmt(sync['broker_cpu_s_per_mb'], '.3f')}.",
        ]
        each = sync.get("each_round")
        if each:
            names = list(each[0]["runs"])
            lines += [
                "",
                f"Medians of {len(each)} rounds above (the ratio: the median of each round's"
                " sync over that round's raw transfer). Each round:",
                "",
                "| round | raw transfer s | "
                + " | ".join(f"{n}: sync s (ratio)" for n in names)
                + " |",
                "|---:|---:|" + "---:|" * len(names),
            ]
            for i, r in enumerate(each, 1):
                cells = [
                    f"{r['runs'][n]['full_sync_s']:.2f} ({r['runs'][n]['ratio_to_raw']:.2f}x)"
                    for n in names
                ]
                lines.append(f"| {i} | {r['raw_transfer_s']:.2f} | " + " | ".join(cells) + " |")
        base = sync.get("baseline")
        if base:
            lines += [
                "",
                f"Baseline tree {base['tree']}, same source, same run: "
                f"{base['full_sync_s']:.2f} s, {base['full_sync_mb_per_s']:.1f} MB/s,"
                f" **{base['ratio_to_raw']:.1f}x** the raw transfer; CPU s per MB: worker"
                f" {fmt(base['worker_cpu_s_per_mb'], '.3f')}"
                f" ({fmt(base['worker_sync_cpu_s_per_mb'], '.3f')} from the first RDB byte),"
                f" broker {fmt(base['broker_cpu_s_per_mb'], '.3f')}.",
            ]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> Path | None:
    load = report.get("load")
    if not load:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    tl = load["timeline"]
    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ts = [s["t"] for s in tl]
    conf = [s["messages_confirmed_total"] or 0 for s in tl]
    rate = [0.0] + [
        (conf[i] - conf[i - 1]) / max(ts[i] - ts[i - 1], 1e-9) for i in range(1, len(tl))
    ]
    a.plot(ts, rate, label="delivered msgs/s")
    a.axhline(load["target_rate"], color="gray", linestyle="--", label="target writes/s")
    a.set_ylabel("messages/s")
    a.legend()
    b.plot(ts, [s["lag_seconds"] or 0 for s in tl], label="gauge lag_seconds")
    per = load.get("e2e_per_second") or []
    if per:
        b.plot(
            [p["t"] for p in per], [p["p99"] for p in per], label="e2e lag p99 (per write second)"
        )
        b.plot([p["t"] for p in per], [p["p50"] for p in per], label="e2e lag p50")
    b.set_ylabel("seconds")
    b.set_xlabel("seconds since the load started")
    b.legend()
    fig.suptitle(f"Redis replicator under {load['load']} load ({report['date']})")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rate", type=int, default=20_000, help="writes/s (paced) ")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--load", choices=("paced", "redis-benchmark"), default="paced")
    ap.add_argument("--size-mb", type=int, default=200, help="values in the full-sync dataset")
    ap.add_argument("--value-bytes", type=int, default=512)
    ap.add_argument("--parts", default="load,sync")
    ap.add_argument("--queues", type=int, default=QUEUES)
    ap.add_argument(
        "--baseline-tree",
        type=Path,
        help="sync: also run the full sync with this checkout's replicator first (same source)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="sync: this many raw transfers and full syncs in turn (with --baseline-tree, each"
        " round's order reversed from the last); the report gives each and their medians",
    )
    ap.add_argument("--note", default="")
    ap.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--writer", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.writer:
        print(json.dumps(writer(args.writer, args.rate, args.duration, "lag")))
        return 0
    if not 1 <= args.size_mb <= 1024:
        ap.error("--size-mb: 1 to 1024")
    if args.rounds < 1:
        ap.error("--rounds: at least 1")
    parts = {p for p in args.parts.split(",") if p}
    report: dict[str, Any] = {
        "date": timestamp(),
        "machine": machine(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "note": args.note,
    }
    group = BrokerGroup(MODES["single"], queues=args.queues)
    progress(f"starting one metaledger node and one broker in {group.root}")
    group.start()
    try:
        with tempfile.TemporaryDirectory(prefix="redis_replicate-") as tmp:
            if "load" in parts:
                report["load"] = run_load(args, group, Path(tmp))
            if "sync" in parts:
                report["sync"] = run_sync(args, group, Path(tmp))
    finally:
        group.stop()
    import os

    report["load_average"] = os.getloadavg()
    md = render(report) + (
        f"\nLoad average at the end: {', '.join(f'{x:.2f}' for x in report['load_average'])}."
    )
    png = plot(
        report, result_stem("redis_replicate", report["date"], args.out_dir).with_suffix(".png")
    )
    if png:
        md += f"\n\n![lag and delivered rate]({png.name})"
    print(md)
    json_path, md_path = write_report("redis_replicate", report, md, args.out_dir)
    progress(f"wrote {json_path} and {md_path}" + (f" and {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
