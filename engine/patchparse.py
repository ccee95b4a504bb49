"""Unified diffs, parsed: `git diff` and `diff -u` text into `FilePatch` records.

Nothing here touches the disk. `parse_patch` turns patch text into `FilePatch`
records (text hunks, or the decoded hunk of a `GIT binary patch`, see
`engine.binpatch`); `engine.patchapply` applies one to a file's bytes and
`engine.patchplan` makes them planned changes. See `docs/patch.md` for the forms
a client can send.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Any, Literal

from msgspec import Struct

from .binpatch import (
    BinaryError,
    BinaryHunk,
    Room,
    TooLarge,
    decode_line,
    deflate_bound,
    inflate,
)
from .bounds import MAX_FILE_SIZE
from .errors import Code, LedgerError

__all__ = ["FilePatch", "Hunk", "parse_patch", "patch_text", "unquote_c_path"]


class Hunk(Struct, frozen=True, kw_only=True):
    """One `@@ -a,b +c,d @@` block.

    `lines` holds `(tag, text)` pairs, tag one of `" "`, `"-"`, `"+"`, text without
    its newline (a `\\r` from a CRLF file stays in the text). The two flags record
    a `\\ No newline at end of file` marker on the old and the new side.
    """

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: list[tuple[str, str]]
    old_no_newline: bool = False
    new_no_newline: bool = False
    header: str = ""
    header_line: int = 0


class FilePatch(Struct, frozen=True, kw_only=True):
    """The changes to one file; `old_path` None creates it, `new_path` None deletes it.

    Paths are as the patch names them, relative, with git's `a/` and `b/`
    prefixes removed; checking them against the workspace is the caller's job.
    `line` is the 1-based line of the patch where this file's header starts.
    """

    old_path: str | None
    new_path: str | None
    hunks: list[Hunk]
    old_mode: str | None = None
    new_mode: str | None = None
    rename: bool = False
    line: int = 0
    #: The `index` line's old and new object ids (abbreviated or full) and mode.
    old_index: str | None = None
    new_index: str | None = None
    index_mode: str | None = None
    #: The forward hunk of a `GIT binary patch`, in place of text hunks.
    binary: BinaryHunk | None = None

    @property
    def path(self) -> str:
        """The path this patch is about: the new one, or the old one for a deletion."""
        return self.new_path if self.new_path is not None else self.old_path or ""


_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_BEGIN_PATCH = "*** Begin Patch"
# Extended header lines of `diff --git`, after which `---`/`+++` or hunks follow.
_GIT_EXTENDED = (
    "old mode ",
    "new mode ",
    "deleted file mode ",
    "new file mode ",
    "rename from ",
    "rename to ",
    "rename old ",
    "rename new ",
    "copy from ",
    "copy to ",
    "similarity index ",
    "dissimilarity index ",
    "index ",
)
# GNU `diff -N` marks a missing side with the epoch as its timestamp.
_EPOCH = re.compile(r"^(1970-01-01|1969-12-31)[ T]\d\d:\d\d:\d\d")
_ESCAPES = {
    "a": 7,
    "b": 8,
    "t": 9,
    "n": 10,
    "v": 11,
    "f": 12,
    "r": 13,
    '"': 34,
    "\\": 92,
}


def _invalid(message: str, line: int, **details: Any) -> LedgerError:
    """A VALIDATION error naming the 1-based line of the patch it is about."""
    return LedgerError(
        Code.VALIDATION,
        f"invalid patch at line {line}: {message}",
        details={"argument": "patch", "line": line, **details},
    )


def _strip_cr(line: str) -> str:
    """A header line without the `\\r` a CRLF-transported patch leaves on it.

    >>> _strip_cr("@@ -1 +1 @@\\r")
    '@@ -1 +1 @@'
    """
    return line[:-1] if line.endswith("\r") else line


def unquote_c_path(text: str) -> tuple[str, str]:
    """Split a git C-quoted path off the front of `text`: (path, rest after it).

    Raises ValueError when `text` does not start with a complete quoted string.

    >>> unquote_c_path('"a/with space" b/x')
    ('a/with space', ' b/x')
    >>> unquote_c_path('"caf\\\\303\\\\251"')
    ('café', '')
    """
    if not text.startswith('"'):
        raise ValueError("not quoted")
    out = bytearray()
    i = 1
    while i < len(text):
        char = text[i]
        if char == '"':
            return out.decode("utf-8", "surrogateescape"), text[i + 1 :]
        if char != "\\":
            out += char.encode("utf-8", "surrogateescape")
            i += 1
            continue
        nxt = text[i + 1 : i + 2]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif re.fullmatch(r"[0-3][0-7][0-7]", text[i + 1 : i + 4]):
            out.append(int(text[i + 1 : i + 4], 8))
            i += 4
        else:
            raise ValueError(f"bad escape in quoted path: {text[i : i + 2]!r}")
    raise ValueError("unterminated quoted path")


def _header_path(raw: str) -> str | None:
    """The path of a `---`/`+++` line's value: unquoted, timestamp dropped, /dev/null None.

    >>> _header_path("old.txt\\t2024-01-02 10:00:00.000000000 +0100")
    'old.txt'
    >>> _header_path("/dev/null") is None
    True
    """
    raw = _strip_cr(raw)
    if raw.startswith('"'):
        path, _ = unquote_c_path(raw)
    else:
        # diff -u puts a timestamp after a tab; git adds a lone tab after names with spaces.
        path = raw.split("\t", 1)[0]
    return None if path == "/dev/null" else path


def _header_timestamp(raw: str) -> str:
    """What follows the tab on a `---`/`+++` line, or an empty string."""
    raw = _strip_cr(raw)
    if raw.startswith('"'):
        return ""
    parts = raw.split("\t", 1)
    return parts[1].strip() if len(parts) == 2 else ""


def _strip_component(path: str | None) -> str | None:
    """Drop the first path component, as `git apply -p1` does with `a/` and `b/`.

    >>> _strip_component("a/src/x.py")
    'src/x.py'
    """
    if path is None:
        return None
    _, sep, rest = path.partition("/")
    return rest if sep else path


def _git_line_paths(rest: str) -> tuple[str | None, str | None]:
    """The two paths of a `diff --git` line, prefixes kept; (None, None) when ambiguous.

    Unquoted names may contain spaces, so like git we look for the split where
    both halves name the same file after their prefix.

    >>> _git_line_paths("a/with space b/with space")
    ('a/with space', 'b/with space')
    >>> _git_line_paths('"a/x y" "b/x y"')
    ('a/x y', 'b/x y')
    """
    try:
        if rest.startswith('"'):
            first, tail = unquote_c_path(rest)
            tail = tail.lstrip(" ")
            second = unquote_c_path(tail)[0] if tail.startswith('"') else tail
            return first, second
        if '"' in rest:
            head, _, quoted = rest.partition(' "')
            return head, unquote_c_path('"' + quoted)[0]
    except ValueError:
        return None, None
    for index, char in enumerate(rest):
        if char != " ":
            continue
        left, right = rest[:index], rest[index + 1 :]
        if _strip_component(left) == _strip_component(right):
            return left, right
    return None, None


class _Cursor:
    """The patch's lines and a position; line numbers in errors are 1-based."""

    def __init__(self, text: str, limit: int, room: Room) -> None:
        #: The most bytes a file may hold: no binary hunk inflates past it.
        self.limit = limit
        #: What the forward binary hunks of the call may still inflate to.
        self.room = room
        lines = text.split("\n")  # not splitlines(): \r, \f and \x1c are line content here
        if lines and lines[-1] == "":
            lines.pop()
        # diff never puts a \r on an @@ line, so \r there means the whole text went
        # through a CRLF conversion; content \rs from a CRLF file are kept otherwise.
        headers = [line for line in lines if line.startswith("@@ ")]
        if headers and all(line.endswith("\r") for line in headers):
            lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        self.lines = lines
        self.index = 0

    def peek(self, ahead: int = 0) -> str | None:
        position = self.index + ahead
        return self.lines[position] if position < len(self.lines) else None

    @property
    def number(self) -> int:
        return self.index + 1


