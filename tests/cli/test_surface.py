"""The command line's surface: version, help text for every option, shell-worded errors."""

from __future__ import annotations

import importlib.metadata
import re

import click
import pytest

from ledgerfs.engine import TOOLS, Code, LedgerError
from ledgerfs.engine.cli import cli, cli_suggestion

from ._support import ledgerfs

TOOL_NAME = re.compile(r"\b(" + "|".join(t for t in TOOLS if "_" in t) + r")\b")
SERVE_FLAGS = [
    "--readonly", "--allow-secrets", "--auto-occ", "--on-stale", "--mutation-budget",
    "--max-file-size",
    "--git-remote-allow", "--durability", "--journal", "--http", "--http-token-file",
    "--http-allow-host", "--roots-mode", "--tools",
    "--issue-tools", "--log-file", "--log-level",
]  # fmt: skip


def test_version_is_the_installed_distributions() -> None:
    done = ledgerfs("--version", check=True)
    assert done.stdout == f"ledgerfs {importlib.metadata.version('ledgerfs')}\n"


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_option_of_every_command_has_help(name: str) -> None:
    command = cli.commands[name]
    assert command.help
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{name} {param.opts}"


def test_serve_has_exactly_the_documented_flags() -> None:
    options = [p for p in cli.commands["serve"].params if isinstance(p, click.Option)]
    flags = [p.opts[0] for p in options if p.name not in {"as_json", "help"}]
    assert flags == SERVE_FLAGS


def test_help_runs_as_a_module() -> None:
    done = ledgerfs("--help", check=True)
    for command in ("serve", "log", "show", "undo", "recover", "verify", "gc"):
        assert re.search(rf"^\s+{command}\s", done.stdout, re.MULTILINE), command


@pytest.mark.parametrize("code", list(Code), ids=str)
def test_no_cli_suggestion_names_an_mcp_tool(code: Code) -> None:
    for details in ({}, {"transaction": 3}):
        error = LedgerError(code, path="/w/a.txt", details=details)
        suggestion = cli_suggestion(error.envelope.error)
        assert suggestion and not TOOL_NAME.search(suggestion), suggestion


def test_a_suggestion_without_a_tool_is_kept() -> None:
    body = LedgerError(Code.BUDGET_EXCEEDED).envelope.error
    assert cli_suggestion(body) == body.suggestion
