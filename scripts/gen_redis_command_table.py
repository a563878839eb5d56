#!/usr/bin/env python3
"""Regenerate replicator/redis/command_table.json from a real redis-server (7.0.15 here).

Starts its own ``redis-server`` on a free 127.0.0.1 port (no persistence), reads
``COMMAND INFO`` / ``COMMAND DOCS`` through :func:`replicator.redis.commands.fetch_raw`, writes
the snapshot, and stops the server by its PID.

    scripts/gen_redis_command_table.py            # rewrite the snapshot
    scripts/gen_redis_command_table.py --check    # exit 1 if the snapshot drifted (CI)
    scripts/gen_redis_command_table.py --out F    # write elsewhere
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from replicator.redis.commands import SNAPSHOT_FILE, fetch_raw  # noqa: E402

SNAPSHOT = ROOT / "replicator" / "redis" / SNAPSHOT_FILE


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def generate(server: str = "redis-server", timeout: float = 15.0) -> str:
    """The snapshot's text, read from a fresh ``server`` process."""
    binary = shutil.which(server) or server
    with tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        cmd = [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            tmp,
            "--daemonize",
            "no",
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
            deadline = time.monotonic() + timeout
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"{binary} did not answer on port {port}") from None
                    time.sleep(0.05)
            raw = fetch_raw(client)
            client.close()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
    return json.dumps(raw, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the snapshot drifted")
    parser.add_argument("--out", type=Path, default=SNAPSHOT)
    parser.add_argument("--server", default="redis-server")
    args = parser.parse_args(argv)
    text = generate(args.server)
    if args.check:
        if not args.out.exists() or args.out.read_text(encoding="utf-8") != text:
            print(f"{args.out} drifted from {args.server} (run scripts/gen_redis_command_table.py)")
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(json.loads(text)['commands'])} commands)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
