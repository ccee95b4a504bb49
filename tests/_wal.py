"""Reading a WAL file as SQLite does: its log ends at the first frame that does
not carry the header's salts (a zero page number included). What follows (the
zeros the journal writes ahead, frames of a log that started over) is not read.
Checksums are not checked: a frame that carries the salts counts."""

from __future__ import annotations

from pathlib import Path

HEADER = 32
FRAME_HEADER = 24


def log_frames(data: bytes) -> int:
    """How many frames from the start of the WAL bytes `data` belong to its log."""
    if len(data) < HEADER:
        return 0
    page = int.from_bytes(data[8:12], "big")
    salts = data[16:24]
    frames, at = 0, HEADER
    while at + FRAME_HEADER + page <= len(data):
        header = data[at : at + FRAME_HEADER]
        if int.from_bytes(header[:4], "big") == 0 or header[8:16] != salts:
            break
        frames += 1
        at += FRAME_HEADER + page
    return frames


def log_length(data: bytes) -> int:
    """The bytes of `data` its header and log frames take (0 without a header)."""
    if len(data) < HEADER:
        return 0
    page = int.from_bytes(data[8:12], "big")
    return HEADER + log_frames(data) * (FRAME_HEADER + page)


def valid_frames(wal: Path) -> int:
    return log_frames(wal.read_bytes())


def used_bytes(wal: Path) -> int:
    return log_length(wal.read_bytes())
