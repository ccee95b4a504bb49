"""search_files: names by glob and contents by pattern, over the sandboxed walk.

Blocking; the handler runs a search in one worker thread. Contents are read
through the sandbox (`Workspace.resolve`, then `reads.read_content`) like any read,
so what a search shows is what read_file would return.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .diffs import is_text
from .errors import Code, LedgerError
from .paths import Resolved, Workspace
from .progress import EVERY
from .reads import read_content
from .requests import SearchFiles
from .results import SearchMatch, SearchResult
from .walk import Walk, WalkEntry, globs

__all__ = ["compile_pattern", "search_files"]

#: Longer lines (minified code) are cut in results.
MAX_LINE = 1000


def compile_pattern(content: str, *, regex: bool, case_sensitive: bool) -> re.Pattern[str]:
    """The pattern for a content search; raises VALIDATION for a bad regex.

    >>> compile_pattern("a.b", regex=False, case_sensitive=True).pattern
    'a\\\\.b'
    """
    flags = re.MULTILINE | (0 if case_sensitive else re.IGNORECASE)
    try:
        return re.compile(content if regex else re.escape(content), flags)
    except re.error as exc:
        raise LedgerError(
            Code.VALIDATION,
            f"content is not a valid regular expression: {exc}.",
            details={"field": "content", "reason": str(exc)},
        ) from exc


def search_files(
    workspace: Workspace,
    folder: Resolved,
    request: SearchFiles,
    max_size: int,
    progress: Callable[[int], None] | None = None,
) -> SearchResult:
    """Files under `folder` whose path matches `request.pattern` and, when
    `request.content` is given, the lines that match it, up to `max_results`.

    Raises VALIDATION for a file given as the folder or a bad regular expression.
    """
    if not folder.is_dir:
        raise LedgerError(
            Code.VALIDATION,
            f"{folder.path} is not a folder.",
            path=folder.path,
            details={"reason": "not_a_folder"},
        )
    names = globs([request.pattern])
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
    for entry in walk.entries():
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
        found, more = _search_file(workspace, entry, pattern, request.context, room, max_size)
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
    workspace: Workspace,
    entry: WalkEntry,
    pattern: re.Pattern[str],
    context: int,
    room: int,
    max_size: int,
) -> tuple[list[SearchMatch], bool]:
    """The matching lines of one file (at most `room`), and whether more were left."""
    if entry.size is not None and entry.size > max_size:
        return [], False
    try:
        data, _ = read_content(workspace.resolve(entry.path), max_size, workspace.vet)
    except (LedgerError, OSError):
        return [], False  # gone, replaced by a folder or a link out since it was listed
    if not is_text(data):
        return [], False
    text = data.decode("utf-8")
    first = pattern.search(text)
    if first is None:
        return [], False
    found: list[SearchMatch] = []
    # Lines end at "\n" only (as grep counts them); found by counting from the last
    # match, so a file is never split into lines as a whole.
    number, counted_to, last_line = 0, 0, -1
    for match in pattern.finditer(text, first.start()):
        position = match.start()
        number += text.count("\n", counted_to, position)
        counted_to = position
        if number == last_line:
            continue  # one hit per line
        if len(found) == room:
            return found, True
        last_line = number
        start = text.rfind("\n", 0, position) + 1
        found.append(
            SearchMatch(
                path=entry.path,
                line=number + 1,
                text=_shown(_line_at(text, start)),
                before=_before(text, start, context),
                after=_after(text, start, context),
            )
        )
    return found, False


def _line_at(text: str, start: int) -> str:
    end = text.find("\n", start)
    return text[start:] if end < 0 else text[start:end]


def _before(text: str, start: int, count: int) -> list[str]:
    """Up to `count` lines before the line starting at `start`."""
    lines: list[str] = []
    while count > len(lines) and start > 0:
        previous = text.rfind("\n", 0, start - 1) + 1
        lines.append(_shown(text[previous : start - 1]))
        start = previous
    return lines[::-1]


def _after(text: str, start: int, count: int) -> list[str]:
    """Up to `count` lines after the line starting at `start` (none past the last)."""
    lines: list[str] = []
    end = text.find("\n", start)
    while count > len(lines) and end >= 0 and end + 1 < len(text):
        following = text.find("\n", end + 1)
        lines.append(_shown(text[end + 1 :] if following < 0 else text[end + 1 : following]))
        end = following
    return lines


def _shown(line: str) -> str:
    """A line as a result shows it: no "\r", at most MAX_LINE characters."""
    if line.endswith("\r"):
        line = line[:-1]
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + "…"
