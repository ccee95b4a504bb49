"""The edit corpus through a real stdio server: every case lands, as meant.

Each case of tests/edit_corpus.py is played by the scripted agent of
benchmarks/bench_landing.py (it follows the envelopes: copies a listed
candidate back into old_text, reads only when an envelope gives it nothing to
copy) in every mode of its MODES table. Every case either lands on its first
call (in the modes the case names) or is refused with a candidate that, copied
back, lands on the second (a stale edit refused as OCC_MISMATCH: after one
read); the file is compared whole with the one meant, and a refusal changes
nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from benchmarks.bench_landing import MODES, land_ledgerfs, session_call
from tests.edit_corpus import CASES, Case, applied

from ._support import stdio_params


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus").resolve()
    for mode in MODES:
        (root / mode).mkdir()
    return root


@pytest.fixture(scope="module")
async def client(root: Path, anyio_backend: str) -> AsyncIterator[Client]:
    async with Client(stdio_params(root, "--auto-occ", "off")) as c:
        yield c


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_case_means_what_its_fixed_edits_make(case: Case) -> None:
    assert applied(case.before, case.fixed) == case.expected
    assert set(case.lands_at_once) <= set(MODES)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_every_case_lands_as_meant(client: Client, root: Path, case: Case, mode: str) -> None:
    outcome = await land_ledgerfs(session_call(client), root, case, mode, folder=mode)
    assert not outcome.wrong_write, outcome
    assert outcome.landed, outcome
    assert (root / mode / case.path).read_bytes() == case.expected.encode("utf-8")
    if mode in case.lands_at_once:
        assert (outcome.calls, outcome.codes) == (1, []), outcome
    elif outcome.codes == ["OCC_MISMATCH"]:
        # A stale edit refused: read_and_rebase, one read and the call again.
        assert (outcome.calls, outcome.reads) == (3, 1), outcome
    else:
        # Refused once, with a candidate that copied back landed: no read needed.
        assert (outcome.calls, outcome.copied, outcome.reads) == (2, 1, 0), outcome
        assert outcome.codes == ["VALIDATION"], outcome
    if mode == "ledgerfs_loose" and case.lands_at_once == ("ledgerfs_loose",):
        # Landed loosely, where exact matching refuses: the result says where and why.
        assert [m["edit"] for m in outcome.loose_matches] == [0], outcome
        assert all(m["differences"] for m in outcome.loose_matches), outcome
