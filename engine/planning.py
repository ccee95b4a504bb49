"""Pure planning: (request, current bytes) -> a change with before, after and diff.

Nothing here touches a disk; the transaction module applies what is planned.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ..journal import content_hash as hash_of
from .bytescan import find
from .changes import NEW_DIR_MODE, NEW_FILE_MODE, Change, Entry
from .diffs import is_text
from .effects import Tree
from .errors import Code, LedgerError, not_a_folder
from .rewrite import check_rewrite

__all__ = [
    "MAX_EDITS",
    "MAX_EDIT_SEARCH",
    "Planner",
    "apply_edits",
    "charge_edit_search",
    "check_edit_text",
    "decode_content",
    "edit_search",
    "keep_line_endings",
]

#: The most edits one edit_file (or one edit of a batch) takes. Agents send a
#: handful; a change of more places belongs in apply_patch or write_file.
MAX_EDITS = 1000
#: The most bytes the edits of one call may search, all its files together: each
#: old_text is looked for in its whole file (it must occur exactly once), so an
#: edit searches its edits times the file's size. 1 GiB is 1,000 edits of a 1 MiB
#: file, 20 of a 50 MiB one, and a few seconds of one core on the worst text
#: (docs/security.md, section 7).
MAX_EDIT_SEARCH = 1 << 30
#: An ambiguous old_text's error lists the lines of at most this many matches
#: and counts at most MAX_COUNTED.
MAX_LISTED = 100
MAX_COUNTED = 10_000


def decode_content(content: str, encoding: str, *, path: str) -> bytes:
    """The bytes a write carries, from text or base64.

    >>> decode_content("aGk=", "base64", path="x")
    b'hi'
    """
    if encoding == "base64":
        try:
            return base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise LedgerError(
                Code.VALIDATION,
                "content is not valid base64.",
                path=path,
                details={"field": "content"},
            ) from exc
    return content.encode("utf-8", errors="strict")


def keep_line_endings(original: bytes | None, new: bytes) -> bytes:
    """Give new text the original's CRLF line endings when it uses plain LF.

    >>> keep_line_endings(b"a\\r\\nb\\r\\n", b"a\\nc\\n")
    b'a\\r\\nc\\r\\n'
    >>> keep_line_endings(b"a\\nb\\n", b"a\\r\\nc\\n")
    b'a\\r\\nc\\n'
    """
    if original is None or not _is_crlf(original) or b"\r" in new:
        return new
    return new.replace(b"\n", b"\r\n")


def _is_crlf(data: bytes) -> bool:
    # memchr for a CR first: ~15x faster than the two counts on an LF-only file.
    if b"\r" not in data:
        return False
    crlf = data.count(b"\r\n")
    return crlf > 0 and crlf == data.count(b"\n")


def edit_search(edits: int, size: int) -> int:
    """The bytes `edits` edits of a file of `size` bytes search: each scans it once.

    >>> edit_search(3, 100)
    300
    """
    return edits * size


def charge_edit_search(path: str, label: str, edits: int, size: int, left: int) -> int:
    """What the call may still search once `edits` edits of a `size`-byte file have,
    of the `left` bytes it had; VALIDATION naming `edits` when that is over `left`."""
    needed = edit_search(edits, size)
    if needed <= left:
        return left - needed
    most = left // max(size, 1)
    raise LedgerError(
        Code.VALIDATION,
        f"{edits} edits of {label} ({size} bytes) would search {needed} bytes, over "
        f"what one call may search ({MAX_EDIT_SEARCH} bytes in all); send at most "
        f"{most} edits of this file in this call, or the change as one apply_patch.",
        path=path,
        details={
            "field": "edits",
            "reason": "edit_search_too_large",
            "edits": edits,
            "size": size,
            "max_edits": most,
        },
    )


def check_edit_text(edits: list[tuple[str, str]], limit: int) -> None:
    """Refuse edits whose texts together hold more than a file may (`limit` bytes).

    Raises VALIDATION naming `edits` (`edits_too_large`), before any file is read.

    >>> check_edit_text([("a", "bc")], 3)
    """
    total = 0
    for old, new in edits:
        # surrogatepass: a lone surrogate is refused later, naming its field.
        total += len(old.encode("utf-8", "surrogatepass"))
        total += len(new.encode("utf-8", "surrogatepass"))
        if total > limit:
            raise LedgerError(
                Code.VALIDATION,
                f"The edits' old and new texts hold more than {limit} bytes, the most "
                "a file may hold; write the file whole with write_file.",
                details={"field": "edits", "reason": "edits_too_large", "limit": limit},
            )


def apply_edits(
    label: str, original: bytes, edits: list[tuple[str, str]], *, allow_rewrite: bool
) -> bytes:
    """Apply exact old/new text pairs; each old text must match exactly once.

    Raises VALIDATION (binary file, an old text found zero or several times, with
    line numbers; empty or overlapping old texts) and REWRITE_BLOCKED.

    The search runs on the UTF-8 bytes: a valid UTF-8 needle found in valid UTF-8
    text always starts on a character, so no decoded copy of the file is needed.
    Each old text is looked for in one scan of the file (in windows), the spans
    are sorted, and the new bytes are joined once.

    >>> apply_edits("f", b"a\\nb\\nc\\n", [("b", "B")], allow_rewrite=False)
    b'a\\nB\\nc\\n'
    """
    if not is_text(original):
        raise LedgerError(
            Code.VALIDATION,
            f"{label} is not UTF-8 text; edit_file only changes text. Use write_file.",
            path=label,
            details={"reason": "binary_file"},
        )
    crlf = _is_crlf(original)
    spans: list[tuple[int, int, bytes]] = []
    for index, (old, new) in enumerate(edits):
        if crlf and "\r" not in old:
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        needle = _encoded(label, old, index, "old_text")
        spans.append(
            (*_locate(label, original, needle, index), _encoded(label, new, index, "new_text"))
        )
    spans.sort()
    for (_, end, _), (start, _, _) in itertools.pairwise(spans):
        if start < end:
            raise LedgerError(
                Code.VALIDATION,
                f"Two edits of {label} overlap; merge them into one.",
                path=label,
                details={"reason": "overlapping_edits"},
            )
    if not allow_rewrite:
        check_rewrite(label, original, [(start, end) for start, end, _ in spans])
    pieces: list[bytes] = []
    cursor = 0
    for start, end, new_bytes in spans:
        pieces.append(original[cursor:start])
        pieces.append(new_bytes)
        cursor = end
    pieces.append(original[cursor:])
    return b"".join(pieces)


def _encoded(label: str, text: str, index: int, name: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        field = f"edits[{index}].{name}"
        raise LedgerError(
            Code.VALIDATION,
            f"{field} is not valid Unicode text (a lone surrogate).",
            path=label,
            details={"field": field},
        ) from None


def _locate(label: str, data: bytes, old: bytes, index: int) -> tuple[int, int]:
    field = f"edits[{index}].old_text"
    if not old:
        raise LedgerError(
            Code.VALIDATION,
            f"{field} is empty; name the text to replace.",
            path=label,
            details={"field": field},
        )
    first = find(data, old, 0)
    if first < 0:
        raise LedgerError(
            Code.VALIDATION,
            f"{field} was not found in {label}.",
            path=label,
            details={"field": field, "matches": 0, "lines": []},
            suggestion="read the file again and copy old_text exactly, whitespace included",
        )
    second = find(data, old, first + 1)
    if second >= 0:
        count, lines = _matches(data, old, first)
        more = "+" if count >= MAX_COUNTED else ""
        raise LedgerError(
            Code.VALIDATION,
            f"{field} matches {count}{more} times in {label} (lines "
            f"{', '.join(map(str, lines[:10]))}); it must match exactly once.",
            path=label,
            details={"field": field, "matches": count, "lines": lines},
            suggestion="add surrounding lines to old_text until it is unique",
        )
    return first, first + len(old)


def _matches(data: bytes, old: bytes, first: int) -> tuple[int, list[int]]:
    """How often `old` occurs from `first` on (at most MAX_COUNTED times), and the
    lines of its first MAX_LISTED occurrences, counted from one to the next."""
    lines: list[int] = []
    count, line, counted_to, start = 0, 1, 0, first
    while start >= 0 and count < MAX_COUNTED:
        count += 1
        if len(lines) < MAX_LISTED:
            line += data.count(b"\n", counted_to, start)
            counted_to = start
            lines.append(line)
        start = find(data, old, start + 1)
    return count, lines


class Planner:
    """Plans operations in order against a virtual view of the files they touch.

    `state` is a `Tree` over the targets as they were when the transaction's
    locks were taken; each planned change is applied to it, so a later operation
    of the same batch sees what an earlier one did, on every path (a file inside
    a folder the batch moved included).
    """

    def __init__(self, state: Tree, label: Callable[[str], str], max_size: int) -> None:
        self.state = state
        self.label = label
        #: The most bytes a planned file may hold (the engine's max_file_size).
        self.max_size = max_size
        #: What the call's edits may still search (MAX_EDIT_SEARCH for them all).
        self.search_left = MAX_EDIT_SEARCH
        self.changes: list[Change] = []

    def _plan(self, change: Change) -> None:
        self.changes.append(change)
        self.state.apply(change)

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

    def write(self, path: str, data: bytes, text: bool, *, op: str = "write") -> None:
        current = self._file_or_absent(path)
        self.refuse_unread(path, current)
        if text:
            data = keep_line_endings(current.data, data)
        self._put(op, path, current, data, hash_of(data))

    def edit(self, path: str, edits: list[tuple[str, str]], allow_rewrite: bool) -> None:
        current = self._existing_file(path)
        assert current.data is not None
        label = self.label(path)
        self.search_left = charge_edit_search(
            path, label, len(edits), len(current.data), self.search_left
        )
        data = apply_edits(label, current.data, edits, allow_rewrite=allow_rewrite)
        self._put("edit", path, current, data, hash_of(data), label=label)

    def replace(
        self,
        path: str,
        data: bytes | None,
        op: str,
        *,
        mode: int | None = None,
        regions: Sequence[tuple[int, int, int, int]] | None = None,
    ) -> None:
        """Set a file's (or link's) new bytes as computed elsewhere (a patch); None deletes it.

        A `mode` of LINK_MODE makes `data` a link's target; without a mode the
        path keeps its type. `regions` are the line spans outside which the
        bytes did not change (see `Change.regions`).
        """
        current = self._file_or_absent(path, links=True)
        if data is None:
            self.delete(path, op=op)
            return
        spans = tuple(regions) if regions is not None else None
        self._put(op, path, current, data, hash_of(data), mode=mode, regions=spans)

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
        if self.state.get(destination).exists:
            raise LedgerError(
                Code.VALIDATION,
                f"{self.label(destination)} already exists; move_file never overwrites.",
                path=destination,
                details={"field": "destination", "reason": "destination_exists"},
            )
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
