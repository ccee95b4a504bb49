"""Globs and .gitignore lines, matched in time linear in the path.

`pathspec` reads each line as git does (negation, anchoring, `**`, folder-only
patterns) and turns it into a regular expression; Python's `re` would match those
by backtracking, so a line like `*a*a*a*a*zz` against one long name takes seconds
and grows with every star. Here each expression is compiled by RE2 instead, which
matches in one pass over the path whatever the pattern. The rules are weighed as
pathspec's `GitIgnoreSpec` weighs them: the last rule that matches the path itself
decides; failing that, the last rule that matches a folder above it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import re2
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

__all__ = ["Globs", "linear_options"]

#: The capture group pathspec puts where a pattern matched a folder above the path.
_FOLDER_MARK = b"ps_d"


def linear_options(*, case_sensitive: bool = True, never_nl: bool = False) -> Any:
    """RE2 options for the project's patterns: UTF-8, nothing logged to stderr."""
    options = re2.Options()
    options.case_sensitive = case_sensitive
    options.never_nl = never_nl
    options.log_errors = False  # a refused pattern is the caller's error, not the log's
    return options


class _Rule:
    """One pattern line: its compiled expression and whether it includes or excludes."""

    __slots__ = ("folder_group", "include", "regex")

    def __init__(self, regex: Any, include: bool) -> None:
        self.regex = regex
        self.include = include
        self.folder_group: int | None = regex.groupindex.get(_FOLDER_MARK)


class Globs:
    """A gitignore-style matcher for `lines` (a name without `/` matches at any
    depth; `**` spans folders; `!` re-includes; a trailing `/` matches folders only).

    >>> Globs(["*.py", "!keep.py"]).match_file("src/a.py")
    True
    >>> Globs(["*.py", "!keep.py"]).match_file("src/keep.py")
    False
    """

    __slots__ = ("_rules",)

    def __init__(self, lines: Iterable[str]) -> None:
        rules: list[_Rule] = []
        for line in lines:
            regex, include = GitIgnoreSpecPattern.pattern_to_regex(line)
            if regex is None or include is None:
                continue  # a blank line or a comment
            rules.append(_Rule(re2.compile(regex.encode("utf-8"), linear_options()), include))
        # Weighed last line first: the first direct match found decides.
        self._rules = rules[::-1]

    def match_file(self, path: str) -> bool:
        """Whether `path` (relative, `/`-separated, a folder ending in `/`) is matched."""
        # A name that is not valid UTF-8 keeps one character per undecodable byte,
        # as `?` and `*` count it.
        text = path.encode("utf-8", "replace")
        above: bool | None = None
        for rule in self._rules:
            match = rule.regex.match(text)
            if match is None:
                continue
            if rule.folder_group is None or match.group(rule.folder_group) is None:
                return rule.include
            if above is None:
                above = rule.include
        return bool(above)
