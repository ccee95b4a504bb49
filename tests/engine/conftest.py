"""Fixtures for the engine tests: a workspace, an open engine, and its FaultyOps.

`engine` runs on `faulty_ops` (disarmed until a test arms it), so any test can
fail a primitive of the engine it already has. Override `engine_config` in a
test module to open the engine with other policies.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Engine

from ._faulty import FaultyOps


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty folder to use as the engine's one root (symlinks resolved)."""
    root = tmp_path / "ws"
    root.mkdir()
    return Path(os.path.realpath(root))


@pytest.fixture
def faulty_ops() -> FaultyOps:
    return FaultyOps()


@pytest.fixture
def engine_config(workspace: Path) -> dict[str, Any]:
    return {"roots": [str(workspace)], "durability": "full", "auto_occ": "off"}


@pytest.fixture
async def engine(engine_config: dict[str, Any], faulty_ops: FaultyOps) -> AsyncIterator[Engine]:
    async with Engine.open(engine_config, fileops=faulty_ops) as opened:
        yield opened


def temp_files(root: Path) -> list[Path]:
    """Every engine temp file left anywhere under `root`."""
    return sorted(p for p in root.rglob(".ledgerfs-*.tmp"))


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and folder (None) under `root`, the journal's folder left out."""
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == ".ledgerfs" or rel.startswith(".ledgerfs/"):
            continue
        found[rel] = None if path.is_dir() else path.read_bytes()
    return found
