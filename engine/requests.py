"""Typed requests for every tool, decoded once from a client's arguments.

Unknown or mistyped arguments are VALIDATION envelopes whose message names the
field by path (`at $.edits[0].old_text`), straight from msgspec. Every field
carries the description and constraints a client sees in the tool's schema.
Paths and hashes are checked by the sandbox and OCC with messages of their own,
so their shape is stated in the schema only (`extra_json_schema`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

import msgspec

from .bounds import MAX_TREE_DEPTH, TREE_DEPTH
from .errors import Code, LedgerError
from .nonutf8 import reject_surrogates
from .planning import MAX_EDITS

__all__ = [
    "ApplyPatch",
    "Batch",
    "BatchOp",
    "CellOperation",
    "CheckpointRequest",
    "CopyFile",
    "CopyOp",
    "CreateDirectory",
    "DeleteFile",
    "DirectoryTree",
    "Edit",
    "EditFile",
    "EditNotebook",
    "GetFileInfo",
    "GitStatusRequest",
    "HistoryRequest",
    "ListAllowedDirectories",
    "ListDirectory",
    "MoveFile",
    "NotebookOp",
    "Operation",
    "ReadFile",
    "ReadMediaFile",
    "ReadMultipleFiles",
    "Rewind",
    "SearchFiles",
    "Undo",
    "WriteFile",
    "decode_request",
]

#: The largest integer an argument may hold: what SQLite and the OS can store (a
#: larger one is VALIDATION, not an overflow deep inside a call).
MAX_INT = 2**63 - 1

NonNegative = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT)]
Positive = Annotated[int, msgspec.Meta(ge=1, le=MAX_INT)]
_PATH_SCHEMA = {"minLength": 1, "maxLength": 4096}
_HASH_SCHEMA = {"pattern": "^blake3:[0-9a-f]{64}$"}


def _brief(text: str) -> dict[str, str]:
    """What the tool listing says of a field instead of its description (`schemas`)."""
    return {"brief": text}


def _path(description: str, brief: str | None = None) -> msgspec.Meta:
    return msgspec.Meta(
        description=description,
        extra_json_schema=_PATH_SCHEMA,
        extra=_brief(brief) if brief is not None else None,
    )


_RELATIVE = "absolute, or relative to the first allowed directory"
AnyPath = Annotated[str, _path(f"A path: {_RELATIVE}.", "Path.")]
FilePath = Annotated[str, _path(f"A file: {_RELATIVE}.", "File.")]
FolderPath = Annotated[str, _path(f"A folder: {_RELATIVE}.", "Folder.")]
ExpectedHash = Annotated[
    str | None,
    msgspec.Meta(
        description="The content_hash last read; the change is refused (OCC_MISMATCH) "
        "if the file changed since.",
        extra_json_schema=_HASH_SCHEMA,
        extra=_brief("content_hash last read."),
    ),
]
ExpectedStatusHash = Annotated[
    str | None,
    msgspec.Meta(
        description="The status_hash from git_status; the change is refused (STALE_GIT) "
        "if the repository's status changed since.",
        extra=_brief("From git_status."),
    ),
]
DryRun = Annotated[
    bool,
    msgspec.Meta(
        description="Preview: return the diff and hashes, change nothing.",
        extra=_brief("Preview."),
    ),
]
Content = Annotated[
    str,
    msgspec.Meta(
        description="The whole new content: text, or base64 when encoding is base64.",
        extra=_brief("The whole new content."),
    ),
]
_ENCODING_SCHEMA = {"minLength": 1, "maxLength": 64}
Encoding = Annotated[
    str | None,
    msgspec.Meta(
        description="base64, or the text's encoding (utf-8, utf-16, latin-1...); null: the file's.",
        extra_json_schema=_ENCODING_SCHEMA,
        extra=_brief("base64, or a text encoding."),
    ),
]
FileEncoding = Annotated[
    str | None,
    msgspec.Meta(
        description="The file's encoding (utf-16, latin-1...); null: its BOM or "
        "declaration, else UTF-8.",
        extra_json_schema=_ENCODING_SCHEMA,
        extra=_brief("If not its own."),
    ),
]
Bom = Annotated[
    bool | None,
    msgspec.Meta(
        description="Write a byte order mark; null: keep the file's.",
        extra=_brief("Byte order mark."),
    ),
]
AllowRewrite = Annotated[
    bool,
    msgspec.Meta(
        description="Allow edits that replace most of the file (else REWRITE_BLOCKED).",
        extra=_brief("Allow a near rewrite."),
    ),
]
PatchText = Annotated[
    str | None,
    msgspec.Meta(
        description="A unified diff (git diff or diff -u, --binary hunks included), of one "
        "or many files. Exactly one of patch and patch_base64.",
        extra=_brief("Unified diff."),
    ),
]
PatchBase64 = Annotated[
    str | None,
    msgspec.Meta(
        description="The patch's bytes in base64, for a diff that is not UTF-8 text. "
        "Exactly one of patch and patch_base64.",
        extra=_brief("The diff in base64."),
    ),
]
ExpectedHashes = Annotated[
    dict[str, str] | None,
    msgspec.Meta(
        description="The content_hash last read of each file the patch changes, by the "
        "path the patch names (or its absolute path).",
        extra=_brief("content_hash by path."),
        extra_json_schema={"additionalProperties": _HASH_SCHEMA},
    ),
]
OnStaleArg = Annotated[
    Literal["refuse", "merge"] | None,
    msgspec.Meta(
        description="When expected_hash names an older version the server knows and the "
        "file changed since: refuse (OCC_MISMATCH), or merge this change onto the file as "
        "it is now (refused, nothing written, where both changed the same lines). null: "
        "the server's --on-stale (refuse unless set).",
        extra=_brief("If stale."),
    ),
]
Source = Annotated[str, _path("The file or folder to move.", "File or folder to move.")]
Destination = Annotated[str, _path("Where it goes; must not exist.", "New path; must not exist.")]


_SESSION_ID = msgspec.Meta(
    min_length=1,
    max_length=200,
    description="Only this session's transactions (the session of a mutation result).",
    extra=_brief("Only this session's."),
)


class _Request(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    pass


class ListAllowedDirectories(_Request, frozen=True):
    pass


class ReadFile(_Request, frozen=True):
    path: FilePath
    format: Annotated[
        Literal["text", "cells"],
        msgspec.Meta(
            description="cells: a notebook's (.ipynb) cells (index, id, cell_type, source, "
            "outputs in short); offset and limit then count cells.",
            extra=_brief("cells: .ipynb cells."),
        ),
    ] = "text"
    offset: Annotated[
        NonNegative | None,
        msgspec.Meta(
            description="The first line to return, from 0 (a byte, for binary files).",
            extra=_brief("First line, from 0."),
        ),
    ] = None
    limit: Annotated[
        Positive | None,
        msgspec.Meta(
            description="How many lines to return from offset (default 2000).",
            extra=_brief("Lines."),
        ),
    ] = None
    head: Annotated[
        Positive | None,
        msgspec.Meta(
            description="Return the first head lines (not with offset, limit or tail).",
            extra=_brief("First lines."),
        ),
    ] = None
    tail: Annotated[
        Positive | None,
        msgspec.Meta(
            description="Return the last tail lines (not with offset, limit or head).",
            extra=_brief("Last lines."),
        ),
    ] = None
    encoding: FileEncoding = None


class ListDirectory(_Request, frozen=True):
    path: FolderPath
    sort_by: Annotated[
        Literal["name", "size"],
        msgspec.Meta(
            description="Order of the entries: by name, or by size (largest first).",
            extra=_brief("Order."),
        ),
    ] = "name"


class GetFileInfo(_Request, frozen=True):
    path: AnyPath


class GitStatusRequest(_Request, frozen=True):
    path: (
        Annotated[
            str,
            _path(
                "A path inside the repository (default: the first allowed directory).",
                "A path in the repository.",
            ),
        ]
        | None
    ) = None


class HistoryRequest(_Request, frozen=True):
    path: (
        Annotated[str, _path("Only transactions that touched this path.", "Only this path's.")]
        | None
    ) = None
    transaction: (
        Annotated[
            int,
            msgspec.Meta(
                ge=-MAX_INT,
                le=MAX_INT,
                description="Only this transaction id.",
                extra=_brief("One, in detail."),
            ),
        ]
        | None
    ) = None
    limit: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=1000,
            description="At most this many transactions (fewer when they hold many "
            "mutations: a page is at most 64 KiB; truncated and next_before say when "
            "more are left).",
            extra=_brief("Page size."),
        ),
    ] = 50
    before: (
        Annotated[
            int,
            msgspec.Meta(
                ge=-MAX_INT,
                le=MAX_INT,
                description="Only transactions older than this id: next_before of the page before.",
                extra=_brief("A next_before."),
            ),
        ]
        | None
    ) = None
    mutations_offset: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            le=MAX_INT,
            description="With transaction: the first mutation to list "
            "(mutations_next_offset of the page before).",
            extra=_brief("A mutations_next_offset."),
        ),
    ] = 0
    diff: Annotated[
        bool,
        msgspec.Meta(
            description="With transaction: also return that transaction's diff (256 KiB "
            "a page), as a mutation result's diff would be without its cap.",
            extra=_brief("Its diff too."),
        ),
    ] = False
    diff_offset: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="Where the page of the diff starts (diff_next_offset).",
            extra=_brief("A diff_next_offset."),
        ),
    ] = 0
    session: Annotated[str, _SESSION_ID] | None = None
    checkpoint: (
        Annotated[
            int,
            msgspec.Meta(
                ge=-MAX_INT,
                le=MAX_INT,
                description="Only transactions after this checkpoint (its id, from the "
                "checkpoint tool).",
                extra=_brief("Only after this checkpoint."),
            ),
        ]
        | None
    ) = None
    sessions: Annotated[
        bool,
        msgspec.Meta(
            description="List sessions instead (newest first, at most limit; with session: "
            "that one): id, client, started, last activity, transactions, files changed.",
            extra=_brief("List sessions instead."),
        ),
    ] = False


class CheckpointRequest(_Request, frozen=True):
    label: (
        Annotated[
            str,
            msgspec.Meta(
                max_length=200,
                description="A name for the checkpoint (say, the turn it starts).",
                extra=_brief("A name for it."),
            ),
        ]
        | None
    ) = None


class Edit(_Request, frozen=True):
    old_text: Annotated[
        str,
        msgspec.Meta(
            description="Exact text to replace, as the edits before this one left the "
            "file; it must occur once (at least once with replace_all).",
            extra=_brief("Exact text; must match once."),
        ),
    ]
    new_text: Annotated[
        str,
        msgspec.Meta(
            description="The text that replaces old_text.", extra=_brief("Its replacement.")
        ),
    ]
    replace_all: Annotated[
        bool,
        msgspec.Meta(
            description="Replace every occurrence of old_text, not just one.",
            extra=_brief("Every occurrence."),
        ),
    ] = False


Edits = Annotated[
    list[Edit],
    msgspec.Meta(
        min_length=1,
        max_length=MAX_EDITS,
        description=f"Replacements, applied in order: each old_text is matched against "
        f"the text the edits before it produced (at most {MAX_EDITS}).",
        extra=_brief("Applied in order."),
    ),
]
MatchMode = Annotated[
    Literal["exact", "loose"],
    msgspec.Meta(
        description="How an old_text found nowhere is matched: exact refuses it and "
        "lists the closest places as candidates; loose edits the one place that differs "
        "only in whitespace, indentation, line endings or quote style (new_text "
        "re-indented to fit; the result lists it in loose_matches).",
        extra=_brief("loose: forgive spacing and quotes."),
    ),
]


# Each mutating tool's arguments are declared once, in an `...Args` struct: the tool's
# request adds the arguments of a whole call (expected_status_hash, dry_run) and
# the batch operation adds its `op` tag, so a tool and its operation cannot drift.
class WriteArgs(_Request, frozen=True):
    path: FilePath
    content: Content
    encoding: Encoding = None
    bom: Bom = None
    expected_hash: ExpectedHash = None
    on_stale: OnStaleArg = None


class EditArgs(_Request, frozen=True):
    path: FilePath
    edits: Edits
    encoding: FileEncoding = None
    expected_hash: ExpectedHash = None
    allow_rewrite: AllowRewrite = False
    match: MatchMode = "exact"
    on_stale: OnStaleArg = None


class PatchArgs(_Request, frozen=True):
    patch: PatchText = None
    patch_base64: PatchBase64 = None
    expected_hashes: ExpectedHashes = None
    on_stale: OnStaleArg = None


class MoveArgs(_Request, frozen=True):
    source: Source
    destination: Destination
    expected_hash: ExpectedHash = None


Recursive = Annotated[
    bool,
    msgspec.Meta(
        description="Delete a folder with everything in it (each file counts against the "
        "mutation budget); without it only an empty folder can be deleted.",
        extra=_brief("With its contents."),
    ),
]


class DeleteArgs(_Request, frozen=True):
    path: Annotated[str, _path("The file or folder to delete.", "File or folder.")]
    expected_hash: ExpectedHash = None
    recursive: Recursive = False


class MkdirArgs(_Request, frozen=True):
    path: Annotated[str, _path("The folder to create, with any missing parents.", "Folder.")]


class WriteFile(WriteArgs, frozen=True):
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


class EditFile(EditArgs, frozen=True):
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


class ApplyPatch(PatchArgs, frozen=True):
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


class MoveFile(MoveArgs, frozen=True):
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


class DeleteFile(DeleteArgs, frozen=True):
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


class CreateDirectory(MkdirArgs, frozen=True):
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


class WriteOp(WriteArgs, tag_field="op", tag="write", frozen=True):
    pass


class EditOp(EditArgs, tag_field="op", tag="edit", frozen=True):
    pass


class PatchOp(PatchArgs, tag_field="op", tag="patch", frozen=True):
    pass


class MoveOp(MoveArgs, tag_field="op", tag="move", frozen=True):
    pass


class DeleteOp(DeleteArgs, tag_field="op", tag="delete", frozen=True):
    pass


class MkdirOp(MkdirArgs, tag_field="op", tag="mkdir", frozen=True):
    pass


BatchOp = WriteOp | EditOp | PatchOp | MoveOp | DeleteOp | MkdirOp


#: The most cell operations one edit_notebook call applies.
MAX_CELL_OPERATIONS = 1000


class CellOperation(_Request, frozen=True):
    op: Annotated[
        Literal["replace", "insert", "delete"],
        msgspec.Meta(description="What to do at cell.", extra=_brief("Action.")),
    ]
    cell: Annotated[
        Annotated[int, msgspec.Meta(ge=0)]
        | Annotated[str, msgspec.Meta(min_length=1, max_length=64)],
        msgspec.Meta(
            description="A cell's index from 0, or its id; insert puts the new cell there "
            "(before that cell; the cell count appends).",
            extra=_brief("Index or id."),
        ),
    ]
    source: Annotated[
        str | None,
        msgspec.Meta(description="The cell's new text (replace, insert).", extra=_brief("Text.")),
    ] = None
    cell_type: Annotated[
        Literal["code", "markdown", "raw"] | None,
        msgspec.Meta(
            description="The cell's type (insert: code unless given).", extra=_brief("Type.")
        ),
    ] = None


class NotebookArgs(_Request, frozen=True):
    path: Annotated[str, _path("A Jupyter notebook (.ipynb).", "Notebook.")]
    operations: Annotated[
        list[CellOperation],
        msgspec.Meta(
            min_length=1,
            max_length=MAX_CELL_OPERATIONS,
            description="Applied in order, each to the cells the ones before it left.",
            extra=_brief("In order."),
        ),
    ]
    expected_hash: ExpectedHash = None


class EditNotebook(NotebookArgs, frozen=True):
    dry_run: DryRun = False


class NotebookOp(NotebookArgs, frozen=True):
    """edit_notebook's operation: not a batch operation."""


