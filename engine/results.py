"""Typed results of every tool; adapters serialise them as they are."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeVar

import msgspec

from ..journal import SessionFacts
from .edits import LooseMatch
from .encodings import LineEndings
from .errors import ErrorBody

if TYPE_CHECKING:
    from ..journal import MutationRecord, SessionRecord

__all__ = [
    "AllowedDirectories",
    "CheckpointResult",
    "DirEntry",
    "DirectoryListing",
    "FileChange",
    "FileContent",
    "FileInfo",
    "FileOutcome",
    "HistoryEntry",
    "HistoryMutation",
    "HistoryResult",
    "LooseMatch",
    "MediaFile",
    "MediaInfo",
    "MergedFile",
    "MultipleFiles",
    "MutationResult",
    "NotebookCell",
    "RecoveryOutcome",
    "RewindResult",
    "SearchMatch",
    "SearchResult",
    "SessionInfo",
    "Skipped",
    "TreeNode",
    "TreeResult",
]


class _Result(msgspec.Struct, kw_only=True, frozen=True):
    pass


_R = TypeVar("_R", bound=_Result)


def _by_name(result: type[_R], record: object) -> _R:
    """A `result` of `record`'s fields of the result's names (a journal record, as
    a tool shows it)."""
    return result(**{name: getattr(record, name) for name in result.__struct_fields__})


class AllowedDirectories(_Result, frozen=True):
    directories: list[str]


class NotebookCell(_Result, frozen=True):
    """One cell of a notebook, as read_file with `format: "cells"` shows it."""

    index: int
    #: Null in notebooks older than nbformat 4.5, whose cells have no ids.
    id: str | None
    cell_type: str
    source: str
    #: The cell's outputs in short (their kinds and first lines), null when none.
    outputs: str | None = None


class FileContent(_Result, frozen=True):
    path: str
    content: str
    #: base64 (bytes that are not text), or the text's encoding (Python's codec name).
    encoding: str
    content_hash: str
    size: int
    total_lines: int | None
    offset: int
    lines: int | None
    #: Whether there is more after this page (false on the last page).
    truncated: bool
    #: When truncated: the offset to read on from (null on the last page).
    next_offset: int | None = None
    #: Whether the file starts with a byte order mark (not part of content).
    bom: bool = False
    line_endings: LineEndings | None = None
    #: With `format: "cells"`: the notebook's cells (`content` is then empty, and
    #: total_lines, offset, lines and next_offset count cells).
    cells: list[NotebookCell] | None = None


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
    files: int = 0
    directories: int = 0
    #: The size of the files listed (folders count nothing).
    total_size: int = 0


class FileChange(_Result, frozen=True):
    path: str
    previous_hash: str | None
    content_hash: str | None
    op: str
    destination: str | None = None


class MergedFile(_Result, frozen=True):
    """A file whose stale change was merged onto its newer content (on_stale: merge)."""

    path: str
    #: The version the change was computed against (the call's expected hash).
    base_hash: str
    #: What the file held when the change was merged onto it.
    current_hash: str | None


class MutationResult(_Result, frozen=True):
    transaction: int | None
    #: The session that made (or, with dry_run, would make) the change: `history`
    #: and `rewind` take it.
    session: str
    #: At most the first 200 touched paths; `files_total` counts them all.
    files: list[FileChange]
    #: At most 64 KiB; when `diff_truncated`, `history` with `transaction` and
    #: `diff: true` returns the whole diff, page by page.
    diff: str
    dry_run: bool = False
    #: At most 20; the last says how many more there were.
    warnings: list[str] = []
    undo_of: int | None = None
    files_total: int = 0
    #: Whether `files` left paths out (`history` with `transaction` lists them all).
    files_truncated: bool = False
    diff_truncated: bool = False
    #: The whole diff's length in characters.
    diff_size: int = 0
    #: The edits that `match: "loose"` applied where old_text nearly matched.
    loose_matches: list[LooseMatch] = []
    #: The files whose stale change was merged onto what they held (on_stale:
    #: merge); `diff` shows what was written. At most the first 200.
    merged: list[MergedFile] = []


class Skipped(_Result, frozen=True):
    """A file a rewind left as it is, why, and who changed it (a session id or "outside")."""

    path: str
    reason: str
    by: str


class RewindResult(MutationResult, frozen=True):
    #: The transactions reverted, newest first (at most MAX_FILES; `rewound_total`
    #: counts them all).
    rewound: list[int] = []
    rewound_total: int = 0
    #: With on_conflict "skip": the files left as they are (at most MAX_FILES).
    skipped: list[Skipped] = []
    skipped_total: int = 0


class HistoryMutation(_Result, frozen=True):
    op: str
    path: str
    destination: str | None
    before_hash: str | None
    after_hash: str | None

    @classmethod
    def of(cls, mutation: MutationRecord) -> HistoryMutation:
        """A journal record's mutation as history and log entries show it: its
        fields of the same names."""
        return _by_name(cls, mutation)


class HistoryEntry(_Result, frozen=True):
    """One transaction: a page of its mutations (as a mutation result lists its
    files) and, when asked for (`diff: true`), a page of its diff."""

    transaction: int
    session: str
    state: str
    outcome: str | None
    created_at: float
    finished_at: float | None
    undo_of: int | None
    summary: str
    #: From `mutations_offset`: at most 200, and 48 KiB of them.
    mutations: list[HistoryMutation]
    mutations_total: int = 0
    #: When more mutations follow: the mutations_offset of the next page.
    mutations_next_offset: int | None = None
    diff: str | None = None
    #: When the diff goes on past this page: the diff_offset of the next one.
    diff_next_offset: int | None = None


class SessionInfo(_Result, SessionFacts, frozen=True):
    """A session as `history` with `sessions: true` lists it: the journal's record of
    it without its budget."""

    @classmethod
    def of(cls, record: SessionRecord) -> SessionInfo:
        return _by_name(cls, record)


class HistoryResult(_Result, frozen=True):
    #: Newest first: at most `limit`, and 64 KiB of them (one at least).
    entries: list[HistoryEntry]
    #: Whether older transactions match too: pass next_before as before for them.
    truncated: bool = False
    next_before: int | None = None
    #: With `sessions: true` (and then `entries` is empty): newest first.
    sessions: list[SessionInfo] | None = None


class CheckpointResult(_Result, frozen=True):
    #: Its id: pass it as checkpoint to history (and rewind).
    checkpoint: int
    label: str | None
    session: str
    #: The newest transaction in effect when it was made (any session's), or null.
    transaction: int | None


class RecoveryOutcome(_Result, frozen=True):
    transaction: int
    action: Literal["roll_back", "roll_forward"]
    outcome: str
    restored: list[str]
    not_restored: list[dict[str, str]]


class SearchMatch(_Result, frozen=True):
    path: str
    #: 1-based, as editors and grep count.
    line: int
    text: str
    before: list[str] = []
    after: list[str] = []


class SearchResult(_Result, frozen=True):
    path: str
    #: Files whose name matched (name search) or that hold a match (content search).
    files: list[str]
    #: Content search only: the matching lines, one per line, in file order.
    matches: list[SearchMatch] | None = None
    truncated: bool = False
    files_searched: int | None = None


class TreeNode(_Result, frozen=True):
    name: str
    type: Literal["file", "directory"]
    size: int | None = None
    #: A folder's entries (empty when max_depth stopped the walk above them).
    children: list[TreeNode] | None = None
    #: A folder with entries max_depth left out (its children are empty).
    truncated: bool = False


class TreeResult(_Result, frozen=True):
    path: str
    tree: list[TreeNode]
    entries: int
    #: Whether max_entries left entries out (max_depth marks the folders it cut).
    truncated: bool = False


class FileOutcome(_Result, frozen=True):
    """One file of read_multiple_files: its content, or the envelope body of its failure."""

    path: str
    file: FileContent | None = None
    error: ErrorBody | None = None


class MultipleFiles(_Result, frozen=True):
    files: list[FileOutcome]


class MediaInfo(_Result, frozen=True):
    """What read_media_file says about a file; its bytes go in an image or audio block."""

    path: str
    mime_type: str
    kind: Literal["image", "audio"]
    size: int
    content_hash: str


class MediaFile(msgspec.Struct, kw_only=True, frozen=True):
    """read_media_file's result: the file's description and its base64 bytes."""

    info: MediaInfo
    data: str
