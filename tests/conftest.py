"""Shared fixtures: every async test runs on asyncio and on trio."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True, scope="session")
def journal_marks(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Journals' marks go to a folder of the test run, not the user's state folder.

    Set in the environment, so the servers and CLIs the tests start use it too.
    """
    os.environ["LEDGERFS_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
