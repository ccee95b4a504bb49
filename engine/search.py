"""search_files: names by glob and contents by pattern, over the sandboxed walk.

Blocking; the handler runs a search in one worker thread. Contents are read
through the sandboxed walk (`Walk.read`): each file opened relative to its
folder's no-link descriptor and vetted as every read is (hard links, secret
content, the journal), so what a search shows is what read_file would return,
without resolving each file's whole path again.

Content is matched by RE2, in time linear in the text whatever the pattern, and
within one line (as grep matches): a match never spans a line break, so each
matching line costs one pass over it and a file is searched in windows of whole
lines, between which a cancelled call stops. RE2 lets go of the GIL while it
matches, so a long search does not hold the event loop.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import closing
from typing import Any

import re2

from .cancel import raise_if_cancelled
from .diffs import is_text
from .errors import Code, LedgerError, not_a_folder
from .fileops import TooLarge
from .globs import linear_options
from .paths import Resolved, Workspace
from .progress import EVERY
from .requests import SearchFiles
from .results import SearchMatch, SearchResult
from .walk import Walk, WalkEntry, globs

__all__ = ["compile_pattern", "search_files"]

#: Longer lines (minified code) are cut in results.
MAX_LINE = 1000

#: A file is searched this many bytes (rounded up to a whole line) at a time.
WINDOW = 1 << 20

#: The glob that matches every file.
EVERY_NAME = "*"

#: A compiled RE2 pattern (google-re2 has no type information).
Pattern = Any


def compile_pattern(content: str, *, regex: bool, case_sensitive: bool) -> Pattern:
    """The pattern for a content search, matched within one line.

    Raises VALIDATION naming `content` for a line break in it, a bad regular
    expression, or one that needs backtracking (backreferences, lookaround).

    >>> compile_pattern("a.b", regex=False, case_sensitive=True).search(b"xa.b").span()
    (1, 4)
    """
    if "\n" in content:
        raise _bad_content(
            "content matches within one line; it cannot hold a line break.", "line_break"
        )
    options = linear_options(case_sensitive=case_sensitive, never_nl=True)
    options.literal = not regex
    source = f"(?m){content}" if regex else content
    try:
        return re2.compile(source.encode("utf-8", "surrogatepass"), options)
    except re2.error as exc:
        raise _bad_content(*_why_refused(content, str(exc))) from exc


def _why_refused(content: str, reason: str) -> tuple[str, str]:
    """The message and reason for a regex RE2 refused: invalid anywhere, or valid
    only for a backtracking engine."""
    try:
        re.compile(content)
    except (re.error, RecursionError, OverflowError) as exc:
        return f"content is not a valid regular expression: {exc}.", str(exc)
    return (
        "content uses a feature that needs backtracking (a backreference, lookahead or "
        f"lookbehind, or a pattern too large), which search_files does not run: {reason}. "
        "Search with a pattern without it.",
        f"unsupported: {reason}",
    )


def _bad_content(message: str, reason: str) -> LedgerError:
    return LedgerError(Code.VALIDATION, message, details={"field": "content", "reason": reason})


def search_files(
    workspace: Workspace,
    folder: Resolved,
    request: SearchFiles,
    max_size: int,
    progress: Callable[[int], None] | None = None,
) -> SearchResult:
    """Files under `folder` whose path matches `request.pattern` and, when
    `request.content` is given, the lines that match it, up to `max_results`.

    Raises VALIDATION for a file given as the folder or a content pattern
    `compile_pattern` refuses.
    """
    if not folder.is_dir:
        raise not_a_folder(folder.path)
    # "*" (the default) matches every name: no glob to run on each file.
    names = None if request.pattern == EVERY_NAME else globs([request.pattern])
    pattern = (
        None
        if request.content is None
        else compile_pattern(
            request.content, regex=request.regex, case_sensitive=request.case_sensitive
        )
    )
    walk = Walk(workspace, folder, gitignore=request.respect_gitignore, exclude=request.exclude)
    files: list[str] = []
    matches: list[SearchMatch] = []
    searched = 0
    truncated = False
    with closing(walk.entries()) as entries:
        for entry in entries:
            if entry.is_dir or (names is not None and not names.match_file(entry.relative)):
                continue
            if pattern is None:
                if len(files) == request.max_results:
                    truncated = True
                    break
                files.append(entry.path)
                continue
            searched += 1
            if progress is not None and searched % EVERY == 0:
                progress(searched)
            room = request.max_results - len(matches)
            found, more = _search_file(walk, entry, pattern, request.context, room, max_size)
            if found:
                files.append(entry.path)
                matches.extend(found)
            if more:
                truncated = True
                break
    return SearchResult(
        path=folder.path,
        files=files,
        matches=matches if pattern is not None else None,
        truncated=truncated,
        files_searched=searched if pattern is not None else None,
    )


def _search_file(
    walk: Walk,
    entry: WalkEntry,
    pattern: Pattern,
    context: int,
    room: int,
    max_size: int,
) -> tuple[list[SearchMatch], bool]:
    """The matching lines of one file (at most `room`), and whether more were left."""
    if entry.size is not None and entry.size > max_size:
        return [], False
    try:
        data = walk.read(entry, max_size)
    except (LedgerError, TooLarge, OSError):
        return [], False  # refused, grown too large, or gone or replaced since it was listed
    if not is_text(data):
        return [], False
    found: list[SearchMatch] = []
    # Lines end at "\n" only (as grep counts them); found by counting from the last
    # match, so a file is never split into lines as a whole.
    size = len(data)
    number, counted_to, position, checked_to = 0, 0, 0, 0
    while position < size:
        if position >= checked_to:  # once a window, not at every hit
            raise_if_cancelled()
            checked_to = position + WINDOW
        end = size if size - position <= WINDOW else _window_end(data, position)
        match = pattern.search(data, position, end)
        if match is None:
            position = end
            continue
        at = match.start()
        if at == size and data.endswith(b"\n"):
            break  # past the last line's "\n" is no line (as grep counts them)
        number += data.count(b"\n", counted_to, at)
        counted_to = at
        if len(found) == room:
            return found, True
        start = data.rfind(b"\n", 0, at) + 1
        following = data.find(b"\n", at)  # one hit per line: go on at the next
        line = data[start:] if following < 0 else data[start:following]
        found.append(
            SearchMatch(
                path=entry.path,
                line=number + 1,
                text=_shown(line),
                before=_before(data, start, context) if context else [],
                after=_after(data, start, context) if context else [],
            )
        )
        position = size if following < 0 else following + 1
    return found, False


def _window_end(data: bytes, position: int) -> int:
    """Where the window of whole lines that starts at `position` ends."""
    if len(data) - position <= WINDOW:
        return len(data)
    end = data.find(b"\n", position + WINDOW)
    return len(data) if end < 0 else end + 1


def _before(text: bytes, start: int, count: int) -> list[str]:
    """Up to `count` lines before the line starting at `start`."""
    lines: list[str] = []
    while count > len(lines) and start > 0:
        previous = text.rfind(b"\n", 0, start - 1) + 1
        lines.append(_shown(text[previous : start - 1]))
        start = previous
    return lines[::-1]


def _after(text: bytes, start: int, count: int) -> list[str]:
    """Up to `count` lines after the line starting at `start` (none past the last)."""
    lines: list[str] = []
    end = text.find(b"\n", start)
    while count > len(lines) and end >= 0 and end + 1 < len(text):
        following = text.find(b"\n", end + 1)
        lines.append(_shown(text[end + 1 :] if following < 0 else text[end + 1 : following]))
        end = following
    return lines


def _shown(raw: bytes) -> str:
    """A line as a result shows it: no "\r", at most MAX_LINE characters."""
    # Only what can be shown is decoded: the data is UTF-8, so the cut can split
    # no more than the last character.
    line = raw[: 4 * (MAX_LINE + 2)].decode("utf-8", "ignore")
    if line.endswith("\r"):
        line = line[:-1]
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + "…"
