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


def makedirs_durable(directory: str) -> None:
    """``os.makedirs(directory, exist_ok=True)`` whose new directories survive a power cut:
    each one made is fsynced into its parent, top down (an fsynced segment in a directory
    a crash drops is lost with it)."""
    made: list[str] = []
    path = os.path.abspath(directory)
    while not os.path.lexists(path):
        made.append(path)
        path = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    for d in reversed(made):
        fsync_dir(os.path.dirname(d))