class CopyArgs(_Request, frozen=True):
    source: Annotated[str, _path("The file or folder to copy.", "File or folder.")]
    destination: Destination
    expected_hash: ExpectedHash = None


class CopyFile(CopyArgs, frozen=True):
    """copy_file's arguments: exactly its operation's."""


class CopyOp(CopyArgs, frozen=True):
    """copy_file's operation: not a batch operation."""


#: Every operation the pipeline runs: a batch's, and those of tools of their own.
Operation = BatchOp | NotebookOp | CopyOp


class Batch(_Request, frozen=True):
    operations: Annotated[
        list[BatchOp],
        msgspec.Meta(
            min_length=1,
            max_length=10_000,
            description="Operations applied in order, all or nothing: each is "
            "{op: write|edit|patch|move|delete|mkdir, ...that op's arguments}.",
            extra=_brief("Each {op: write|edit|patch|move|delete|mkdir, ...its tool's arguments}."),
        ),
    ]
    on_stale: Annotated[
        Literal["refuse", "merge"] | None,
        msgspec.Meta(
            description="on_stale of every write, edit and patch operation that does not "
            "give its own (see write_file); null: the server's --on-stale.",
            extra=_brief("Their default on_stale."),
        ),
    ] = None
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


class Undo(_Request, frozen=True):
    transaction: Annotated[
        int,
        msgspec.Meta(
            ge=-MAX_INT,
            le=MAX_INT,
            description="The committed transaction to undo (from a mutation result or history).",
            extra=_brief("Transaction id."),
            extra_json_schema={"minimum": 1},
        ),
    ]
    dry_run: DryRun = False


