"""Turn each flush of engine/ and journal/ into a no-op, one at a time; see what fails.

`python -m tests.mutate_flushes [--tests PATH ...] [--only SITE ...]` copies the
tree (tracked and new files) into a temporary folder once per site, replaces
the site's line with a no-op, runs the tests that guard durability on the copy
(by default the system-call tests and the power-loss tests) and prints
a table: site, and the tests that failed (the mutant is killed) or "SURVIVED".
A first run without any mutation must pass, or the table means nothing.

The sites are every `os.fsync`, `os.fdatasync`, `syncfs`/`sync` call and
`synchronous` pragma in engine/ and journal/ (found with `grep -rn
"fsync\\|fdatasync\\|syncfs\\|os.sync\\|synchronous"`), and the calls that pass
the engine's flushes on (the flusher's, recovery's, the syncer's). Each must
occur exactly once in its file, so a refactor that moves one fails this script
loudly instead of testing nothing. A site no caller can reach is listed as dead,
with the reason, and not run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The system-call tests, and the power-loss simulator's (which replaces the
# flushes by recorders, so it cannot see a production flush go).
DEFAULT_TESTS = ["tests/engine/test_syscalls.py", "tests/engine/test_powerloss.py"]


@dataclass(frozen=True)
class Site:
    name: str
    path: str
    line: str  # the exact text, found once
    mutant: str  # what replaces it
    dead: str = ""  # why nothing can reach it, if so


SITES = [
    Site(
        "FileOps.datasync: os.fdatasync (the WAL's commit point)",
        "engine/fileops.py",
        "        os.fdatasync(fd)\n",
        "        pass\n",
    ),
    Site(
        "sync_filesystems: syncfs(2)",
        "engine/fileops.py",
        "            if _syncfs is None or _syncfs(fd) != 0:\n",
        "            if False:\n",
    ),
    Site(
        "sync_filesystems: the sync() fallback",
        "engine/fileops.py",
        "                os.sync()\n",
        "                pass\n",
    ),
    Site(
        "Engine._syncfs: FileOps.syncfs of the roots",
        "engine/core.py",
        "            self.fileops.syncfs(self.workspace.roots)\n",
        "            pass\n",
    ),
    Site(
        "Engine._start: the journal's datasync is FileOps.datasync",
        "engine/core.py",
        "                datasync=self.fileops.datasync,\n",
        "                datasync=lambda fd: None,\n",
    ),
    Site(
        "Flusher.flush: the syncfs before the mark",
        "engine/flush.py",
        "            await anyio.to_thread.run_sync(self.syncfs)\n",
        "            pass\n",
    ),
    Site(
        "recover: the flush before the records",
        "engine/recovery.py",
        "        await anyio.to_thread.run_sync(flush)\n",
        "        pass\n",
    ),
    Site(
        "Journal.open: default datasync=os.fdatasync",
        "journal/_journal.py",
        "        datasync: Callable[[int], None] = os.fdatasync,\n",
        "        datasync: Callable[[int], None] = lambda fd: None,\n",
    ),
    Site(
        "Syncer: the WAL's fdatasync",
        "journal/_syncer.py",
        "        self._datasync(self._wal_fd())\n",
        "        pass\n",
    ),
    Site(
        "reserve: fdatasync of the WAL written ahead",
        "journal/_walspace.py",
        "            os.fdatasync(fd)\n",
        "            pass\n",
    ),
    Site(
        "connect: PRAGMA synchronous = FULL/NORMAL",
        "journal/_schema.py",
        '        conn.execute(f"PRAGMA synchronous = {synchronous}")\n',
        "        pass\n",
    ),
    Site(
        "connect: PRAGMA synchronous set to OFF instead",
        "journal/_schema.py",
        '        conn.execute(f"PRAGMA synchronous = {synchronous}")\n',
        '        conn.execute("PRAGMA synchronous = OFF")\n',
    ),
    Site(
        "Writer: PRAGMA synchronous = NORMAL under the syncer",
        "journal/_writer.py",
        '            db.execute("PRAGMA synchronous = NORMAL")\n',
        "            pass\n",
    ),
    Site(
        "Writer: PRAGMA synchronous = NORMAL for a lazy group",
        "journal/_writer.py",
        '            self.db.conn.execute("PRAGMA synchronous = NORMAL")\n',
        "            pass\n",
    ),
    Site(
        "Writer: PRAGMA synchronous = FULL again after a lazy group",
        "journal/_writer.py",
        '                self.db.conn.execute("PRAGMA synchronous = FULL")\n',
        "                pass\n",
    ),
]


def _files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [
        line for line in out.splitlines() if (REPO / line).exists() or (REPO / line).is_symlink()
    ]


def _copy(files: list[str], into: Path) -> None:
    for name in files:
        src, dst = REPO / name, into / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


def _mutate(tree: Path, site: Site) -> None:
    path = tree / site.path
    text = path.read_text()
    count = text.count(site.line)
    if count != 1:
        raise SystemExit(f"{site.name}: found {count} times in {site.path}; update the site")
    if site.dead:
        return  # nothing reaches it: checked to be there, not run
    mutant = site.mutant
    path.write_text(text.replace(site.line, mutant))


def _run(tree: Path, tests: list[str]) -> list[str]:
    """The tests that failed on `tree` (names), or ["<error>"] if pytest broke."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # A folder of its own: pytest's shared one is pruned by every other run.
    basetemp = tree / ".pytest-tmp"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfE", f"--basetemp={basetemp}", *tests],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    failed = re.findall(r"^FAILED (\S+)", done.stdout, re.M)
    errors = re.findall(r"^ERROR (\S+)", done.stdout, re.M)
    if done.returncode not in (0, 1) or (done.returncode == 1 and not failed + errors):
        return [f"<pytest exit {done.returncode}: {done.stdout[-300:]}>"]
    return [name.split("::", 1)[-1] for name in failed + errors]


def _check_imports(tree: Path) -> None:
    """The copy's tests must run the copy's code, not the installed tree."""
    out = subprocess.run(
        [sys.executable, "-c", "import ledgerfs.engine.fileops as f; print(f.__file__)"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not out.startswith(str(tree)):
        raise SystemExit(f"the copy imports {out}, not its own code")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", nargs="+", default=DEFAULT_TESTS)
    parser.add_argument("--only", nargs="+", default=None, help="site numbers to run")
    args = parser.parse_args()
    files = _files()
    rows: list[tuple[str, str, str]] = []
    chosen = [(i, s) for i, s in enumerate(SITES, 1) if args.only is None or str(i) in args.only]
    with tempfile.TemporaryDirectory(prefix="mutate-flushes-") as base:
        baseline = Path(base) / "baseline"
        _copy(files, baseline)
        _check_imports(baseline)
        failed = _run(baseline, args.tests)
        if failed:
            raise SystemExit(f"the unmutated tree fails: {failed}")
        shutil.rmtree(baseline)
        for number, site in chosen:
            tree = Path(base) / f"site{number}"
            _copy(files, tree)
            _mutate(tree, site)  # checks the site is there, dead or not
            if site.dead:
                verdict = site.dead
            else:
                failed = _run(tree, args.tests)
                verdict = ", ".join(failed) if failed else "SURVIVED"
            rows.append((f"{number}", f"{site.name} ({site.path})", verdict))
            print(f"{number:>2}  {site.name} ({site.path}): {verdict}", flush=True)
            shutil.rmtree(tree)
    print()
    print("| # | site | killed by |")
    print("| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
