"""Pure planning: (request, current bytes) -> a change with before, after and diff.

Nothing here touches a disk; the transaction module applies what is planned.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ..journal import content_hash as hash_of
from .changes import ABSENT, NEW_DIR_MODE, NEW_FILE_MODE, Change, Entry
from .edits import (
    MAX_EDIT_SEARCH,
    MAX_EDITS,
    LooseMatch,
    Match,
    TextEdit,
    apply_edits,
    charge_edit_search,
    check_edit_text,
    edit_search,
)
from .effects import Tree
from .encodings import found_form, stored_text
from .errors import Code, LedgerError, not_a_folder
from .notebooks import CellEdit, edit_cells

__all__ = [
    "MAX_EDITS",
    "MAX_EDIT_SEARCH",
    "Plan",
    "Planner",
    "TextEdit",
    "Written",
    "apply_edits",
    "charge_edit_search",
    "check_edit_text",
    "decode_content",
    "edit_search",
    "grows",
]


class Written(msgspec.Struct, frozen=True, kw_only=True):
    """What a write stores: bytes as given (base64), or text kept in the file's
    encoding unless `encoding` (a codec name) or `bom` say otherwise."""

    data: bytes | None = None
    text: str = ""
    encoding: str | None = None
    bom: bool | None = None
    #: What starts the fields an error names (`operations[0].`).
    prefix: str = ""


def decode_content(content: str, *, path: str, field: str = "content") -> bytes:
    """The bytes a base64 write carries.

    >>> decode_content("aGk=", path="x")
    b'hi'
    """
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise LedgerError(
            Code.VALIDATION,
            "content is not valid base64.",
            path=path,
            details={"field": field},
        ) from exc


def grows(edits: Sequence[TextEdit]) -> bool:
    """Whether edits may grow their file many times over (a replace_all with a
    longer new text): planning them is then long whatever the file's size.

    >>> grows([TextEdit("a", "bb", replace_all=True)]), grows([TextEdit("a", "bb")])
    (True, False)
    """
    return any(e.replace_all and len(e.new_text) > len(e.old_text) for e in edits)


class Plan:
    """Changes planned in order over `state`, a virtual view of the files they touch:
    each is applied to it as it is planned, so the next sees what those before did."""

    def __init__(self, state: Tree, label: Callable[[str], str]) -> None:
        self.state = state
        self.label = label
        self.changes: list[Change] = []

    def _plan(self, change: Change) -> None:
        self.changes.append(change)
        self.state.apply(change)


class Planner(Plan):
    """Plans operations in order against a virtual view of the files they touch.

    `state` is a `Tree` over the targets as they were when the transaction's
    locks were taken; each planned change is applied to it, so a later operation
    of the same batch sees what an earlier one did, on every path (a file inside
    a folder the batch moved included).
    """

    def __init__(self, state: Tree, label: Callable[[str], str], max_size: int) -> None:
        super().__init__(state, label)
        #: The most bytes a planned file may hold (the engine's max_file_size).
        self.max_size = max_size
        #: What the call's edits may still search (MAX_EDIT_SEARCH for them all).
        self.search_left = MAX_EDIT_SEARCH

    def _need_parent(self, path: str) -> None:
        """Refuse a path whose folder the batch moved or removed (NOT_FOUND)."""
        if not self.state.reshaped():
            return  # every parent was checked when the path was resolved
        parent = os.path.dirname(path)
        if not self.state.get(parent).is_dir:
            raise LedgerError(
                Code.NOT_FOUND,
                f"{self.label(parent)} is not a folder once the earlier operations are made.",
                path=path,
                details={"reason": "no_parent_folder"},
            )

    def write(self, path: str, content: Written, *, op: str = "write") -> None:
        """Plan a file's new content: bytes as given, or text (engine/encodings.py's
        `stored_text`: the file's encoding, BOM and one line end kept)."""
        current = self._file_or_absent(path)
        self.refuse_unread(path, current)
        data = content.data
        if data is None:
            data = stored_text(
                current.data,
                content.text,
                content.encoding,
                content.bom,
                self.label(path),
                content.prefix,
            )
        self._put(op, path, current, data, hash_of(data))

    def edit(
        self,
        path: str,
        edits: list[TextEdit],
        allow_rewrite: bool,
        match: Match = "exact",
        field: str = "edits",
        encoding: str | None = None,
    ) -> None:
        """Plan edits of a file's text, in its encoding (`encoding` names it, else it is
        found), every byte outside the edited text kept."""
        current = self._existing_file(path)
        assert current.data is not None
        label = self.label(path)
        form, view = found_form(current.data, encoding, label)
        size = len(current.data)
        left = charge_edit_search(path, label, len(edits), size, self.search_left, field)
        self.search_left = left

        def grown(more: int) -> None:
            # Text the edits grew is searched too: counted as it is searched.
            self.search_left = charge_edit_search(path, label, 1, more, self.search_left, field)

        edited = apply_edits(
            label,
            view,
            edits,
            allow_rewrite=allow_rewrite,
            match=match,
            limit=self.max_size,
            charge=grown,
            field=field,
        )
        data = form.stored(edited.data, label, field)
        self._put(
            "edit",
            path,
            current,
            data,
            hash_of(data),
            label=label,
            # Named as the result's files are: by full path.
            loose=tuple(msgspec.structs.replace(m, path=path) for m in edited.loose),
        )

    def edit_notebook(self, path: str, operations: Sequence[CellEdit]) -> None:
        """Apply cell operations to the notebook at `path` (engine/notebooks.py)."""
        current = self._existing_file(path)
        assert current.data is not None
        label = self.label(path)
        edited = edit_cells(path, label, current.data, operations)
        self._put("edit_notebook", path, current, edited, hash_of(edited), label=label)

    def copy(self, source: str, destination: str) -> None:
        """Plan a copy of the file or link at `source` to `destination`, which must
        not exist (VALIDATION, as move_file refuses it); a link is copied as a link."""
        current = self._existing_file(source, links=True)
        assert current.data is not None
        self.refuse_existing(destination, "copy_file")
        # A file keeps its permissions, as `cp` keeps them, but not set-id bits.
        mode = current.mode if current.is_link else (current.mode or NEW_FILE_MODE) & 0o777
        self._put("copy", destination, ABSENT, current.data, hash_of(current.data), mode=mode)

    def refuse_existing(self, destination: str, tool: str) -> None:
        """VALIDATION when something is at `destination`: moves and copies never overwrite."""
        if self.state.get(destination).exists:
            raise LedgerError(
                Code.VALIDATION,
                f"{self.label(destination)} already exists; {tool} never overwrites.",
                path=destination,
                details={"field": "destination", "reason": "destination_exists"},
            )

    def replace(
        self,
        path: str,
        data: bytes | None,
        op: str,
        *,
        mode: int | None = None,
        regions: Sequence[tuple[int, int, int, int]] | None = None,
        loose: tuple[LooseMatch, ...] = (),
        merged_from: str | None = None,
    ) -> None:
        """Set a file's (or link's) new bytes as computed elsewhere (a patch); None deletes it.

        A `mode` of LINK_MODE makes `data` a link's target; without a mode the
        path keeps its type. `regions` are the line spans outside which the
        bytes did not change (see `Change.regions`); `loose` and `merged_from`
        see `Change` (an edit planned elsewhere, then merged).
        """
        current = self._file_or_absent(path, links=True)
        if data is None:
            self.delete(path, op=op)
            return
        spans = tuple(regions) if regions is not None else None
        self._put(
            op,
            path,
            current,
            data,
            hash_of(data),
            mode=mode,
            regions=spans,
            loose=loose,
            merged_from=merged_from,
        )

    def remove_folder(self, path: str) -> None:
        """Plan the removal of a folder the changes planned so far leave empty."""
        current = self.state.get(path)
        assert current.is_dir
        self._plan(
            Change(
                op="rmdir", path=path, label=self.label(path), kind="dir", before_mode=current.mode
            )
        )

    def move(self, source: str, destination: str) -> None:
        current = self.state.get(source)
        if not current.exists:
            raise LedgerError(Code.NOT_FOUND, f"{self.label(source)} does not exist.", path=source)
        self.refuse_unread(source, current)
        if current.is_dir and destination.startswith(source.rstrip(os.sep) + os.sep):
            raise LedgerError(
                Code.VALIDATION,
                f"{self.label(source)} cannot be moved into itself.",
                path=destination,
                details={"field": "destination", "reason": "inside_source"},
            )
        self._need_parent(destination)
        self.refuse_existing(destination, "move_file")
        self._plan(
            Change(
                op="move",
                path=source,
                label=self.label(source),
                kind="dir" if current.is_dir else "file",
                destination=destination,
                destination_label=self.label(destination),
                before=current.data,
                after=current.data,
                before_hash=current.hash,
                after_hash=current.hash,
                before_mode=current.mode,
                after_mode=current.mode,
            )
        )

    def delete(self, path: str, *, op: str = "delete") -> None:
        # Paths to delete are resolved without following a last link: a link
        # here is the entry to delete (its target text is its before image).
        # A file over the size cap is known by its hash alone (not kept).
        current = self._file_or_absent(path, links=True)
        if not current.exists:
            raise LedgerError(Code.NOT_FOUND, f"{self.label(path)} does not exist.", path=path)
        self._plan(
            Change(
                op=op,
                path=path,
                label=self.label(path),
                before=current.data,
                before_hash=current.hash,
                before_mode=current.mode,
            )
        )

    def mkdir(self, path: str) -> bool:
        """Plan a folder; False when it already exists (nothing to do)."""
        current = self.state.get(path)
        if current.is_dir:
            return False
        if current.exists:
            raise not_a_folder(path, self.label(path))
        self._need_parent(path)
        self._plan(
            Change(
                op="mkdir", path=path, label=self.label(path), kind="dir", after_mode=NEW_DIR_MODE
            )
        )
        return True

    def _put(
        self,
        op: str,
        path: str,
        current: Entry,
        data: bytes,
        digest: str,
        *,
        mode: int | None = None,
        regions: tuple[tuple[int, int, int, int], ...] | None = None,
        label: str | None = None,
        loose: tuple[LooseMatch, ...] = (),
        merged_from: str | None = None,
    ) -> None:
        new_mode = mode if mode is not None else current.mode or NEW_FILE_MODE
        if data == current.data and new_mode == current.mode:
            return  # nothing would change: no transaction, no budget
        if len(data) > self.max_size:
            raise LedgerError(
                Code.VALIDATION,
                f"{self.label(path)} would be {len(data)} bytes, over the limit of "
                f"{self.max_size} bytes.",
                path=path,
                details={"reason": "file_too_large", "size": len(data), "limit": self.max_size},
            )
        self._need_parent(path)
        self._plan(
            Change(
                op=op,
                path=path,
                label=self.label(path) if label is None else label,
                before=current.data,
                after=data,
                before_hash=current.hash,
                after_hash=digest,
                before_mode=current.mode,
                after_mode=new_mode,
                regions=regions,
                loose=loose,
                merged_from=merged_from,
            )
        )

    def _file_or_absent(self, path: str, *, links: bool = False) -> Entry:
        current = self.state.get(path)
        if current.is_dir:
            raise LedgerError(
                Code.VALIDATION,
                f"{self.label(path)} is a folder, not a file.",
                path=path,
                details={"reason": "is_a_folder"},
            )
        if current.is_link and not links:
            # Paths were resolved through their links: one here was swapped in since.
            raise LedgerError(
                Code.FILE_POLICY_DENIED,
                f"{self.label(path)} became a symbolic link while the call ran.",
                path=path,
                details={"reason": "symlink"},
            )
        return current

    def _existing_file(self, path: str, *, links: bool = False) -> Entry:
        current = self._file_or_absent(path, links=links)
        if current.data is None:
            self.refuse_unread(path, current)
            raise LedgerError(Code.NOT_FOUND, f"{self.label(path)} does not exist.", path=path)
        return current

    def refuse_unread(self, path: str, current: Entry) -> None:
        """Refuse to act on a file loaded as its hash alone (over `max_file_size`) but
        to delete it: no other change can be made, or undone, without its bytes."""
        if current.hash is not None and current.data is None and not current.is_dir:
            raise LedgerError(
                Code.VALIDATION,
                f"{self.label(path)} is over max_file_size; only a delete can act on it.",
                path=path,
                details={"reason": "file_too_large"},
            )


