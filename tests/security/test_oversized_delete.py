"""A file over max_file_size can be deleted, in bounded memory; undo says it cannot.

The journal keeps no copy of such a file (it is over the size cap), so undo
could not bring it back: the delete's result (and its dry run) warns so; undoing
it is refused and recreates nothing. The file is hashed as it is read, never held whole: the
server's peak memory grows by far less than the file. Through the real stdio
server at the default cap (50 MiB), with sparse files that cost no disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from ledgerfs.engine import Engine

from ._support import Server, error, ok

MiB = 1 << 20
CAP = 50 * MiB  # the default max_file_size


def sparse(path: Path, size: int) -> None:
    """A file of `size` bytes, all zeros but a marker at the start, with no disk blocks."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.write(b"over the cap\n")
        handle.truncate(size)


def peak_rss(pid: int) -> int:
    """The process's peak resident memory in bytes (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    made = tmp_path / "root"
    made.mkdir()
    sparse(made / "big.bin", CAP + MiB)
    sparse(made / "folder" / "inner.bin", CAP + 1)
    (made / "small.txt").write_text("small\n")
    return made


@pytest.fixture
def server(root: Path, tmp_path: Path) -> Iterator[Server]:
    with Server(root, "--journal", tmp_path / "j.db") as running:
        yield running


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("delete_file", {"path": "big.bin"}),
        (
            "batch",
            {
                "operations": [
                    {"op": "delete", "path": "big.bin"},
                    {"op": "delete", "path": "small.txt"},
                ]
            },
        ),
    ],
)
def test_it_is_deleted_and_undo_says_it_cannot(
    root: Path, tmp_path: Path, tool: str, arguments: dict[str, object]
) -> None:
    with Server(root, "--journal", tmp_path / "j.db") as server:
        deleted = _delete_and_try_to_undo(root, server, tool, arguments)

    async def verify() -> None:
        # The journal names a hash it holds no bytes of, on purpose: it still verifies.
        config = {"roots": [str(root)], "journal": str(tmp_path / "j.db")}
        async with Engine.open(config) as engine:
            report = await engine.journal.verify()
            assert report.ok, report
            record = await engine.journal.transaction(deleted)
            assert record is not None
            [kept] = [m.before_kept for m in record.mutations if m.path.endswith("big.bin")]
            assert kept is False

    anyio.run(verify)


def _delete_and_try_to_undo(
    root: Path, server: Server, tool: str, arguments: dict[str, object]
) -> int:
    preview = ok(server.call(tool, {**arguments, "dry_run": True}))
    assert any("undo cannot bring it back" in w for w in preview["warnings"])
    assert (root / "big.bin").exists()
    result = ok(server.call(tool, arguments))
    assert not (root / "big.bin").exists()
    [warning] = [w for w in result["warnings"] if "max_file_size" in w]
    assert "big.bin" in warning and "undo cannot bring it back" in warning
    [change] = [c for c in result["files"] if c["path"] == str(root / "big.bin")]
    assert change["op"] == "delete" and change["previous_hash"].startswith("blake3:")
    body = error(server.call("undo", {"transaction": result["transaction"]}), "VALIDATION")
    assert body["details"]["reason"] == "content_not_kept"
    assert body["details"]["paths"] == [str(root / "big.bin")]
    assert not (root / "big.bin").exists()
    if tool == "batch":
        assert not (root / "small.txt").exists()  # undo is all or nothing: nothing came back
    history = ok(server.call("history", {"path": "big.bin"}))
    assert [e["transaction"] for e in history["entries"]] == [result["transaction"]]
    transaction: int = result["transaction"]
    return transaction


def test_a_folder_holding_one_is_deleted(root: Path, server: Server) -> None:
    arguments = {"path": "folder", "recursive": True}
    result = ok(server.call("delete_file", arguments))
    assert not (root / "folder").exists()
    assert any("inner.bin" in w and "undo cannot" in w for w in result["warnings"])


def test_the_file_is_never_held_whole(root: Path, server: Server) -> None:
    sparse(root / "huge.bin", 512 * MiB)
    ok(server.call("read_file", {"path": "small.txt"}))  # warm: every module loaded
    before = peak_rss(server.proc.pid)
    ok(server.call("delete_file", {"path": "huge.bin"}))
    grown = peak_rss(server.proc.pid) - before
    assert not (root / "huge.bin").exists()
    assert grown < 64 * MiB, grown


def test_only_a_delete_may_use_a_file_over_the_cap(root: Path, server: Server) -> None:
    operations = [
        {"op": "edit", "path": "big.bin", "edits": [{"old_text": "over", "new_text": "x"}]},
        {"op": "delete", "path": "small.txt"},
    ]
    body = error(server.call("batch", {"operations": operations}), "VALIDATION")
    assert body["details"]["reason"] == "file_too_large"
    assert (root / "small.txt").exists()


@pytest.mark.parametrize(
    "first",
    [
        {"op": "edit", "path": "big.bin", "edits": [{"old_text": "over", "new_text": "x"}]},
        {"op": "write", "path": "big.bin", "content": "replaced\n"},
        {"op": "move", "source": "big.bin", "destination": "moved.bin"},
        {"op": "patch", "patch": "--- a/big.bin\n+++ b/big.bin\n@@ -1 +1 @@\n-over the cap\n+x\n"},
    ],
    ids=["edit", "write", "move", "patch"],
)
def test_a_delete_without_the_bytes_lets_no_other_change_use_them(
    root: Path, server: Server, first: dict[str, object]
) -> None:
    operations = [first, {"op": "delete", "path": "big.bin"}]
    body = error(server.call("batch", {"operations": operations}), "VALIDATION")
    assert body["details"]["reason"] == "file_too_large"
    assert (root / "big.bin").stat().st_size == CAP + MiB
