"""The file sink: JSON lines, body round trip, confirmation in order, a failing write."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
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


def test_futures_give_line_numbers_counting_lines_already_there(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text("old 0\nold 1\n")

    async def main() -> list[int]:
        sink = FileSink(path, {"T": 2})
        await sink.start()
        futures = [await sink.submit(msg(i, i % 2)) for i in range(4)]
        kept = dataclasses.replace(msg(9), uniq_key="SRC-ID", flag=3)
        futures.append(await sink.submit(kept))
        out = list(await asyncio.gather(*futures))
        await sink.close()
        return out

    assert asyncio.run(main()) == [2, 3, 4, 5, 6]
    lines = path.read_text().splitlines()
    assert json.loads(lines[6])["offset"] == 10  # line 6 holds the fifth message
    assert (json.loads(lines[6])["uniq_key"], json.loads(lines[6])["flag"]) == ("SRC-ID", 3)
    assert "uniq_key" not in json.loads(lines[2]) and "flag" not in json.loads(lines[2])

    async def again() -> int:  # a new sink on the same file counts on from there
        sink = FileSink(path, {"T": 1})
        await sink.start()
        n = await (await sink.submit(msg(0)))
        await sink.close()
        return n

    assert asyncio.run(again()) == 7


def test_stdout_lines_count_from_zero(capsys: pytest.CaptureFixture[str]) -> None:
    async def main() -> list[int]:
        sink = FileSink("-", {"T": 1})
        await sink.start()
        out = [await (await sink.submit(msg(i))) for i in range(3)]
        await sink.close()
        return out

    assert asyncio.run(main()) == [0, 1, 2]
    assert len(capsys.readouterr().out.splitlines()) == 3
