"""Fixtures every server test shares: the client runs on asyncio, a workspace folder."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """The official client's transports are asyncio's; the engine's trio runs are
    tested embedded (tests/engine)."""
    return "asyncio"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty folder to serve, resolved (tmp_path may lie behind a link)."""
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder.resolve()
