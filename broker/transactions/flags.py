"""The broker command's transaction flags (RocketMQ 5's BrokerConfig names and defaults)."""

from __future__ import annotations

import argparse
from typing import Any


def add_transaction_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--transaction-timeout-ms",
        type=int,
        default=6000,
        metavar="MS",
        help="a half message without an end is checked back with its producer once this old "
        "(transactionTimeOut, 6 s)",
    )
    p.add_argument(
        "--transaction-check-interval-ms",
        type=int,
        default=30_000,
        metavar="MS",
        help="how often half messages are checked (transactionCheckInterval, 30 s)",
    )
    p.add_argument(
        "--transaction-check-max",
        type=int,
        default=15,
        metavar="N",
        help="checks of one half before it is left (transactionCheckMax, 15)",
    )


def transaction_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The flags as BrokerConfig keywords."""
    return {
        "transaction_timeout_ms": args.transaction_timeout_ms,
        "transaction_check_interval_ms": args.transaction_check_interval_ms,
        "transaction_check_max": args.transaction_check_max,
    }
