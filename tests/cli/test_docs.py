"""The embedding example in docs/embedding.md runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.server._support import REPO, server_env


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)


def test_embedding_example_runs(tmp_path: Path) -> None:
    [example] = python_blocks((REPO / "docs" / "embedding.md").read_text())
    script = tmp_path / "embed.py"
    script.write_text(example)
    root = tmp_path / "ws"
    root.mkdir()
    done = subprocess.run(
        [sys.executable, str(script), str(root)],
        env={**server_env(), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "read_and_rebase" in done.stdout
    assert (root / "notes.txt").read_text() == "one\n"  # the edit was undone
