"""RDB parse speed and memory: our streaming parser against ``redis-check-rdb`` on one file.

    python -m bench.rdb_parse [--keys 1000000] [--rdb FILE] [--chunk 65536] [--out-dir DIR]

Issue 18's performance section: "RDB parse MB/s and peak RSS against redis-check-rdb (the C
checker that ships with redis-server) on the same file (1M keys of mixed types, about 100
MB): goal within 10x of its time". Without ``--rdb`` a redis-server 7.0.15 (tests.redis_harness,
free port, stopped by PID) is filled by server-side Lua, ``--keys`` keys of mixed types:
strings (int, short, 100-byte compressible = LZF), small lists (quicklist 2), hashes and
zsets as listpacks and (one value over 64 bytes) as hashtables/skiplists, intsets and hashtable sets, and streams with
a consumer group; then SAVE. Each parser runs as its own subprocess reading the file; wall
time and peak RSS (``ru_maxrss`` of ``os.wait4``) are the child's. Ours reads the file in
``--chunk`` pieces and checks the CRC64, as a full sync would. Writes
``bench/results/rdb_parse-<date>.json`` and ``.md`` through bench.report.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import RESULTS_DIR, fmt, machine, timestamp, write_report  # noqa: E402

TIME = "/usr/bin/time"  # GNU time (Debian package ``time``)

FILL = """
local start, n = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = start, start + n - 1 do
  local k = 'key:' .. i
  local m = i % 20
  if m < 5 then redis.call('SET', k, 'value-' .. string.rep(string.char(97 + i % 26), 90) .. i)
  elseif m < 7 then redis.call('SET', k, i * 7919)
  elseif m < 8 then redis.call('SET', k, 'v' .. i .. ':' .. math.random(1, 1000000000))
  elseif m < 11 then
    for j = 1, 8 do redis.call('RPUSH', k, 'item-' .. j .. '-' .. i) end
  elseif m < 13 then
    for j = 1, 6 do redis.call('HSET', k, 'field' .. j, 'val' .. (i + j)) end
  elseif m < 14 then
    for j = 1, 30 do redis.call('HSET', k, 'f' .. j, i + j) end
    redis.call('HSET', k, 'long', string.rep('L', 80) .. i)
  elseif m < 16 then
    for j = 1, 8 do redis.call('ZADD', k, (i % 97) + j / 3, 'member' .. j) end
  elseif m < 17 then
    for j = 1, 12 do redis.call('SADD', k, i + j * 1000) end
  elseif m < 18 then
    for j = 1, 10 do redis.call('SADD', k, 'm' .. j .. ':' .. i) end
  elseif m < 19 then
    for j = 1, 30 do redis.call('ZADD', k, j * 1.5, 'z' .. j) end
    redis.call('ZADD', k, i / 7, string.rep('Z', 70) .. i)
  else
    if i % 100 == 19 then
      for j = 1, 20 do redis.call('XADD', k, '*', 'n', j, 'payload', 'p' .. i) end
      redis.call('XGROUP', 'CREATE', k, 'g', '0')
    else
      for j = 1, 5 do redis.call('RPUSH', k, j) end
    end
  end
end
return n
"""


def progress(msg: str) -> None:
    print(f"[rdb_parse] {msg}", file=sys.stderr, flush=True)


def generate(keys: int, workdir: Path) -> Path:
    from tests.redis_harness import RedisServer

    with RedisServer(workdir, {"enable-debug-command": "yes"}, name="source") as server:
        r = server.client(socket_timeout=600)
        batch = 20_000
        script = r.register_script(FILL)
        for start in range(0, keys, batch):
            script(args=[start, min(batch, keys - start)])
            if start // batch % 10 == 0:
                progress(f"filled {start + min(batch, keys - start)}/{keys} keys")
        r.save()
        path = server.dir / "dump.rdb"
        target = workdir / "bench.rdb"
        shutil.copyfile(path, target)
    return target


def run_child(cmd: list[str]) -> dict[str, Any]:
    """Run ``cmd`` under GNU time: its wall time, CPU time, peak RSS and stdout.

    Not ``os.wait4`` from here: on Linux a child's ``ru_maxrss`` starts at the RSS of the
    process it was forked from (this one, ~55 MiB with redis-py loaded); ``/usr/bin/time`` is
    small, so the command it forks reports its own peak.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".time") as timing:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [TIME, "-f", "%e %U %S %M", "-o", timing.name, *cmd],
            stdout=subprocess.PIPE,
            stderr=None,
            check=False,
        )
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{cmd[0]} exited {proc.returncode}")
        fields = timing.read().split()
    _elapsed, user, system, max_kib = fields[-4:]
    return {
        "seconds": wall,
        "cpu_seconds": float(user) + float(system),
        "peak_rss_mib": int(max_kib) / 1024,
        "stdout": proc.stdout.decode(errors="replace"),
    }


