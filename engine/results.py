"""Typed results of every tool; adapters serialise them as they are."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = [
    "AllowedDirectories",
    "DirEntry",
    "DirectoryListing",
    "FileChange",
    "FileContent",
    "FileInfo",
    "HistoryEntry",
    "HistoryMutation",
    "HistoryResult",
    "MutationResult",
    "RecoveryOutcome",
]


class _Result(msgspec.Struct, kw_only=True, frozen=True):
    pass


class AllowedDirectories(_Result, frozen=True):
    directories: list[str]


class FileContent(_Result, frozen=True):
    path: str
    content: str
    encoding: Literal["utf-8", "base64"]
    content_hash: str
    size: int
    total_lines: int | None
    offset: int
    lines: int | None
    truncated: bool


class FileInfo(_Result, frozen=True):
    path: str
    type: Literal["file", "directory"]
    size: int
    modified: float
    created: float | None
    permissions: str
    content_hash: str | None


class DirEntry(_Result, frozen=True):
    name: str
    type: Literal["file", "directory", "symlink", "other"]
    size: int | None


class DirectoryListing(_Result, frozen=True):
    path: str
    entries: list[DirEntry]


class FileChange(_Result, frozen=True):
    path: str
    previous_hash: str | None
    content_hash: str | None
    op: str
    destination: str | None = None


class MutationResult(_Result, frozen=True):
    transaction: int | None
    files: list[FileChange]
    diff: str
    dry_run: bool = False
    warnings: list[str] = []
    undo_of: int | None = None


class HistoryMutation(_Result, frozen=True):
    op: str
    path: str
    destination: str | None
    before_hash: str | None
    after_hash: str | None


class HistoryEntry(_Result, frozen=True):
    transaction: int
    session: str
    state: str
    outcome: str | None
    created_at: float
    finished_at: float | None
    undo_of: int | None
    summary: str
    mutations: list[HistoryMutation]


class HistoryResult(_Result, frozen=True):
    entries: list[HistoryEntry]


class RecoveryOutcome(_Result, frozen=True):
    transaction: int
    action: Literal["roll_back", "roll_forward"]
    outcome: str
    restored: list[str]
    not_restored: list[dict[str, str]]
