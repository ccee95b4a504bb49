"""A change of a big file holds at most the file's old and new bytes at once.

An edit, a patch and an undo of a one-line change to a 16 MiB file, through the
engine, each allocate at most MEMORY_BOUND times the file's size in Python
(tracemalloc's peak over the call: deterministic, unlike a process's RSS).
The bound is what the change needs: the file's bytes as read and the new bytes
written (docs/security.md, section "Resource limits", gives the server's figure,
the journal's own copies included). Splitting, decoding or slicing copies of the
whole file would each add one more.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Engine

pytestmark = pytest.mark.anyio

SIZE = 16 * 1024 * 1024
LINE = b"x" * 75 + b"\n"
LINES = SIZE // len(LINE)
#: Peak Python allocations of one call over the file's size: its old and new
#: bytes (2), with room for the small things around them.
MEMORY_BOUND = 2.5


def patch_of_last_line(old: str, new: str) -> str:
    return (
        f"--- a/big.txt\n+++ b/big.txt\n@@ -{LINES - 1},2 +{LINES - 1},2 @@\n"
        f" {LINE.decode()}-{old}\n+{new}\n"
    )


async def peak_of(call: Any) -> tuple[Any, float]:
    """`call`'s result and its peak Python allocations, over SIZE."""
    tracemalloc.start()
    try:
        result = await call
        return result, tracemalloc.get_traced_memory()[1] / SIZE
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("durability", ["full", "normal"])
async def test_edit_patch_and_undo_of_a_big_file_hold_two_copies(
    workspace: Path, durability: str
) -> None:
    path = workspace / "big.txt"
    path.write_bytes(LINE * (LINES - 1) + b"needle\n")
    config = {"roots": [str(workspace)], "durability": durability, "auto_occ": "off"}
    async with Engine.open(config) as engine:
        session = await engine.session()
        edit = {"path": "big.txt", "edits": [{"old_text": "needle\n", "new_text": "needle 2\n"}]}
        _, edited = await peak_of(session.call("edit_file", edit))
        patch = {"patch": patch_of_last_line("needle 2", "needle 3")}
        patched_result, patched = await peak_of(session.call("apply_patch", patch))
        undo = {"transaction": patched_result.transaction}
        _, undone = await peak_of(session.call("undo", undo))
    assert path.read_bytes().endswith(LINE + b"needle 2\n")
    peaks = {"edit": edited, "patch": patched, "undo": undone}
    assert all(peak <= MEMORY_BOUND for peak in peaks.values()), peaks