def parse_file(path: Path, chunk: int, verify: bool = True) -> dict[str, Any]:
    """The child: parse ``path`` in ``chunk`` pieces; counts of what it saw."""
    from replicator.redis.rdb import NEED_DATA, RdbParser
    from replicator.redis.rdb.events import KeyBegin

    parser = RdbParser(verify_checksum=verify)
    size = path.stat().st_size
    keys = events = 0
    done = 0
    next_report = size // 10
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        while data := f.read(chunk):
            parser.feed(data)
            done += len(data)
            while (event := parser.next_event()) is not NEED_DATA:
                events += 1
                if type(event) is KeyBegin:
                    keys += 1
            if done >= next_report:
                progress(
                    f"parsed {done / size:.0%} ({done / (time.perf_counter() - t0) / 1e6:.1f} MB/s)"
                )
                next_report += size // 10
    parser.close()
    crc = "anycrc" if verify else "not checked"
    return {"keys": keys, "events": events, "parse_seconds": time.perf_counter() - t0, "crc": crc}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rdb", type=Path, help="parse this file instead of generating one")
    ap.add_argument("--chunk", type=int, default=65536)
    ap.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument(
        "--python",
        action="append",
        help="also run our parser under this interpreter (it needs the project's "
        "dependencies); repeatable",
    )
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--no-crc", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(parse_file(args.child, args.chunk, verify=not args.no_crc)))
        return {}
    report: dict[str, Any] = {"date": timestamp(), "machine": machine(), "chunk_bytes": args.chunk}
    with tempfile.TemporaryDirectory(prefix="rdb_parse-") as tmp:
        if args.rdb:
            path = args.rdb
        else:
            progress(f"generating an RDB of {args.keys} keys on redis-server")
            path = generate(args.keys, Path(tmp))
        size = path.stat().st_size
        report |= {
            "rdb_bytes": size,
            "rdb": str(args.rdb) if args.rdb else f"generated, {args.keys} keys",
        }
        progress(f"RDB: {size / 1e6:.1f} MB; redis-check-rdb")
        check = shutil.which("redis-check-rdb") or "redis-check-rdb"
        c = run_child([check, str(path)])
        progress(f"redis-check-rdb: {c['seconds']:.2f} s; ours")
        child = [
            sys.executable,
            "-m",
            "bench.rdb_parse",
            "--child",
            str(path),
            "--chunk",
            str(args.chunk),
        ]
        ours = run_child(child)
        counts = json.loads(ours.pop("stdout"))
        progress(f"ours: {ours['seconds']:.2f} s; ours without the CRC64 check")
        no_crc = run_child([*child, "--no-crc"])
        no_crc |= json.loads(no_crc.pop("stdout"))
        c.pop("stdout")
        others = []
        for python in args.python or []:
            progress(f"ours under {python}")
            other = run_child([python, *child[1:]])
            others.append(other | json.loads(other.pop("stdout")) | {"python": python})
            others[-1]["mb_per_s"] = size / 1e6 / other["seconds"]
        report |= {
            "ours_other_pythons": others,
            "ours": ours | counts | {"mb_per_s": size / 1e6 / ours["seconds"]},
            "ours_without_crc": no_crc | {"mb_per_s": size / 1e6 / no_crc["seconds"]},
            "redis_check_rdb": c | {"mb_per_s": size / 1e6 / c["seconds"]},
            "time_ratio": ours["seconds"] / c["seconds"],
            "time_ratio_without_crc": no_crc["seconds"] / c["seconds"],
            "load_average": os.getloadavg(),
        }
    md = render(report)
    print(md)
    json_path, md_path = write_report("rdb_parse", report, md, args.out_dir)
    progress(f"wrote {json_path} and {md_path}")
    return report


def render(report: dict[str, Any]) -> str:
    o, n, c = report["ours"], report["ours_without_crc"], report["redis_check_rdb"]
    lines = [
        f"# RDB parse: metaledger vs redis-check-rdb ({report['date']})",
        "",
        f"RDB: {report['rdb']}, {report['rdb_bytes'] / 1e6:.1f} MB; {o['keys']} keys, {o['events']} events;"
        f" our parser reads {report['chunk_bytes']}-byte chunks and verifies the CRC64.",
        f"Machine: {report['machine']['nproc']} CPUs, {report['machine']['cpu_model']}, Python {report['machine']['python']}, {report['machine']['build']} build.",
        "",
        "| parser | wall s | CPU s | MB/s | peak RSS MiB |",
        "|---|---|---|---|---|",
        f"| metaledger, CRC64 by {o['crc']} | {fmt(o['seconds'], '.2f')} | {fmt(o['cpu_seconds'], '.2f')} | {fmt(o['mb_per_s'], '.1f')} | {fmt(o['peak_rss_mib'], '.0f')} |",
        f"| metaledger, CRC64 not checked | {fmt(n['seconds'], '.2f')} | {fmt(n['cpu_seconds'], '.2f')} | {fmt(n['mb_per_s'], '.1f')} | {fmt(n['peak_rss_mib'], '.0f')} |",
        *[
            f"| metaledger under {x['python']}, CRC64 by {x['crc']} | {fmt(x['seconds'], '.2f')} | {fmt(x['cpu_seconds'], '.2f')} | {fmt(x['mb_per_s'], '.1f')} | {fmt(x['peak_rss_mib'], '.0f')} |"
            for x in report["ours_other_pythons"]
        ],
        f"| redis-check-rdb 7.0.15 | {fmt(c['seconds'], '.2f')} | {fmt(c['cpu_seconds'], '.2f')} | {fmt(c['mb_per_s'], '.1f')} | {fmt(c['peak_rss_mib'], '.0f')} |",
        "",
        f"Time ratio (ours / redis-check-rdb): **{report['time_ratio']:.1f}x** with the CRC64 checked,"
        f" {report['time_ratio_without_crc']:.1f}x without (goal: within 4x; it was 10x).",
        f"Load average at the end: {', '.join(f'{x:.2f}' for x in report['load_average'])} (a shared machine).",
        "",
        "The CRC64 is anycrc's (C, carry-less multiply); until 2026-11-26T17 it was pure Python and",
        "half of our time (16x then). Peak RSS is each process's own (GNU time).",
    ]
    for x in report["ours_other_pythons"]:
        lines.append(
            f"Under {x['python']} (CRC64 by {x['crc']}): {x['seconds'] / c['seconds']:.1f}x."
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