class Step(msgspec.Struct, kw_only=True):
    """One operation, resolved and ready to plan; no locks held yet.

    `paths` are every path to lock and load, `checks` the (path, expected hash)
    pairs OCC checks, `new_folders` the missing parents to make before
    `plan(planner, *args)` runs (a Planner method, or a function of one).
    """

    paths: list[str]
    checks: list[tuple[str, str | None]]
    plan: Callable[..., None]
    args: tuple[Any, ...] = ()
    new_folders: list[str] = []
    #: What the step charges the mutation budget: 1, or the files it changes (a
    #: folder delete, a patch).
    weight: int = 1
    #: How many times planning scans the file at `paths[0]` (an edit: one per old_text).
    scans: int = 0
    #: Whether planning is long whatever the files hold (a patch with a big delta).
    long: bool = False
    #: The files the step deletes (one over `max_file_size` loads as its hash
    #: alone, see `unkept`).
    deletes: list[str] = []
    #: Whether a stale expected hash of the step is merged (on_stale: merge;
    #: engine/stale.py) rather than refused.
    merge: bool = False
    #: Whether an edit may replace most of the file (else REWRITE_BLOCKED), for
    #: the rewrite guard of a merged edit.
    allow_rewrite: bool = True
    #: What its fields are named under: ``operations[i].`` in a batch, else "".
    prefix: str = ""
