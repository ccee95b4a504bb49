"""Configuration: every policy validated once, bad values named by field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Code, Config, Engine, LedgerError, load_config
from ledgerfs.engine.config import parse_config


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"auto_occ": "sometimes"}, "$.auto_occ"),
        ({"durability": "fsync"}, "$.durability"),
        ({"mutation_budget": -1}, "$.mutation_budget"),
        ({"mutation_budget": "ten"}, "$.mutation_budget"),
        ({"readonly": "yes"}, "$.readonly"),
        ({"max_file_size": 0}, "$.max_file_size"),
        ({"git_remote_allow": "github.com"}, "$.git_remote_allow"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_values_are_validation_naming_the_field(
    tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    with pytest.raises(LedgerError) as caught:
        load_config({"roots": [str(tmp_path)], **change})
    assert caught.value.code is Code.VALIDATION
    assert field in caught.value.envelope.error.message


def test_no_roots_is_roots_empty() -> None:
    with pytest.raises(LedgerError) as caught:
        load_config({"roots": []})
    assert caught.value.code is Code.ROOTS_EMPTY


def test_a_missing_root_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(LedgerError) as caught:
        load_config({"roots": [str(tmp_path / "nope")]})
    assert caught.value.code is Code.NOT_FOUND


def test_unknown_tools_are_named(tmp_path: Path) -> None:
    with pytest.raises(LedgerError) as caught:
        load_config({"roots": [str(tmp_path)], "tools": ["read_file", "format_disk"]})
    assert caught.value.details["unknown"] == ["format_disk"]


def test_defaults_and_journal_location(tmp_path: Path) -> None:
    config = load_config(Config(roots=[str(tmp_path)]))
    assert (config.auto_occ, config.durability, config.readonly) == ("warn", "full", False)
    assert config.journal_path() == tmp_path.resolve() / ".ledgerfs" / "journal.db"
    other = load_config({"roots": [str(tmp_path)], "journal": str(tmp_path / "j.db")})
    assert other.journal_path() == tmp_path / "j.db"


@pytest.mark.parametrize(
    ("tools", "issue_tools", "details"),
    [
        (["read_file", "format_disk"], False, {"field": "tools", "unknown": ["format_disk"]}),
        (
            ["read_file", "issue_read"],
            False,
            {"field": "tools", "reason": "issue_tools_off", "tools": ["issue_read"]},
        ),
    ],
)
@pytest.mark.anyio
async def test_engine_open_checks_tool_names_against_the_registry(
    tmp_path: Path, tools: list[str], issue_tools: bool, details: dict[str, Any]
) -> None:
    # The configuration module knows no tool names; the engine checks them where the
    # registry is known, before the journal is created.
    raw = {"roots": [str(tmp_path)], "tools": tools, "issue_tools": issue_tools}
    assert parse_config(raw).tools == tools
    with pytest.raises(LedgerError) as caught:
        async with Engine.open(raw):
            pass
    assert caught.value.code is Code.VALIDATION
    assert caught.value.details == details
    assert not (tmp_path / ".ledgerfs").exists()


@pytest.mark.anyio
async def test_tools_named_with_issue_tools_on_open(tmp_path: Path) -> None:
    raw = {"roots": [str(tmp_path)], "tools": ["read_file", "issue_read"], "issue_tools": True}
    async with Engine.open(raw) as engine:
        assert engine.config.tools == ["read_file", "issue_read"]
