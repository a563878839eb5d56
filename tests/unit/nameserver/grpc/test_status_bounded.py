"""A status message is bounded (nameserver/grpc/status.py): the fuzz run
(``tests/integration/test_fuzz_ports.py``) sent Quotas.Set a record_type of 200 KB; the
error quoted it whole, and the client, over its 8 KiB metadata limit, saw
RESOURCE_EXHAUSTED "received metadata size exceeds hard limit" instead of the status."""

from __future__ import annotations

import grpc

from nameserver.errors import InvalidArgument
from nameserver.grpc.status import MAX_MESSAGE_BYTES, bounded, to_status


def test_a_short_message_is_unchanged() -> None:
    assert to_status(InvalidArgument("metaledger: topic must not be empty")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "metaledger: topic must not be empty",
    )


def test_an_error_quoting_a_huge_field_is_cut_with_a_note() -> None:
    code, message = to_status(InvalidArgument(f"record_type '{'x' * 200_000}' has no quota"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert message.startswith("record_type 'xxx")
    assert message.endswith("... (message cut: 200027 bytes)")
    assert len(message.encode()) <= MAX_MESSAGE_BYTES


def test_a_cut_never_splits_a_character_and_internal_errors_are_bounded_too() -> None:
    message = bounded("\U0001f600" * 10_000)  # 4 bytes each
    assert len(message.encode()) <= MAX_MESSAGE_BYTES
    head, note = message.split("...", 1)
    assert head == "\U0001f600" * len(head) and note == " (message cut: 40000 bytes)"
    code, text = to_status(KeyError("k" * 50_000))
    assert code == grpc.StatusCode.INTERNAL and len(text.encode()) <= MAX_MESSAGE_BYTES