def _is_file_header(cursor: _Cursor) -> bool:
    """Whether the cursor is at `diff --git` or at a `---` line followed by `+++`."""
    line = cursor.peek()
    if line is None:
        return False
    if line.startswith("diff --git "):
        return True
    following = cursor.peek(1)
    return line.startswith("--- ") and following is not None and following.startswith("+++ ")


def _check_binary(line: str, number: int) -> None:
    """Refuse a binary change that carries no data (`git diff` without `--binary`).

    Raises VALIDATION for `Binary files ... differ`, and for `GIT binary patch`
    outside a `diff --git` section (it cannot say which file it changes).
    """
    stripped = _strip_cr(line)
    if stripped.startswith("Binary files ") and stripped.endswith(" differ"):
        raise _invalid(
            "a binary change without its data ('Binary files ... differ'); "
            "send the output of `git diff --binary`",
            number,
            reason="binary_without_data",
            text=stripped,
        )
    if stripped == _GIT_BINARY:
        raise _invalid("'GIT binary patch' outside a 'diff --git' section", number, reason="binary")


_GIT_BINARY = "GIT binary patch"
_BINARY_HUNK = re.compile(r"^(literal|delta) (\d+)$")
_INDEX = re.compile(r"^([0-9a-f]+)\.\.([0-9a-f]+)(?: ([0-7]+))?$")


