"""``metaledger lock NAME [--ttl S] [-- COMMAND...]`` and ``metaledger elect NAME [PROPOSAL] [--listen]``.

``lock`` grants a lease of ``--ttl`` seconds, keeps it alive, and takes the lock through the
Lock service. With a command, it runs the command while holding the lock, with the ownership
key and the fencing token in ``METALEDGER_LOCK_KEY`` and ``METALEDGER_LOCK_TOKEN`` (and the
lease in ``METALEDGER_LOCK_LEASE``, hex), releases the lock afterwards and exits with the
command's status; if the lock is lost meanwhile the command is sent SIGTERM and the exit code
is 1. Without a command it prints the key and the token and holds the lock until Ctrl-C or
SIGTERM (exit 0), like ``etcdctl lock``.

``elect`` campaigns with PROPOSAL, prints the leader key and value once elected, holds
leadership until Ctrl-C or SIGTERM and then resigns; ``--listen`` prints every leader (key,
then value) as it changes, until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from nameserver.cli._common import make_client, positive_float, positive_int, printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.printers import display, kv_json
from nameserver.client import ClientError

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers

LOCK_KEY_ENV = "METALEDGER_LOCK_KEY"
LOCK_TOKEN_ENV = "METALEDGER_LOCK_TOKEN"
LOCK_LEASE_ENV = "METALEDGER_LOCK_LEASE"


@contextlib.contextmanager
def stop_signals(wake: threading.Event) -> Iterator[list[int]]:
    """While inside, SIGINT and SIGTERM set ``wake`` and are recorded in the yielded list
    (installed before anything is printed, so a signal sent as soon as the output appears is
    not missed)."""
    signalled: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        signalled.append(signum)
        wake.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield signalled
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _fail(message: str, code: ExitCode = ExitCode.ERROR) -> int:
    print(f"metaledger: {message}", file=sys.stderr)
    return code


def _add_lock_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ttl", type=positive_int, default=10, metavar="S", help="lease TTL (default 10)"
    )
    parser.add_argument(
        "--wait-timeout",
        type=positive_float,
        default=None,
        metavar="S",
        help="give up if the lock is not acquired within S seconds (default: wait)",
    )


def _lock_command(args: argparse.Namespace) -> list[str]:
    """The command after NAME. argparse hands everything after NAME over (REMAINDER), so
    options given there (``lock NAME --ttl 5 -- cmd``) are parsed here."""
    rest = list(args.command)
    if "--" in rest:
        cut = rest.index("--")
        options, command = rest[:cut], rest[cut + 1 :]
    elif rest and rest[0].startswith("-"):
        options, command = rest, []
    else:
        options, command = [], rest
    if options:
        parser = argparse.ArgumentParser(prog="metaledger lock NAME", parents=[args.common])
        _add_lock_options(parser)
        parser.parse_args(options, namespace=args)
    return command


def run_lock(args: argparse.Namespace) -> int:
    command = _lock_command(args)
    lost = threading.Event()
    children: list[subprocess.Popen[bytes]] = []

    def on_lost(why: str) -> None:
        lost.set()
        for child in children:
            if child.poll() is None:
                child.terminate()

    with (
        make_client(args) as client,
        client.lock(
            args.name, ttl_s=args.ttl, timeout_s=args.wait_timeout, on_lost=on_lost
        ) as held,
    ):
        key = display(held.key)
        if command:
            env = {
                **os.environ,
                LOCK_KEY_ENV: key,
                LOCK_TOKEN_ENV: str(held.token),
                LOCK_LEASE_ENV: f"{held.lease_id:x}",
            }
            try:
                children.append(subprocess.Popen(command, env=env))
            except OSError as exc:
                return _fail(f"cannot run {command[0]!r}: {exc}")
            status = children[0].wait()
            if lost.is_set():
                return _fail(f"lock lost while {command[0]!r} ran: {held.keeper.error}")
            return status if status >= 0 else 128 - status
        doc = {"key": key, "token": held.token, "lease": f"{held.lease_id:x}"}
        with stop_signals(lost) as signalled:
            printer(args).report(doc, f"{key}\nfencing token {held.token}")
            sys.stdout.flush()
            lost.wait()
        if not signalled:
            return _fail(f"lock lost: {held.keeper.error}")
    return ExitCode.OK


def run_elect(args: argparse.Namespace) -> int:
    if args.listen and args.proposal is not None:
        return _fail("proposal given but --listen is set", ExitCode.USAGE)
    if not args.listen and args.proposal is None:
        return _fail("no proposal argument but --listen not set", ExitCode.USAGE)
    out = printer(args)
    with make_client(args) as client:
        election = client.election(args.name)
        if args.listen:
            # The stream is read on a thread and the main thread only waits for a signal or
            # the stream's end: a KeyboardInterrupt raised inside gRPC's blocking iteration
            # could leave the channel unable to close (the process then ignored Ctrl-C).
            done = threading.Event()
            failed: list[ClientError] = []

            def observe() -> None:
                try:
                    for kv in election.observe():
                        out.report(kv_json(kv), f"{display(kv.key)}\n{display(kv.value)}")
                        sys.stdout.flush()
                except ClientError as exc:
                    failed.append(exc)
                finally:
                    done.set()

            with stop_signals(done) as signalled:
                threading.Thread(target=observe, name="observe", daemon=True).start()
                done.wait()
            if signalled:
                return ExitCode.OK
            if failed:
                raise failed[0]
            return _fail("elect: observer lost")
        lost = threading.Event()
        leader = election.campaign(args.proposal, ttl_s=args.ttl, on_lost=lambda _: lost.set())
        doc = {"key": display(leader.key), "value": args.proposal, "rev": leader.rev}
        with stop_signals(lost) as signalled:
            out.report(doc, f"{display(leader.key)}\n{args.proposal}")
            sys.stdout.flush()
            lost.wait()
        if signalled:
            election.resign()
            return ExitCode.OK
        with contextlib.suppress(ClientError):
            election.resign()  # fails (not leader); it revokes the lease and stops the keeper
        return _fail("elect: session expired (leadership lost)")


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    lock = sub.add_parser(
        "lock",
        parents=[common],
        help="hold a named lock (while a command runs, or until Ctrl-C)",
        usage="metaledger lock NAME [--ttl S] [-- COMMAND [ARG...]]",
    )
    _add_lock_options(lock)
    lock.add_argument("name", metavar="NAME", help="lock name")
    lock.add_argument("command", nargs=argparse.REMAINDER, help="command to run holding the lock")
    lock.set_defaults(run=run_lock, common=common)

    elect = sub.add_parser(
        "elect", parents=[common], help="campaign in a leader election, or observe it"
    )
    elect.add_argument("name", metavar="NAME", help="election name")
    elect.add_argument("proposal", metavar="PROPOSAL", nargs="?", help="value to publish")
    elect.add_argument(
        "-l", "--listen", action="store_true", help="observe the election and print its leaders"
    )
    elect.add_argument(
        "--ttl", type=positive_int, default=10, metavar="S", help="lease TTL (default 10)"
    )
    elect.set_defaults(run=run_elect)
