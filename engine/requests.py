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

from .errors import Code, LedgerError
from .names import reject_surrogates

__all__ = [
    "ApplyPatch",
    "Batch",
    "BatchOp",
    "CreateDirectory",
    "DeleteFile",
    "Edit",
    "EditFile",
    "GetFileInfo",
    "GitStatusRequest",
    "HistoryRequest",
    "ListAllowedDirectories",
    "ListDirectory",
    "MoveFile",
    "ReadFile",
    "Undo",
    "WriteFile",
    "decode_request",
]

_PATH_SCHEMA = {"minLength": 1, "maxLength": 4096}
_HASH_SCHEMA = {"pattern": "^blake3:[0-9a-f]{64}$"}


def _path(description: str) -> msgspec.Meta:
    return msgspec.Meta(description=description, extra_json_schema=_PATH_SCHEMA)


AnyPath = Annotated[str, _path("A path: absolute, or relative to the first allowed directory.")]
FilePath = Annotated[str, _path("A file: absolute, or relative to the first allowed directory.")]
FolderPath = Annotated[
    str, _path("A folder: absolute, or relative to the first allowed directory.")
]
ExpectedHash = Annotated[
    str | None,
    msgspec.Meta(
        description="The content_hash last read; the change is refused (OCC_MISMATCH) "
        "if the file changed since.",
        extra_json_schema=_HASH_SCHEMA,
    ),
]
ExpectedStatusHash = Annotated[
    str | None,
    msgspec.Meta(
        description="The status_hash from git_status; the change is refused (STALE_GIT) "
        "if the repository's status changed since."
    ),
]
DryRun = Annotated[
    bool, msgspec.Meta(description="Preview: return the diff and hashes, change nothing.")
]
Content = Annotated[
    str,
    msgspec.Meta(description="The whole new content: text, or base64 when encoding is base64."),
]
Encoding = Annotated[
    Literal["utf-8", "base64"], msgspec.Meta(description="How content is encoded.")
]
AllowRewrite = Annotated[
    bool,
    msgspec.Meta(description="Allow edits that replace most of the file (else REWRITE_BLOCKED)."),
]
PatchText = Annotated[
    str,
    msgspec.Meta(description="A unified diff (git diff or diff -u), of one or many files."),
]
ExpectedHashes = Annotated[
    dict[str, str] | None,
    msgspec.Meta(
        description="The content_hash last read of each file the patch changes, by the "
        "path the patch names (or its absolute path).",
        extra_json_schema={"additionalProperties": _HASH_SCHEMA},
    ),
]
Source = Annotated[str, _path("The file or folder to move.")]
Destination = Annotated[str, _path("Where it goes; must not exist.")]


#: The largest integer an argument may hold: what SQLite and the OS can store (a
#: larger one is VALIDATION, not an overflow deep inside a call).
MAX_INT = 2**63 - 1


class _Request(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    pass


class ListAllowedDirectories(_Request, frozen=True):
    pass


class ReadFile(_Request, frozen=True):
    path: FilePath
    offset: (
        Annotated[
            int, msgspec.Meta(ge=0, le=MAX_INT, description="The first line to return, from 0.")
        ]
        | None
    ) = None
    limit: (
        Annotated[
            int,
            msgspec.Meta(ge=1, le=MAX_INT, description="How many lines to return from offset."),
        ]
        | None
    ) = None


class ListDirectory(_Request, frozen=True):
    path: FolderPath


class GetFileInfo(_Request, frozen=True):
    path: AnyPath


class GitStatusRequest(_Request, frozen=True):
    path: (
        Annotated[
            str,
            _path("A path inside the repository (default: the first allowed directory)."),
        ]
        | None
    ) = None


class HistoryRequest(_Request, frozen=True):
    path: Annotated[str, _path("Only transactions that touched this path.")] | None = None
    transaction: (
        Annotated[
            int, msgspec.Meta(ge=-MAX_INT, le=MAX_INT, description="Only this transaction id.")
        ]
        | None
    ) = None
    limit: Annotated[
        int, msgspec.Meta(ge=1, le=1000, description="At most this many transactions.")
    ] = 50


class Edit(_Request, frozen=True):
    old_text: Annotated[
        str, msgspec.Meta(description="Exact text to replace; it must occur once in the file.")
    ]
    new_text: Annotated[str, msgspec.Meta(description="The text that replaces old_text.")]


Edits = Annotated[
    list[Edit],
    msgspec.Meta(min_length=1, description="Replacements, applied in order."),
]


class WriteFile(_Request, frozen=True):
    path: FilePath
    content: Content
    encoding: Encoding = "utf-8"
    expected_hash: ExpectedHash = None
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


class EditFile(_Request, frozen=True):
    path: FilePath
    edits: Edits
    expected_hash: ExpectedHash = None
    allow_rewrite: AllowRewrite = False
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


class ApplyPatch(_Request, frozen=True):
    patch: PatchText
    expected_hashes: ExpectedHashes = None
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


class MoveFile(_Request, frozen=True):
    source: Source
    destination: Destination
    expected_hash: ExpectedHash = None
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


class DeleteFile(_Request, frozen=True):
    path: FilePath
    expected_hash: ExpectedHash = None
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


class CreateDirectory(_Request, frozen=True):
    path: Annotated[str, _path("The folder to create, with any missing parents.")]
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


# Operations inside a batch: the same arguments, tagged by `op`.
class _Op(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True, tag_field="op"):
    pass


class WriteOp(_Op, tag="write", frozen=True):
    path: FilePath
    content: Content
    encoding: Encoding = "utf-8"
    expected_hash: ExpectedHash = None


class EditOp(_Op, tag="edit", frozen=True):
    path: FilePath
    edits: Edits
    expected_hash: ExpectedHash = None
    allow_rewrite: AllowRewrite = False


class PatchOp(_Op, tag="patch", frozen=True):
    patch: PatchText
    expected_hashes: ExpectedHashes = None


class MoveOp(_Op, tag="move", frozen=True):
    source: Source
    destination: Destination
    expected_hash: ExpectedHash = None


class DeleteOp(_Op, tag="delete", frozen=True):
    path: FilePath
    expected_hash: ExpectedHash = None


class MkdirOp(_Op, tag="mkdir", frozen=True):
    path: Annotated[str, _path("The folder to create, with any missing parents.")]


BatchOp = WriteOp | EditOp | PatchOp | MoveOp | DeleteOp | MkdirOp


class Batch(_Request, frozen=True):
    operations: Annotated[
        list[BatchOp],
        msgspec.Meta(
            min_length=1,
            max_length=10_000,
            description="Operations applied in order, all or nothing: each is "
            "{op: write|edit|patch|move|delete|mkdir, ...that op's arguments}.",
        ),
    ]
    expected_status_hash: ExpectedStatusHash = None
    dry_run: DryRun = False


class Undo(_Request, frozen=True):
    transaction: Annotated[
        int,
        msgspec.Meta(
            ge=-MAX_INT,
            le=MAX_INT,
            description="The committed transaction to undo (from a mutation result or history).",
            extra_json_schema={"minimum": 1},
        ),
    ]
    dry_run: DryRun = False


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