def _parse_binary_hunk(cursor: _Cursor, *, forward: bool) -> BinaryHunk:
    """Read one `literal N` / `delta N` hunk and the base85 lines up to a blank line.

    Raises VALIDATION (naming the line) for a bad header, line or deflated body,
    and for a stated size over the cursor's limit, or, for a forward hunk, over
    what the call's hunks may still inflate to (`file_too_large`, before anything
    is inflated). A reverse hunk is inflated to check it, then dropped.
    """
    number = cursor.number
    header = _strip_cr(cursor.peek() or "")
    match = _BINARY_HUNK.match(header)
    if match is None:
        raise _invalid("expected 'literal N' or 'delta N' in a binary patch", number, text=header)
    cursor.index += 1
    bound = deflate_bound(int(match.group(2)))
    encoded = bytearray()
    while (line := cursor.peek()) is not None and (body := _strip_cr(line)):
        try:
            encoded += decode_line(body)
        except BinaryError as exc:
            raise _invalid(
                f"bad binary patch line: {exc}", cursor.number, reason="binary"
            ) from None
        if len(encoded) > bound:
            # Stopped here: the rest of a bomb's lines are never decoded.
            raise _invalid(
                f"bad binary hunk: its data is longer than deflating {match.group(2)} "
                "bytes can make",
                number,
                reason="binary",
            )
        cursor.index += 1
    if line is not None:
        cursor.index += 1  # the blank line that ends the hunk
    kind: Literal["literal", "delta"] = "literal" if match.group(1) == "literal" else "delta"
    try:
        size = int(match.group(2))
        if forward:
            cursor.room.take(size)
        return inflate(kind, size, bytes(encoded), cursor.limit)
    except TooLarge as exc:
        raise _invalid(
            f"bad binary hunk: {exc}",
            number,
            reason="file_too_large",
            size=exc.size,
            limit=exc.limit,
        ) from None
    except BinaryError as exc:
        raise _invalid(f"bad binary hunk: {exc}", number, reason="binary") from None


