"""``metaledger status``: Admin.Status of every member (role, term, leader, three offsets).

The endpoints given are asked first; the member list of any that answers names the rest
(their client URLs), so ``metaledger status`` against one node reports the whole cluster. A
member that advertises several client URLs (docker-compose.yml: its container's name, then
the host's published port) is asked at each in turn until one answers.
A member that does not answer is shown as ``down`` and named on stderr, and the exit code
is ``MEMBER_DOWN``; ``UNAVAILABLE`` when no endpoint answers at all.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from nameserver.cli._common import error_line, make_client, printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.printers import DOWN
from nameserver.client import ClientError, Member, NodeStatus
from nameserver.client.transport import normalize_endpoint

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers


def split_results(
    results: list[NodeStatus | ClientError],
) -> tuple[list[NodeStatus], list[ClientError]]:
    nodes = [r for r in results if isinstance(r, NodeStatus)]
    errors = [r for r in results if isinstance(r, ClientError)]
    return nodes, errors


def _client_endpoints(m: Member) -> list[str]:
    return [normalize_endpoint(url) for url in m.client_urls]


def _client_endpoint(m: Member) -> str:
    return next(iter(_client_endpoints(m)), "")


def _answered(m: Member, results: list[NodeStatus | ClientError]) -> bool:
    """Whether member ``m`` is among the nodes that answered (by id: a member that has not
    published its name and client URL yet is listed without them)."""
    return any(
        isinstance(r, NodeStatus) and (r.member_id == m.member_id or (m.name and r.id == m.name))
        for r in results
    )


def down_row(name: str, endpoint: str) -> NodeStatus:
    return NodeStatus(name, endpoint, DOWN, 0, "", 0, 0, 0)


def _ask_each_url(
    args: argparse.Namespace, members: list[Member]
) -> list[NodeStatus | ClientError]:
    """Status of ``members`` at their client URLs: all members' first URLs at once, then the
    next URL of those that did not answer, and so on; an error only for the last URL."""
    left = {m.member_id: _client_endpoints(m) for m in members if m.client_urls}
    out: list[NodeStatus | ClientError] = []
    while left:
        asked = list(left.items())
        with make_client(args, [urls[0] for _, urls in asked]) as client:
            answers = client.status_all()  # one per endpoint, in order
        for (mid, urls), r in zip(asked, answers, strict=True):
            if isinstance(r, NodeStatus) or len(urls) == 1:
                out.append(r)
                del left[mid]
            else:
                urls.pop(0)
    return out


def run_status(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        results = client.status_all()
        asked = list(client.endpoints)
        members: list[Member] = []
        if any(isinstance(r, NodeStatus) for r in results):
            try:
                members = client.members()
            except ClientError as exc:  # the nodes answered; report what they said
                print(error_line(exc), file=sys.stderr)
    rest = [m for m in members if not _answered(m, results) and _client_endpoint(m) not in asked]
    results += _ask_each_url(args, rest)
    nodes, errors = split_results(results)
    by_endpoint = {e.endpoint: e for e in errors}
    rows = list(nodes)
    down: list[str] = []
    for m in members:
        if _answered(m, results):
            continue
        endpoints = _client_endpoints(m)
        endpoint = ",".join(endpoints)
        name = m.name or f"{m.member_id:x} (unstarted)"
        errors_of = [by_endpoint.pop(e) for e in endpoints if e in by_endpoint]
        error = errors_of[-1] if errors_of else None
        if error:
            why = error.message.removeprefix("metaledger: ")
            down.append(f"member {name} ({endpoint}) is down: {why}")
        else:
            down.append(f"member {name} has not announced its client URL (starting, or down)")
        rows.append(down_row(m.name or f"{m.member_id:x}", endpoint or "-"))
    down += [error_line(e).removeprefix("metaledger: ") for e in by_endpoint.values()]
    for line in down:
        print(f"metaledger: {line}", file=sys.stderr)
    if not nodes:
        return ExitCode.UNAVAILABLE
    printer(args).status(rows)
    return ExitCode.MEMBER_DOWN if down else ExitCode.OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "status",
        parents=[common],
        help="status of every member; exits non-zero when one is down",
        description=(
            "Ask the endpoints, then every other member the member list names, for their"
            " role, term, leader and log offsets. A member that does not answer is shown as"
            f" 'down' and named on stderr; the exit code is then {int(ExitCode.MEMBER_DOWN)}"
            f" ({int(ExitCode.UNAVAILABLE)} when no endpoint answers)."
        ),
    )
    p.set_defaults(run=run_status)