class Rewind(_Request, frozen=True):
    """Exactly one of checkpoint, after_transaction and session says what to rewind."""

    checkpoint: (
        Annotated[
            int,
            msgspec.Meta(
                ge=-MAX_INT,
                le=MAX_INT,
                description="Rewind what came after this checkpoint (from the checkpoint tool).",
                extra=_brief("After this checkpoint."),
                extra_json_schema={"minimum": 1},
            ),
        ]
        | None
    ) = None
    after_transaction: (
        Annotated[
            int,
            msgspec.Meta(
                ge=0,
                le=MAX_INT,
                description="Rewind the transactions after this one (0: all of them).",
                extra=_brief("After this transaction."),
            ),
        ]
        | None
    ) = None
    session: (
        Annotated[
            str,
            msgspec.Meta(
                min_length=1,
                max_length=200,
                description="Rewind everything this session did (a session id from history).",
                extra=_brief("All this session did."),
            ),
        ]
        | None
    ) = None
    sessions: Annotated[
        Literal["mine", "all"],
        msgspec.Meta(
            description="mine: only the calling session's transactions (with session: that "
            "session's); all: every session's in the span.",
            extra=_brief("Whose changes."),
        ),
    ] = "mine"
    paths: (
        Annotated[
            list[Annotated[str, _path("A file or folder.")]],
            msgspec.Meta(
                min_length=1,
                max_length=1000,
                description="Rewind only the changes to these files or folders.",
                extra=_brief("Only these paths."),
            ),
        ]
        | None
    ) = None
    on_conflict: Annotated[
        Literal["refuse", "skip"],
        msgspec.Meta(
            description="refuse: a conflict changes nothing (OCC_MISMATCH); skip: rewind the "
            "other files and list the conflicting ones in skipped.",
            extra=_brief("skip: leave conflicting files."),
        ),
    ] = "refuse"
    dry_run: DryRun = False