def _parse_binary(cursor: _Cursor) -> BinaryHunk:
    """Read a `GIT binary patch`: the forward hunk, then the optional reverse one."""
    cursor.index += 1
    forward = _parse_binary_hunk(cursor, forward=True)
    line = cursor.peek()
    if line is not None and _BINARY_HUNK.match(_strip_cr(line)):
        _parse_binary_hunk(cursor, forward=False)  # checked, not needed: the forward one applies
    return forward


def _parse_hunk(cursor: _Cursor) -> Hunk:
    """Read one hunk starting at its `@@` line; its body must match the header's counts.

    Raises VALIDATION for a bad header, a garbage line, or a body whose length
    disagrees with the header.
    """
    header_number = cursor.number
    header = _strip_cr(cursor.peek() or "")
    match = _HUNK_HEADER.match(header)
    if match is None:
        raise _invalid("malformed hunk header", header_number, text=header)
    old_start, old_count, new_start, new_count = (
        int(group) if group is not None else 1 for group in match.groups()[:4]
    )
    cursor.index += 1
    lines: list[tuple[str, str]] = []
    old_seen = new_seen = 0
    old_marked = new_marked = -1  # index in `lines` carrying a no-newline marker
    while True:
        line = cursor.peek()
        if line is not None and line.startswith("\\"):
            if not lines:
                raise _invalid("'\\ No newline' marker without a line", cursor.number)
            tag = lines[-1][0]
            if tag in " -":
                old_marked = len(lines) - 1
            if tag in " +":
                new_marked = len(lines) - 1
            cursor.index += 1
            continue
        if old_seen == old_count and new_seen == new_count:
            break
        # A file header can only start with these; most body lines skip the look-ahead.
        if (
            line is None
            or line.startswith("@@")
            or (line.startswith(("diff --git ", "--- ")) and _is_file_header(cursor))
        ):
            raise _invalid(
                f"hunk body is shorter than its header says (old {old_seen} of {old_count}, "
                f"new {new_seen} of {new_count})",
                # At the end of the text, name its last line rather than one past it.
                min(cursor.number, len(cursor.lines)),
                hunk_header=header,
                hunk_line=header_number,
            )
        # GNU diff and editors that trim trailing blanks leave an empty context line bare.
        tag, text = (" ", "") if line in ("", "\r") else (line[0], line[1:])
        if tag not in " -+":
            raise _invalid(
                "unexpected line inside a hunk (each line must start with ' ', '-' or '+')",
                cursor.number,
                text=line,
                hunk_header=header,
            )
        old_seen += tag in " -"
        new_seen += tag in " +"
        if old_seen > old_count or new_seen > new_count:
            raise _invalid(
                "hunk body is longer than its header says",
                cursor.number,
                hunk_header=header,
                hunk_line=header_number,
            )
        lines.append((tag, text))
        cursor.index += 1
    _check_markers(lines, old_marked, new_marked, header_number)
    return Hunk(
        old_start=old_start,
        old_count=old_count,
        new_start=new_start,
        new_count=new_count,
        lines=lines,
        old_no_newline=old_marked >= 0,
        new_no_newline=new_marked >= 0,
        header=header,
        header_line=header_number,
    )


def _check_markers(
    lines: Sequence[tuple[str, str]], old_marked: int, new_marked: int, header_line: int
) -> None:
    """A no-newline marker may only follow the last line of its side of the hunk.

    Raises VALIDATION otherwise.
    """
    for marked, tags in ((old_marked, " -"), (new_marked, " +")):
        if marked >= 0 and any(tag in tags for tag, _ in lines[marked + 1 :]):
            raise _invalid(
                "'\\ No newline at end of file' is not after the last line of the hunk",
                header_line,
            )


