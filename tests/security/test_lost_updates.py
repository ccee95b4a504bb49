"""No acknowledged update is lost between ledgerfs processes, whatever their journals and roots.

Real `ledgerfs serve` processes with different journals, nested roots (one on
ROOT, one on ROOT/sub) and a root reached through a symlink increment one
counter file concurrently: read it, write the next number with expected_hash,
and on OCC_MISMATCH read again. Every acknowledged write must be in the final
count, also with the lock directory left at its default (servers that share no
environment variable). Engines with other journals and roots meet on one lock.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import anyio
import pytest

from ledgerfs.engine import Engine, LedgerError
from ledgerfs.engine.locks import PathLocks, bucket_of, lock_folder

from ._support import Server, error, ok

UPDATES = 15


def layout(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "real" / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "counter.txt").write_text("0\n")
    (tmp_path / "link").symlink_to(root)
    return root, tmp_path / "link"


# (root given to the server, relative to the test folder; the counter, relative to it)
SERVERS = [
    ("link", "sub/counter.txt"),  # the root reached through a symlink
    ("real/root/sub", "counter.txt"),  # a root nested in the others
    ("real/root", "sub/counter.txt"),
]


def increment(server: Server, counter: str, done: list[int]) -> None:
    made = 0
    while made < UPDATES:
        read = ok(server.call("read_file", {"path": counter}))
        value = int(read["content"])
        result = server.call(
            "write_file",
            {"path": counter, "content": f"{value + 1}\n", "expected_hash": read["content_hash"]},
        )
        if result.get("isError"):
            error(result, "OCC_MISMATCH")
            continue
        made += 1
    done.append(made)


def run_servers(tmp_path: Path, servers: list[Server]) -> list[int]:
    done: list[int] = []
    threads = [
        threading.Thread(target=increment, args=(server, counter, done))
        for server, (_, counter) in zip(servers, SERVERS, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return done


def start(tmp_path: Path, env: dict[str, str] | None = None) -> list[Server]:
    servers = []
    for index, (root, _) in enumerate(SERVERS):
        journal = ["--journal", str(tmp_path / f"j{index}.db")] if index < 2 else []
        servers.append(Server(tmp_path / root, *journal, "--auto-occ", "off", env=env))
    return servers


def test_servers_with_their_own_journals_lose_no_update(tmp_path: Path) -> None:
    root, _ = layout(tmp_path)
    servers = start(tmp_path)
    try:
        done = run_servers(tmp_path, servers)
    finally:
        for server in servers:
            server.__exit__(None, None, None)
    assert done == [UPDATES] * len(SERVERS)
    assert int((root / "sub" / "counter.txt").read_text()) == UPDATES * len(SERVERS)


def test_servers_meet_at_the_default_lock_directory(tmp_path: Path) -> None:
    root, _ = layout(tmp_path)
    # No LEDGERFS_LOCK_DIR reaches them: each finds the user's default.
    servers = start(tmp_path, env={"LEDGERFS_LOCK_DIR": ""})
    try:
        done = run_servers(tmp_path, servers)
    finally:
        for server in servers:
            server.__exit__(None, None, None)
    assert sum(done) == UPDATES * len(SERVERS)
    assert int((root / "sub" / "counter.txt").read_text()) == UPDATES * len(SERVERS)


@pytest.mark.parametrize(
    "folder",
    [
        "made",  # exists
        "made/new",  # a folder the write will make
        "made/new/deeper/still",  # several
        "made/file.txt",  # below a file: no folder can be made there
    ],
)
def test_a_file_s_bucket_is_its_device_and_name_wherever_its_folder_is(
    tmp_path: Path, folder: str
) -> None:
    """A file not made yet, in folders not made yet, is locked in the bucket of the
    device the nearest existing folder is on and its name, as a file next to it."""
    (tmp_path / "made").mkdir()
    (tmp_path / "made" / "file.txt").write_text("x")
    assert bucket_of(str(tmp_path / folder / "Counter.txt")) == bucket_of(
        str(tmp_path / "counter.txt")
    )


@pytest.mark.anyio
async def test_engines_with_other_journals_and_roots_meet_on_one_lock(tmp_path: Path) -> None:
    """The counter, as two engines with their own journals resolve it (through a
    symlinked root, and from a nested root), is one lock: while the first holds it,
    any other process's flock of that lock file would wait."""
    root, link = layout(tmp_path)
    config_a = {"roots": [str(link)], "journal": str(tmp_path / "a.db")}
    config_b = {"roots": [str(root / "sub")], "journal": str(tmp_path / "b.db")}
    async with Engine.open(config_a) as first, Engine.open(config_b) as second:
        path_a = first.workspace.resolve("sub/counter.txt").path
        path_b = second.workspace.resolve("counter.txt").path
        bucket = bucket_of(path_a)
        assert bucket_of(path_b) == bucket
        lock_file = lock_folder() / f"{bucket:03d}.lock"
        async with first.locks.hold([path_a]):
            probe = os.open(lock_file, os.O_RDWR)
            try:
                with pytest.raises(BlockingIOError):
                    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(probe)
        probe = os.open(lock_file, os.O_RDWR)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released: free again
        finally:
            os.close(probe)


@pytest.mark.anyio
async def test_a_lock_file_removed_by_a_cleaner_is_made_again(tmp_path: Path) -> None:
    """A temp cleaner deletes a lock file an engine has open: the next hold locks a
    new file under the name, the one another process would open."""
    locks = PathLocks(tmp_path / "locks")
    path = str(tmp_path / "a.txt")
    lock_file = tmp_path / "locks" / f"{bucket_of(path):03d}.lock"
    async with locks.hold([path]):
        pass
    lock_file.unlink()
    async with locks.hold([path]):
        probe = os.open(lock_file, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
    locks.close()


def test_a_lock_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    locks = PathLocks(shared)
    with pytest.raises(LedgerError) as caught:
        anyio.run(_hold, locks, str(tmp_path / "a.txt"))
    assert caught.value.code.value == "TOOL_UNAVAILABLE"
    assert caught.value.details == {"reason": "lock_directory"}


async def _hold(locks: PathLocks, path: str) -> None:
    async with locks.hold([path]):
        pass
