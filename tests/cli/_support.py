"""Running the `ledgerfs` command as people do: a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.server._support import REPO, server_env


def ledgerfs(*args: str | Path, check: bool = False) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "ledgerfs", *map(str, args)],
        env=server_env(),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done