def _parse_hunks(cursor: _Cursor) -> list[Hunk]:
    """Read consecutive hunks, then refuse a stray body line that follows them."""
    hunks: list[Hunk] = []
    while (line := cursor.peek()) is not None and line.startswith("@@"):
        hunks.append(_parse_hunk(cursor))
    line = cursor.peek()
    # A body line right after a complete hunk means the header undercounts;
    # `-- ` is the signature separator of `git format-patch`, not a body line.
    if (
        hunks
        and line is not None
        and line[:1] in ("+", "-", " ")
        and _strip_cr(line) not in ("-- ", "--")
        and not _is_file_header(cursor)
    ):
        raise _invalid(
            "hunk body is longer than its header says",
            cursor.number,
            hunk_header=hunks[-1].header,
            hunk_line=hunks[-1].header_line,
        )
    return hunks


def _parse_git_file(cursor: _Cursor) -> FilePatch:
    """Read one `diff --git` section: extended headers, `---`/`+++`, hunks.

    Raises VALIDATION for a binary change without data, a binary hunk that does
    not decode, copy patches, and a section with nothing to do.
    """
    start = cursor.number
    first = _strip_cr(cursor.peek() or "")
    cursor.index += 1
    fields = _extended_headers(cursor)
    if "copy from" in fields:
        raise _invalid("copy patches are not supported", start, reason="copy")
    has_headers = _is_file_header(cursor) and not (cursor.peek() or "").startswith("diff --git")
    old_path, new_path = _git_paths(cursor, first, fields, has_headers, start)
    binary = _git_binary(cursor)
    hunks = _parse_hunks(cursor)
    if not hunks and binary is None and not _changes_without_hunks(fields, has_headers):
        raise _invalid("file header without hunks", start, file=new_path or old_path)
    old_index, new_index, index_mode = _index_fields(fields.get("index"), start)
    return FilePatch(
        old_path=old_path,
        new_path=new_path,
        hunks=hunks,
        old_mode=fields.get("old mode") or fields.get("deleted file mode"),
        new_mode=fields.get("new mode") or fields.get("new file mode"),
        rename=_is_rename(fields),
        line=start,
        old_index=old_index,
        new_index=new_index,
        index_mode=index_mode,
        binary=binary,
    )


def _extended_headers(cursor: _Cursor) -> dict[str, str]:
    """Read the extended header lines after `diff --git` (`new file mode 100644`, ...).

    Returns each line's value by its name without the trailing space
    (`{"new file mode": "100644"}`); stops at the first other line.
    """
    fields: dict[str, str] = {}
    while (line := cursor.peek()) is not None:
        stripped = _strip_cr(line)
        if stripped == _GIT_BINARY:
            break
        _check_binary(stripped, cursor.number)
        prefix = next((p for p in _GIT_EXTENDED if stripped.startswith(p)), None)
        if prefix is None:
            break
        fields[prefix.strip()] = stripped[len(prefix) :]
        cursor.index += 1
    return fields


def _git_paths(
    cursor: _Cursor, first: str, fields: dict[str, str], has_headers: bool, start: int
) -> tuple[str | None, str | None]:
    """The old and new paths of a `diff --git` section (None: the file is new, or deleted).

    The `---`/`+++` lines win over the `diff --git` line, rename headers over
    both. Raises VALIDATION for a malformed path, or when no line says which file
    the section changes.
    """
    line_old, line_new = _git_line_paths(first[len("diff --git ") :])
    old_path, new_path = _strip_component(line_old), _strip_component(line_new)
    try:
        if has_headers:
            old_path, new_path = _header_paths(cursor)
        old_path = _renamed(fields, ("rename from", "rename old"), old_path)
        new_path = _renamed(fields, ("rename to", "rename new"), new_path)
    except ValueError as exc:
        raise _invalid(f"malformed path: {exc}", start) from exc
    creates, deletes = "new file mode" in fields, "deleted file mode" in fields
    if creates:
        old_path = None
    if deletes:
        new_path = None
    if not has_headers and (
        (old_path is None and not creates) or (new_path is None and not deletes)
    ):
        raise _invalid("cannot tell which file the diff --git header names", start, text=first)
    return old_path, new_path