Globs = Annotated[
    list[str],
    msgspec.Meta(
        max_length=100,
        description="Paths to leave out, as .gitignore patterns relative to path "
        "(a name without '/' matches at any depth; '**' spans folders).",
        extra=_brief("Patterns to skip."),
    ),
]
RespectGitignore = Annotated[
    bool,
    msgspec.Meta(
        description="Leave out what .gitignore files (of path and above) ignore.",
        extra=_brief("Skip ignored files."),
    ),
]


class SearchFiles(_Request, frozen=True):
    path: Annotated[str, _path("The folder to search in.", "Folder.")]
    pattern: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            description="Which files, as a glob: '*.py' matches names at any depth, "
            "'src/**/*.py' paths relative to path.",
            extra=_brief("Glob of the files."),
        ),
    ] = "*"
    content: Annotated[
        Annotated[str, msgspec.Meta(min_length=1)] | None,
        msgspec.Meta(
            description="Search inside the files for this text (or regular expression, "
            "with regex), matched within one line; without it, only names are matched.",
            extra=_brief("Text to find."),
        ),
    ] = None
    regex: Annotated[
        bool,
        msgspec.Meta(
            description="content is a regular expression (RE2 syntax: Python's without "
            "backreferences and lookaround), not text.",
            extra=_brief("content is a regex."),
        ),
    ] = False
    case_sensitive: Annotated[
        bool,
        msgspec.Meta(
            description="Whether content matches case exactly.", extra=_brief("Match case.")
        ),
    ] = True
    exclude: Globs = []
    respect_gitignore: RespectGitignore = True
    max_results: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=10_000,
            description="At most this many files (name search) or matching lines "
            "(content search); truncated says when more were left.",
            extra=_brief("Most results."),
        ),
    ] = 200
    context: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            le=20,
            description="Lines of context before and after each matching line.",
            extra=_brief("Lines around a match."),
        ),
    ] = 0


