"""Running the `ledgerfs` command as people do: a subprocess, from a folder of their choosing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.server._support import REPO, server_env


def ledgerfs(
    *args: str | Path,
    cwd: Path = REPO,
    env: dict[str, str] | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m ledgerfs ARGS...` in `cwd` with no terminal (stdin, stdout are pipes)."""
    done = subprocess.run(
        [sys.executable, "-m", "ledgerfs", *map(str, args)],
        env={**server_env(), **(env or {})},
        cwd=str(cwd),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def tree(folder: Path) -> set[str]:
    """Every path under `folder`, relative to it."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}