def _header_paths(cursor: _Cursor) -> tuple[str | None, str | None]:
    """Read the `---` and `+++` lines at the cursor: their paths, without `a/` and `b/`."""
    old_path = _strip_component(_header_path((cursor.peek() or "")[4:]))
    new_path = _strip_component(_header_path((cursor.peek(1) or "")[4:]))
    cursor.index += 2
    return old_path, new_path


def _renamed(fields: dict[str, str], names: tuple[str, ...], path: str | None) -> str | None:
    """The path a rename header names (the last of `names` present), else `path`.

    >>> _renamed({"rename to": "b.txt"}, ("rename to", "rename new"), "a.txt")
    'b.txt'
    """
    for name in names:
        if name in fields:
            path = _field_path(fields[name])
    return path


def _git_binary(cursor: _Cursor) -> BinaryHunk | None:
    """Read a `GIT binary patch` at the cursor, if one is there; refuse one without data."""
    line = cursor.peek()
    if line is None:
        return None
    if _strip_cr(line) == _GIT_BINARY:
        return _parse_binary(cursor)
    _check_binary(line, cursor.number)
    return None


def _is_rename(fields: dict[str, str]) -> bool:
    return "rename from" in fields or "rename old" in fields


def _changes_without_hunks(fields: dict[str, str], has_headers: bool) -> bool:
    """Whether a section does something with no hunk: a rename, a mode change, or
    (without `---`/`+++`) the creation or deletion of an empty file."""
    creates_or_deletes = "new file mode" in fields or "deleted file mode" in fields
    return _is_rename(fields) or "old mode" in fields or (creates_or_deletes and not has_headers)


def _index_fields(value: str | None, start: int) -> tuple[str | None, str | None, str | None]:
    """The object ids and mode of an `index a..b [mode]` line.

    >>> _index_fields("e69de29..d00491f 100644", 1)
    ('e69de29', 'd00491f', '100644')
    """
    if value is None:
        return None, None, None
    match = _INDEX.match(value)
    if match is None:
        raise _invalid("malformed 'index' line", start, text="index " + value)
    old, new, mode = match.groups()
    return old, new, mode


def _field_path(value: str) -> str:
    """A `rename from`/`rename to` value: C-quoted or plain, no prefix."""
    return unquote_c_path(value)[0] if value.startswith('"') else value


def _parse_plain_file(cursor: _Cursor) -> FilePatch:
    """Read one `diff -u` section: `---`/`+++` with optional timestamps, then hunks.

    Raises VALIDATION for a malformed path or a section without hunks.
    """
    start = cursor.number
    old_raw, new_raw = (cursor.peek() or "")[4:], (cursor.peek(1) or "")[4:]
    try:
        old_path, new_path = _header_path(old_raw), _header_path(new_raw)
    except ValueError as exc:
        raise _invalid(f"malformed path: {exc}", start) from exc
    cursor.index += 2
    # The git convention without a `diff --git` line (common in hand-written patches).
    if (old_path is None or old_path.startswith("a/")) and (
        new_path is None or new_path.startswith("b/")
    ):
        old_path, new_path = _strip_component(old_path), _strip_component(new_path)
    line = cursor.peek()
    if line is not None:
        _check_binary(line, cursor.number)
    hunks = _parse_hunks(cursor)
    if not hunks:
        raise _invalid("file header without hunks", start, file=new_path or old_path)
    # `diff -N` names the missing side with an epoch timestamp instead of /dev/null.
    if _EPOCH.match(_header_timestamp(old_raw)) and all(h.old_count == 0 for h in hunks):
        old_path = None
    if _EPOCH.match(_header_timestamp(new_raw)) and all(h.new_count == 0 for h in hunks):
        new_path = None
    return FilePatch(old_path=old_path, new_path=new_path, hunks=hunks, line=start)


