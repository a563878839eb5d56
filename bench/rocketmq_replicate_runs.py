"""The RocketMQ replicator's benchmark, part two: the runs with a real replicator.

Used by ``bench.rocketmq_replicate`` (which starts the clusters and measures the ceiling
first); each run has its own topic (same queue count on A and B, created up front so no
config sync is timed) and its own job, whose state lives in B's metaledger (``--endpoints``
B), and one ``metaledger replicate rocketmq`` worker (:class:`Worker`: a real process in its
own session, started and stopped by PID, default clocks: heartbeats every 10 s, commits every
1 s, with ``--listen-metrics`` so this script can watch it).

- :func:`run_replicated`: the producer writes into A paced at a share (``--offered``,
  default 1 and 0.5) of the rate the ceiling reached (the load the destination is known to
  take; a replicator as fast as a direct producer keeps up with it, a slower one falls
  behind and its stored/s at B shows by how much; the 0.5 run gives the lag at a load it
  may keep up with), while the worker replicates A -> B. Its result has the ceiling run's fields (read back
  from B: stored/s over first send -> last store, e2e lag = B's store timestamp minus the
  send time in the body).
- :func:`run_slow`: the same, with the destination broker frozen (SIGSTOP) for most of
  each second and thawed (SIGCONT) for ``--slow-duty`` of it, and the worker at
  ``--slow-in-flight``: its RSS (/proc/PID/status VmRSS) is sampled every second beside the
  backlog (the worker's ``lag_messages``: source messages not yet committed). Bounded means
  the RSS does not follow the backlog.
- :func:`run_rate`: a backlog produced into A first, then the worker with ``--rate N``;
  the achieved rate is the destination's: messages stored at B per second of store time,
  the first and last second of the span left out (:func:`steady_rate`).

Every second a progress line: messages at B so far, their rate, the backlog, the worker's
lag gauge and RSS.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "Worker",
    "behind",
    "per_second",
    "phase_rates",
    "rss_summary",
    "run_rate",
    "run_replicated",
    "run_slow",
    "steady_rate",
    "vm_rss_mib",
]

PREFIX = "metaledger_rocketmq_replicator_"


def progress(msg: str) -> None:
    print(f"[rocketmq_replicate] {msg}", file=sys.stderr, flush=True)


# ---- pure helpers ----------------------------------------------------------------------


def vm_rss_mib(status_text: str, field: str = "VmRSS") -> float | None:
    """``field`` (kB) of a /proc/PID/status text, in MiB."""
    for line in status_text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return None


def steady_rate(store_ms: list[int], trim_s: float = 1.0) -> dict[str, Any]:
    """Messages per second of store time, the first and last ``trim_s`` of the span left
    out (start-up and drain): ``count in [first + trim, last - trim) / window``."""
    if not store_ms:
        return {"steady_rate": None, "steady_window_s": 0.0, "steady_messages": 0}
    ts = sorted(store_ms)
    lo, hi = ts[0] + trim_s * 1000, ts[-1] - trim_s * 1000
    window = (hi - lo) / 1000
    if window <= 0:
        return {"steady_rate": None, "steady_window_s": 0.0, "steady_messages": 0}
    n = sum(1 for t in ts if lo <= t < hi)
    return {"steady_rate": n / window, "steady_window_s": window, "steady_messages": n}


def rss_summary(samples: list[dict[str, Any]], size: int) -> dict[str, Any]:
    """The worker's RSS against the backlog over the samples (``rss_mib``, ``backlog``):
    its first and peak RSS, the peak backlog (and its bodies in MiB), the RSS then, and
    the RSS growth first -> peak (what a backlog held in memory would push up by about the
    backlog's bytes)."""
    rows = [s for s in samples if s.get("rss_mib") is not None]
    if not rows:
        return {"rss_first_mib": None, "rss_peak_mib": None, "backlog_peak": 0}
    peak_backlog = max(rows, key=lambda s: s.get("backlog") or 0)
    backlog = int(peak_backlog.get("backlog") or 0)
    first = rows[0]["rss_mib"]
    peak = max(s["rss_mib"] for s in rows)
    return {
        "rss_first_mib": first,
        "rss_peak_mib": peak,
        "rss_growth_mib": peak - first,
        "backlog_peak": backlog,
        "backlog_peak_mib": backlog * size / 2**20,
        "rss_at_backlog_peak_mib": peak_backlog["rss_mib"],
    }


def behind(source_end: int | None, done: int | None) -> int | None:
    """The backlog of a fresh topic: messages in the source not yet at (or acknowledged
    by) the destination; None when either reading is missing."""
    if source_end is None or done is None:
        return None
    return max(0, source_end - done)


def per_second(samples: list[dict[str, Any]], key: str = "stored") -> list[float]:
    """The rate of ``key`` between consecutive samples (``t`` in seconds)."""
    out = []
    for a, b in itertools.pairwise(samples):
        dt = b["t"] - a["t"]
        if dt > 0 and a.get(key) is not None and b.get(key) is not None:
            out.append((b[key] - a[key]) / dt)
    return out


def phase_rates(samples: list[dict[str, Any]], ended_t: float | None) -> dict[str, Any]:
    """From a replicated run's timeline (``t``, ``stored``): the rate at B while the
    producer ran (first sample -> the last one before ``ended_t``) and after it (that
    sample -> the first one holding the final count: draining the backlog, the
    replicator's own pace without the producer and the source's writes beside it)."""
    rows = [s for s in samples if s.get("stored") is not None]
    out: dict[str, Any] = {"producing_per_s": None, "draining_per_s": None}
    if len(rows) < 2 or ended_t is None:
        return out
    before = [s for s in rows if s["t"] <= ended_t]
    first, mid = rows[0], before[-1] if before else rows[0]
    final = next(s for s in rows if s["stored"] == rows[-1]["stored"])
    if mid["t"] > first["t"]:
        out["producing_per_s"] = (mid["stored"] - first["stored"]) / (mid["t"] - first["t"])
    if final["t"] > mid["t"] and final["stored"] > mid["stored"]:
        out["draining_per_s"] = (final["stored"] - mid["stored"]) / (final["t"] - mid["t"])
    return out


# ---- the worker process and what is read from it ---------------------------------------


class Worker:
    """One ``metaledger replicate rocketmq`` worker of ``job`` over ``topic``, A -> B, its
    state in B's metaledger; stopped by its PID (:meth:`stop`)."""

    def __init__(self, root: Path, source: Any, dest: Any, job: str, topic: str, *extra: str):
        from tests.harness import free_ports
        from tests.integration.broker.conftest import cli_env

        self.job = job
        self.port = free_ports(1)[0]
        self.log = root / f"rmq-worker-{job}.log"
        self.argv = [
            sys.executable, "-m", "nameserver.cli", "replicate", "rocketmq",
            "--source-namesrv", source.namesrv, "--dest-namesrv", dest.namesrv,
            "--job", job, "--worker", job, "--topics", topic,
            "--endpoints", ",".join(dest.endpoints),
            "--listen-metrics", f"127.0.0.1:{self.port}", *extra,
        ]  # fmt: skip
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv, env=cli_env(root), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, n: int = 15) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def rss_mib(self, field: str = "VmRSS") -> float | None:
        try:
            return vm_rss_mib(Path(f"/proc/{self.pid}/status").read_text(), field)
        except OSError:
            return None

    def scrape(self) -> dict[str, Any]:
        """acked (user), lag_s (max), backlog (sum of lag_messages), in_flight and the
        partitions it reports; {} while the endpoint is not up."""
        from prometheus_client.parser import text_string_to_metric_families

        if self.proc.poll() is not None:
            raise RuntimeError(f"the worker exited {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as f:
                text = f.read().decode()
        except OSError:
            return {}
        out: dict[str, Any] = {"partitions": set(), "lag_s": 0.0, "backlog": 0, "in_flight": 0}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                name = s.name.removeprefix(PREFIX)
                if name == "acked_messages_total" and s.labels.get("kind") == "user":
                    out["acked"] = int(s.value)
                elif name == "lag_seconds":
                    out["partitions"].add(s.labels.get("partition"))
                    out["lag_s"] = max(out["lag_s"], s.value)
                elif name == "lag_messages":
                    out["backlog"] += int(s.value)
                elif name == "in_flight_messages":
                    out["in_flight"] += int(s.value)
        return out

    def wait_ready(self, partitions: set[str], timeout: float = 60) -> None:
        """Until the worker reports every one of ``partitions``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.scrape()
            if partitions <= m.get("partitions", set()):
                return
            time.sleep(0.2)
        raise TimeoutError(f"worker {self.job} did not take {sorted(partitions)}:\n{self.tail()}")

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def topic_end(cluster: Any, topic: str, timeout_s: float = 2.0) -> int | None:
    """The sum of the topic's queue ends (max offsets) on ``cluster``: messages stored."""
    from replicator.rocketmq.client import ClusterClient

    async def go() -> int:
        async with ClusterClient(cluster.namesrv, timeout_s=timeout_s) as c:
            return sum([await c.max_offset(q) for q in await c.read_queues(topic)])

    try:
        return asyncio.run(asyncio.wait_for(go(), timeout_s * 2))
    except Exception:
        return None


def partitions(cluster: Any, topic: str, queues: int) -> set[str]:
    return {f"{topic}/{cluster.broker_name}/{q}" for q in range(queues)}


# ---- the runs ------------------------------------------------------------------------


def watch(
    worker: Worker,
    source: Any,
    dest: Any | None,
    topic: str,
    done: Callable[[dict[str, Any]], bool],
    timeout: float,
    label: str,
    tick: Callable[[float], None] | None = None,
) -> list[dict[str, Any]]:
    """A sample a second (A's end, B's end unless ``dest`` is None, the worker's metrics
    and RSS) with a progress line, until ``done(sample)``; ``tick(t)`` is called every
    0.05 s in between (the slow run's duty cycle)."""
    samples: list[dict[str, Any]] = []
    t0 = time.monotonic()
    while True:
        t = time.monotonic() - t0
        m = worker.scrape()
        s: dict[str, Any] = {
            "t": round(t, 3),
            "source_end": topic_end(source, topic),
            "stored": topic_end(dest, topic) if dest is not None else None,
            "acked": m.get("acked"),
            "worker_backlog": m.get("backlog"),
            "in_flight": m.get("in_flight"),
            "lag_s": m.get("lag_s"),
            "rss_mib": worker.rss_mib(),
        }
        done_count = s["stored"] if dest is not None else s["acked"]
        s["backlog"] = behind(s["source_end"], done_count)
        samples.append(s)
        rates = per_second(samples[-2:], "stored" if dest is not None else "acked")
        progress(
            f"{label} t={t:.0f}s {'stored at B' if dest is not None else 'acked'} {done_count}"
            f" ({rates[-1] if rates else 0:.0f}/s) source end {s['source_end']}"
            f" backlog {s['backlog']} in flight {s['in_flight']} worker lag"
            f" {s['lag_s'] or 0:.2f} s RSS {s['rss_mib'] or 0:.1f} MiB"
        )
        if done(s):
            return samples
        if t > timeout:
            raise TimeoutError(f"{label}: not done within {timeout:.0f} s; last {s}")
        next_at = t0 + len(samples)
        while (now := time.monotonic()) < next_at:
            if tick is not None:
                tick(now - t0)
            time.sleep(min(0.05, next_at - now))


def start_producer(argv: list[str]) -> subprocess.Popen[bytes]:
    from bench.rocketmq_replicate import ROOT

    return subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=ROOT)


