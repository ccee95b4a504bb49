"""The engine's configuration: every policy of the server flags, validated once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import msgspec

from ..journal import Durability
from .bounds import MAX_FILE_SIZE
from .discovery import journal_in
from .errors import Code, LedgerError
from .occ import AutoOcc

__all__ = ["AutoOcc", "Config", "Durability", "parse_config"]


class Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Policies of one engine; the CLI flags map one to one onto these fields."""

    roots: list[str]
    readonly: bool = False
    allow_secrets: bool = False
    auto_occ: AutoOcc = "warn"
    mutation_budget: Annotated[int, msgspec.Meta(ge=0)] | None = None
    git_remote_allow: list[str] | None = None
    durability: Durability = "full"
    journal: str | None = None
    #: Tools served; None serves all. A tool left out is TOOL_UNAVAILABLE.
    tools: list[str] | None = None
    #: Serve the issue tools (they read and write the repository's GitHub or GitLab
    #: issues with the user's credentials); off, they are TOOL_UNAVAILABLE.
    issue_tools: bool = False
    max_file_size: Annotated[int, msgspec.Meta(gt=0)] = MAX_FILE_SIZE
    #: Seconds between checkpoints that fsync applied files (durability full).
    checkpoint_interval: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    github_hosts: list[str] = msgspec.field(default_factory=lambda: ["github.com"])
    gitlab_hosts: list[str] = msgspec.field(default_factory=lambda: ["gitlab.com"])
    gitlab_token: str | None = None
    gitlab_api_urls: dict[str, str] = msgspec.field(default_factory=dict)

    def journal_path(self) -> Path:
        """Where the journal lives: `--journal`, else `<first root>/.ledgerfs/journal.db`."""
        if self.journal:
            return Path(self.journal).expanduser().resolve()
        return Path(journal_in(os.path.realpath(self.roots[0])))


def parse_config(raw: Config | dict[str, Any]) -> Config:
    """Validate a configuration's fields, given as a Config or a plain mapping.

    The names in `tools` are the registry's to check (`load_config` in
    engine/core.py does both). Raises VALIDATION naming the field (`at
    $.auto_occ`); ROOTS_EMPTY without roots, and NOT_FOUND for a root that is not
    an existing folder.
    """
    try:
        config = raw if isinstance(raw, Config) else msgspec.convert(raw, Config)
        # A Config built in Python skipped conversion; round-trip it to check types.
        config = msgspec.convert(msgspec.to_builtins(config), Config)
    except msgspec.ValidationError as exc:
        raise LedgerError(
            Code.VALIDATION, f"Invalid configuration: {exc}", details={"reason": str(exc)}
        ) from exc
    if not config.roots:
        raise LedgerError(Code.ROOTS_EMPTY)
    for root in config.roots:
        if not os.path.isdir(root):
            raise LedgerError(
                Code.NOT_FOUND,
                f"Root {root!r} is not an existing folder.",
                path=root,
                suggestion="give an existing folder as the root, or create it first",
            )
    return config
