"""Typed requests for every tool, decoded once from a client's arguments.

Unknown or mistyped arguments are VALIDATION envelopes whose message names the
field by path (`at $.edits[0].old_text`), straight from msgspec.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

import msgspec

from .errors import Code, LedgerError

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

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[int, msgspec.Meta(ge=1)]


class _Request(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    pass


class ListAllowedDirectories(_Request, frozen=True):
    pass


class ReadFile(_Request, frozen=True):
    path: str
    offset: NonNegative | None = None
    limit: Positive | None = None


class ListDirectory(_Request, frozen=True):
    path: str


class GetFileInfo(_Request, frozen=True):
    path: str


class GitStatusRequest(_Request, frozen=True):
    path: str | None = None


class HistoryRequest(_Request, frozen=True):
    path: str | None = None
    transaction: int | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 50


class Edit(_Request, frozen=True):
    old_text: str
    new_text: str


class WriteFile(_Request, frozen=True):
    path: str
    content: str
    encoding: Literal["utf-8", "base64"] = "utf-8"
    expected_hash: str | None = None
    expected_status_hash: str | None = None
    dry_run: bool = False


class EditFile(_Request, frozen=True):
    path: str
    edits: Annotated[list[Edit], msgspec.Meta(min_length=1)]
    expected_hash: str | None = None
    allow_rewrite: bool = False
    expected_status_hash: str | None = None
    dry_run: bool = False


class ApplyPatch(_Request, frozen=True):
    patch: str
    expected_hashes: dict[str, str] | None = None
    expected_status_hash: str | None = None
    dry_run: bool = False


class MoveFile(_Request, frozen=True):
    source: str
    destination: str
    expected_hash: str | None = None
    expected_status_hash: str | None = None
    dry_run: bool = False


class DeleteFile(_Request, frozen=True):
    path: str
    expected_hash: str | None = None
    expected_status_hash: str | None = None
    dry_run: bool = False


class CreateDirectory(_Request, frozen=True):
    path: str
    expected_status_hash: str | None = None
    dry_run: bool = False


# Operations inside a batch: the same arguments, tagged by `op`.
class _Op(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True, tag_field="op"):
    pass


class WriteOp(_Op, tag="write", frozen=True):
    path: str
    content: str
    encoding: Literal["utf-8", "base64"] = "utf-8"
    expected_hash: str | None = None


class EditOp(_Op, tag="edit", frozen=True):
    path: str
    edits: Annotated[list[Edit], msgspec.Meta(min_length=1)]
    expected_hash: str | None = None
    allow_rewrite: bool = False


class PatchOp(_Op, tag="patch", frozen=True):
    patch: str
    expected_hashes: dict[str, str] | None = None


class MoveOp(_Op, tag="move", frozen=True):
    source: str
    destination: str
    expected_hash: str | None = None


class DeleteOp(_Op, tag="delete", frozen=True):
    path: str
    expected_hash: str | None = None


class MkdirOp(_Op, tag="mkdir", frozen=True):
    path: str


BatchOp = WriteOp | EditOp | PatchOp | MoveOp | DeleteOp | MkdirOp


class Batch(_Request, frozen=True):
    operations: Annotated[list[BatchOp], msgspec.Meta(min_length=1, max_length=10_000)]
    expected_status_hash: str | None = None
    dry_run: bool = False


class Undo(_Request, frozen=True):
    transaction: int
    dry_run: bool = False


R = TypeVar("R", bound=msgspec.Struct)


def decode_request(kind: type[R], arguments: Any) -> R:
    """Convert a client's arguments into a request, or raise VALIDATION.

    >>> decode_request(ReadFile, {"path": "a.txt", "limit": 5}).limit
    5
    """
    if arguments is None:
        arguments = {}
    try:
        return msgspec.convert(arguments, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise LedgerError(
            Code.VALIDATION,
            f"Invalid arguments: {exc}",
            details={"reason": str(exc)},
        ) from exc