def producer_result(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    import json

    out = proc.stdout.read().decode() if proc.stdout else ""
    if proc.wait(60) != 0:
        raise RuntimeError(f"producer exited {proc.returncode}")
    return dict(json.loads(out))


def _both_topics(source: Any, dest: Any, name: str, queues: int) -> str:
    source.topic(name, queues=queues)
    dest.topic(name, queues=queues)
    return name


def run_replicated(
    args: Any, source: Any, dest: Any, root: Path, ceiling: dict[str, Any], share: float = 1.0
) -> dict[str, Any]:
    """The producer into A paced at ``share`` x the ceiling's stored/s, one worker A -> B."""
    from bench.redis_replicate import cpu_seconds
    from bench.rocketmq_replicate import cluster_pids, e2e_latencies, producer_argv

    tag = f"{share:g}".replace(".", "_")
    topic = _both_topics(source, dest, f"BenchRepl{tag}", args.queues)
    offered = int(share * (ceiling.get("stored_per_s") or ceiling.get("msgs_per_s") or 0))
    worker = Worker(root, source, dest, f"bench-repl-{tag}", topic)
    try:
        worker.wait_ready(partitions(source, topic, args.queues))
        progress(
            f"replicated: producer -> {source.name} paced at {offered}/s, worker -> {dest.name}"
        )
        pids = {"replicator": worker.pid, **cluster_pids([source, dest])}
        cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
        producer = start_producer(producer_argv(args, source.endpoints, topic, rate=offered))
        result: dict[str, Any] = {}

        def done(s: dict[str, Any]) -> bool:
            if producer.poll() is None:
                return False
            if not result:
                result.update(producer_result(producer), producer_ended_t=s["t"])
            return s["stored"] is not None and s["stored"] >= result["confirmed"]

        label = f"replicated {share:g}x"
        samples = watch(worker, source, dest, topic, done, args.duration + 180, label)
        cpu = {n: cpu_seconds(p) for n, p in pids.items()}
        peak_rss = worker.rss_mib("VmHWM")
    finally:
        worker.stop()
    progress(f"replicated: reading {result.get('confirmed')} messages back from {dest.name}")
    used = {n: b - a for n, a in cpu0.items() if a is not None and (b := cpu.get(n)) is not None}
    used["producer"] = result.get("process_cpu_s", 0.0)  # its own reading (it ended first)
    e2e = e2e_latencies(dest, topic)
    return {
        "name": f"replicated {share:g}x: producer -> {source.name}, worker -> {dest.name}",
        "offered_share": share,
        "offered_rate": offered,
        **result,
        **e2e,
        **phase_rates(samples, result.get("producer_ended_t")),
        "cpu_s": used,
        "cpu_us_per_msg": {n: v / e2e["stored"] * 1e6 for n, v in used.items() if e2e["stored"]},
        "worker_peak_rss_mib": peak_rss,
        "timeline": samples,
    }


def run_slow(args: Any, source: Any, dest: Any, root: Path, rate: int) -> dict[str, Any]:
    from bench.rocketmq_replicate import producer_argv

    topic = _both_topics(source, dest, "BenchSlow", args.queues)
    worker = Worker(
        root, source, dest, "bench-slow", topic, "--max-in-flight", str(args.slow_in_flight)
    )
    on_s = args.slow_duty  # of each second the destination broker runs
    state = {"paused": False}

    def tick(t: float) -> None:
        pause = (t % 1.0) >= on_s
        if pause and not state["paused"]:
            dest.pause_broker()
        elif not pause and state["paused"]:
            dest.resume_broker()
        state["paused"] = pause

    try:
        worker.wait_ready(partitions(source, topic, args.queues))
        progress(
            f"slow: producer -> {source.name} at {rate}/s; {dest.name}'s broker runs {on_s:.0%}"
            f" of each second (SIGSTOP/SIGCONT), worker --max-in-flight {args.slow_in_flight}"
        )
        producer = start_producer(producer_argv(args, source.endpoints, topic, rate=rate))
        result: dict[str, Any] = {}

        def done(s: dict[str, Any]) -> bool:
            if producer.poll() is None:
                return False
            if not result:
                result.update(producer_result(producer))
            return True

        try:
            samples = watch(worker, source, None, topic, done, args.duration + 120, "slow", tick)
        finally:
            dest.resume_broker()
        peak_hwm = worker.rss_mib("VmHWM")
        progress("slow: destination thawed; draining the backlog")
        drain = watch(
            worker, source, None, topic,
            lambda s: s["acked"] is not None and s["acked"] >= result["confirmed"],
            300, "slow drain",
        )  # fmt: skip
    finally:
        dest.resume_broker()
        worker.stop()
    return {
        "name": f"slow destination ({on_s:.0%} duty), --max-in-flight {args.slow_in_flight}",
        "offered_rate": rate,
        "duty": on_s,
        "max_in_flight": args.slow_in_flight,
        "producer": result,
        **rss_summary(samples, args.size),
        "vm_hwm_mib": peak_hwm,
        "drain_s": drain[-1]["t"],
        "acked_after_drain": drain[-1]["acked"],
        "timeline": samples,
        "drain_timeline": drain,
    }


def run_drain(
    args: Any, source: Any, dest: Any, root: Path, ceiling: dict[str, Any]
) -> dict[str, Any]:
    """The replicator's own throughput: as many messages as the ceiling stored, produced
    into A first (no worker running), then one worker drains them into B. The rate is B's
    store-time rate over the steady window (first and last second left out), so the two
    sides of the ratio are the destination's view, and no producer shares the CPUs."""
    from bench.redis_replicate import cpu_seconds
    from bench.rocketmq_replicate import cluster_pids, producer_argv

    topic = _both_topics(source, dest, "BenchDrain", args.queues)
    backlog = int(ceiling.get("stored") or ceiling.get("confirmed") or 100_000)
    progress(f"drain: a backlog of {backlog} messages into {source.name}")
    argv = [*producer_argv(args, source.endpoints, topic), "--count", str(backlog)]
    argv[argv.index("--duration") + 1] = str(max(args.duration, 600.0))
    produced = producer_result(start_producer(argv))
    progress(f"drain: {produced['confirmed']} in {source.name}; one worker drains them")
    worker = Worker(root, source, dest, "bench-drain", topic)
    try:
        pids = {"replicator": worker.pid, **cluster_pids([source, dest])}
        cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
        samples = watch(
            worker, source, dest, topic,
            lambda s: s["stored"] is not None and s["stored"] >= produced["confirmed"],
            args.duration * 4 + 120, "drain",
        )  # fmt: skip
        cpu = {n: cpu_seconds(p) for n, p in pids.items()}
        peak_rss = worker.rss_mib("VmHWM")
    finally:
        worker.stop()
    stamps: list[int] = []
    dest.scan(topic, lambda m: stamps.append(m.store_timestamp))
    steady = steady_rate(stamps)
    used = {n: b - a for n, a in cpu0.items() if a is not None and (b := cpu.get(n)) is not None}
    ceiling_rate = ceiling.get("stored_per_s") or ceiling.get("msgs_per_s")
    return {
        "name": f"drain: a backlog of {produced['confirmed']} in {source.name}, worker -> {dest.name}",
        "backlog": produced["confirmed"],
        "stored": len(stamps),
        **steady,
        "share": steady["steady_rate"] / ceiling_rate
        if steady["steady_rate"] and ceiling_rate
        else None,
        "cpu_s": used,
        "cpu_us_per_msg": {n: v / len(stamps) * 1e6 for n, v in used.items() if stamps},
        "worker_peak_rss_mib": peak_rss,
        "timeline": samples,
    }


def run_rate(args: Any, source: Any, dest: Any, root: Path) -> dict[str, Any]:
    from bench.rocketmq_replicate import producer_argv

    topic = _both_topics(source, dest, "BenchRate", args.queues)
    n = args.limit_rate
    backlog = int(n * (args.duration + 4))
    progress(f"rate: a backlog of {backlog} messages into {source.name}")
    argv = [*producer_argv(args, source.endpoints, topic), "--count", str(backlog)]
    argv[argv.index("--duration") + 1] = str(max(args.duration, 600.0))
    producer = start_producer(argv)
    produced = producer_result(producer)
    progress(f"rate: {produced['confirmed']} in {source.name}; worker --rate {n}")
    worker = Worker(root, source, dest, "bench-rate", topic, "--rate", str(n))
    try:
        samples = watch(
            worker, source, dest, topic,
            lambda s: s["stored"] is not None and s["stored"] >= produced["confirmed"],
            produced["confirmed"] / n + 120, "rate",
        )  # fmt: skip
    finally:
        worker.stop()
    stamps: list[int] = []
    dest.scan(topic, lambda m: stamps.append(m.store_timestamp))
    steady = steady_rate(stamps)
    achieved = steady["steady_rate"]
    return {
        "name": f"--rate {n} over a backlog of {produced['confirmed']}",
        "limit": n,
        "backlog": produced["confirmed"],
        "stored": len(stamps),
        **steady,
        "error": (achieved - n) / n if achieved else None,
        "timeline": samples,
    }
