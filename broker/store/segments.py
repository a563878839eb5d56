"""Segment-file helpers shared by the commit log and the consume queues.

A segment file is named by the byte offset of its first byte, 20 zero-padded digits
(RocketMQ's ``UtilAll.offset2FileName``). Directory entries are made durable with an
fsync of the directory after a file is created, renamed or removed.
"""

from __future__ import annotations

import os


def segment_name(start: int) -> str:
    return f"{start:020d}"


def list_segments(directory: str) -> list[tuple[int, str]]:
    """(start offset, path) of every segment file in ``directory``, oldest first."""
    if not os.path.isdir(directory):
        return []
    out = [
        (int(name), os.path.join(directory, name))
        for name in os.listdir(directory)
        if len(name) == 20 and name.isdigit()
    ]
    return sorted(out)


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
