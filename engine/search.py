"""search_files: names by glob and contents by pattern, over the sandboxed walk.

Blocking; the handler runs a search in one worker thread. Contents are read
through the sandbox (`Workspace.resolve`, then `reads.read_content`) like any read,
so what a search shows is what read_file would return.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable

from .diffs import is_text
from .errors import Code, LedgerError
from .paths import Resolved, Workspace
from .reads import read_content
from .requests import SearchFiles
from .results import SearchMatch, SearchResult
from .walk import Walk, WalkEntry, globs

__all__ = ["compile_pattern", "search_files"]

#: How often (in files) a search reports its progress.
PROGRESS_EVERY = 500
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
        if progress is not None and searched % PROGRESS_EVERY == 0:
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
    # Lines end at "\n" only (as grep counts them); a "\r" before it is not shown.
    lines = text.split("\n")
    starts = _line_starts(text)
    found: list[SearchMatch] = []
    last_line = -1
    for match in pattern.finditer(text, first.start()):
        number = _line_of(starts, match.start())
        if number == last_line:
            continue  # one hit per line
        if len(found) == room:
            return found, True
        last_line = number
        found.append(
            SearchMatch(
                path=entry.path,
                line=number + 1,
                text=_shown(lines[number]),
                before=[_shown(line) for line in lines[max(0, number - context) : number]],
                after=[_shown(line) for line in lines[number + 1 : number + 1 + context]],
            )
        )
    return found, False


def _shown(line: str) -> str:
    """A line as a result shows it: no "\r", at most MAX_LINE characters."""
    if line.endswith("\r"):
        line = line[:-1]
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + "…"


def _line_starts(text: str) -> list[int]:
    starts = [0]
    position = text.find("\n")
    while position != -1:
        starts.append(position + 1)
        position = text.find("\n", position + 1)
    return starts


def _line_of(starts: list[int], offset: int) -> int:
    """The 0-based line holding `offset`.

    >>> _line_of([0, 3, 7], 5)
    1
    """
    return bisect.bisect_right(starts, offset) - 1
