"""docker-compose.yml (no Docker engine runs here, so its promises are checked on the file):
every node advertises its container name first (what the other nodes forward to) and then the
host's published port of its client API, so ``metaledger status`` on the host reaches every
node; and the published ports are ``cluster up``'s layout the file's header names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def services() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return doc["services"]  # type: ignore[no-any-return]


def flags(command: str) -> dict[str, str]:
    words = command.split()
    return {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}


def published(service: dict[str, Any]) -> dict[int, int]:
    """container port → host port"""
    out = {}
    for mapping in service.get("ports", []):
        host, _, container = str(mapping).rpartition(":")
        out[int(container)] = int(host)
    return out


def test_nodes_advertise_their_name_then_the_hosts_published_port() -> None:
    nodes = {n: s for n, s in services().items() if s["command"].split()[0] == "serve"}
    assert sorted(nodes) == ["ml0", "ml1", "ml2"]
    for i, (name, service) in enumerate(sorted(nodes.items())):
        f = flags(service["command"])
        listen_port = int(f["--listen-client"].rpartition(":")[2])
        inside, outside = f["--advertise-client"].split(",")
        assert inside == f"{service['hostname']}:{listen_port}", (name, inside)
        host, _, port = outside.rpartition(":")
        assert host in ("127.0.0.1", "localhost"), (name, outside)
        assert int(port) == published(service)[listen_port], (name, outside)
        assert int(port) == 9877 + 10 * i  # cluster up's node i, as the header says
