"""Without chromium the browser tests skip, with the reason; under CI they fail instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._support import browser_paths


@pytest.mark.parametrize(
    ("ci", "outcome"),
    [
        (None, pytest.skip.Exception),
        ("false", pytest.skip.Exception),
        ("true", pytest.fail.Exception),
    ],
)
def test_a_missing_browser(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ci: str | None, outcome: type[BaseException]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no chromium, no driver
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="chromium and chromium-driver"):
        browser_paths()