def patch_text(text: str | None, encoded: str | None, prefix: str = "") -> str:
    """The patch a call carries: `patch` as text, or `patch_base64` as bytes.

    A diff of files that are not UTF-8 holds bytes a JSON string cannot carry;
    sent as base64, its bytes become text with `surrogateescape`, so hunks match
    the file's bytes and what they add is written byte for byte.

    Raises VALIDATION when both or neither are given, or the base64 is malformed.

    >>> patch_text(None, "LS0tIGEKKysrIGIK")
    '--- a\\n+++ b\\n'
    """
    if (text is None) == (encoded is None):
        raise LedgerError(
            Code.VALIDATION,
            "give exactly one of patch (text) and patch_base64 (the patch's bytes in base64)",
            details={"field": prefix + "patch", "reason": "patch_or_patch_base64"},
        )
    if text is not None:
        return text
    assert encoded is not None
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise LedgerError(
            Code.VALIDATION,
            "patch_base64 is not valid base64.",
            details={"field": prefix + "patch_base64"},
        ) from exc
    return data.decode("utf-8", "surrogateescape")


def _check_sides(patch: FilePatch) -> None:
    """A created file has no old lines, a deleted one no new lines.

    Raises VALIDATION otherwise.
    """
    for hunk in patch.hunks:
        if patch.old_path is None and hunk.old_count != 0:
            raise _invalid(
                "a hunk of a new file removes or keeps lines", hunk.header_line, file=patch.path
            )
        if patch.new_path is None and hunk.new_count != 0:
            raise _invalid(
                "a hunk of a deleted file adds or keeps lines", hunk.header_line, file=patch.path
            )


def parse_patch(
    text: str, *, limit: int = MAX_FILE_SIZE, room: Room | None = None
) -> list[FilePatch]:
    """Parse `git diff` or `diff -u` output into one `FilePatch` per file, in order.

    Text before, between and after file sections (commit messages, `diff -r`
    command lines, signatures) is skipped.

    Raises BEGIN_PATCH for a Codex `*** Begin Patch` text, and VALIDATION (with
    `details["line"]`) for text without file headers, a file without hunks
    (renames and mode changes excepted), a malformed `@@` header, a hunk whose
    body disagrees with its counts, a garbage line inside a hunk, a binary
    change without its data (`Binary files ... differ`) or whose `GIT binary
    patch` hunks do not decode or state a size over `limit` (the most bytes a
    file may hold), or forward hunks that together state more than `room` holds
    (by default `limit`: a call shares one room among its patches), and copy
    patches.

    >>> [p] = parse_patch("--- a/x\\n+++ b/x\\n@@ -1 +1 @@\\n-old\\n+new\\n")
    >>> (p.old_path, p.new_path, p.hunks[0].lines)
    ('x', 'x', [('-', 'old'), ('+', 'new')])
    """
    if text.lstrip().startswith(_BEGIN_PATCH):
        raise LedgerError(
            Code.BEGIN_PATCH,
            "the patch is a '*** Begin Patch' text, not a unified diff",
            details={"argument": "patch", "line": 1},
            suggestion="send a unified diff as `git diff` or `diff -u` prints it, or use edit_file",
        )
    cursor = _Cursor(text, limit, room if room is not None else Room(limit))
    files: list[FilePatch] = []
    while (line := cursor.peek()) is not None:
        if line.startswith("diff --git "):
            files.append(_parse_git_file(cursor))
        elif _is_file_header(cursor):
            files.append(_parse_plain_file(cursor))
        elif line.startswith("@@ "):
            raise _invalid("hunk header before any '---'/'+++' file header", cursor.number)
        else:
            _check_binary(line, cursor.number)
            cursor.index += 1
    if not files:
        raise _invalid(
            "no file headers found ('diff --git', or '---' followed by '+++')",
            1,
            reason="no_file_headers",
        )
    for patch in files:
        _check_sides(patch)
    return files