class DirectoryTree(_Request, frozen=True):
    path: Annotated[str, _path("The folder at the top of the tree.", "Top folder.")]
    max_depth: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=MAX_TREE_DEPTH,
            description="How many levels to descend (1: the folder's own entries); a "
            "folder whose entries lie deeper says truncated: true.",
            extra=_brief("Levels."),
        ),
    ] = TREE_DEPTH
    exclude: Globs = []
    respect_gitignore: RespectGitignore = True
    max_entries: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=100_000,
            description="At most this many entries; truncated says when more were left.",
            extra=_brief("Most entries."),
        ),
    ] = 2000


class ReadMultipleFiles(_Request, frozen=True):
    paths: Annotated[
        list[Annotated[str, _path("A file to read.")]],
        msgspec.Meta(
            min_length=1,
            max_length=100,
            description="The files to read; one that fails does not fail the others.",
            extra=_brief("Files."),
        ),
    ]


class ReadMediaFile(_Request, frozen=True):
    path: Annotated[str, _path("An image or audio file.", "Image or audio file.")]


R = TypeVar("R", bound=msgspec.Struct)


def decode_request(kind: type[R], arguments: Any) -> R:
    """Convert a client's arguments into a request, or raise VALIDATION.

    >>> decode_request(ReadFile, {"path": "a.txt", "limit": 5}).limit
    5
    """
    if arguments is None:
        arguments = {}
    reject_surrogates(arguments)
    try:
        return msgspec.convert(arguments, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise LedgerError(
            Code.VALIDATION,
            f"Invalid arguments: {exc}",
            details={"reason": str(exc)},
        ) from exc
