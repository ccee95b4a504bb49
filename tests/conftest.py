"""Shared fixtures: every async test runs on asyncio and on trio."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgerfs.engine.locks import LOCK_DIR_ENV


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True, scope="session")
def lock_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One lock directory for this test run (engines and the servers it starts),
    so concurrent runs on one machine do not wait on each other's locks."""
    folder = tmp_path_factory.mktemp("locks")
    previous = os.environ.get(LOCK_DIR_ENV)
    os.environ[LOCK_DIR_ENV] = str(folder)
    yield folder
    if previous is None:
        del os.environ[LOCK_DIR_ENV]
    else:
        os.environ[LOCK_DIR_ENV] = previous
