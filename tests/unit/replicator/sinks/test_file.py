"""The file sink: JSON lines, body round trip, confirmation in order, a failing write."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from pathlib import Path

import pytest

from replicator.sinks.base import OutMessage
from replicator.sinks.errors import MessageRejected, QueueFailed, SinkClosed, SinkUnavailable
from replicator.sinks.file import FileSink


def msg(i: int, queue: int = 0, body: bytes = b"x") -> OutMessage:
    return OutMessage("T", queue, body, "SET", f"k{i}", {"REDIS_START": str(i)}, i + 1)


def test_lines_round_trip_and_confirm_in_order(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"

    async def main() -> None:
        sink = FileSink(path, {"T": 2})
        await sink.start()
        assert sink.queue_count("T") == 2
        futures = [await sink.submit(msg(i, i % 2, bytes(range(256)))) for i in range(6)]
        await asyncio.gather(*futures)
        assert (sink.confirmed("T", 0), sink.confirmed_offset("T", 0)) == (3, 5)
        with pytest.raises(MessageRejected):
            await sink.submit(msg(0, queue=2))
        await sink.close()
        with pytest.raises(SinkClosed):
            await sink.submit(msg(0))

    asyncio.run(main())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [d["offset"] for d in lines] == [1, 2, 3, 4, 5, 6]
    assert all(base64.b64decode(d["body_b64"]) == bytes(range(256)) for d in lines)
    assert lines[0]["properties"] == {"REDIS_START": "0"} and lines[0]["tags"] == "SET"


def test_hex_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    async def main() -> None:
        sink = FileSink(None, {"T": 1}, encoding="hex")
        await sink.start()
        await (await sink.submit(msg(0, body=b"\x00\xff")))
        await sink.close()

    asyncio.run(main())
    assert json.loads(capsys.readouterr().out)["body_hex"] == "00ff"


class Full(io.StringIO):
    def write(self, s: str) -> int:
        raise OSError(28, "No space left on device")


def test_a_failed_write_fails_the_queue(tmp_path: Path) -> None:
    async def main() -> None:
        sink = FileSink(tmp_path / "x", {"T": 2})
        await sink.start()
        assert sink._out is not None
        good = sink._out
        sink._out = Full()
        f = await sink.submit(msg(0))
        with pytest.raises(SinkUnavailable, match="No space"):
            await f
        with pytest.raises(QueueFailed):
            await sink.submit(msg(1))
        sink._out = good
        await (await sink.submit(msg(2, queue=1)))  # another queue still works
        assert sink.confirmed("T", 0) == 0 and sink.confirmed("T", 1) == 1
        await sink.close()

    asyncio.run(main())
