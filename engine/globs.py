"""Globs and .gitignore lines, matched in time linear in the path.

`pathspec` reads each line as git does (negation, anchoring, `**`, folder-only
patterns) and turns it into a regular expression; Python's `re` would match those
by backtracking, so a line like `*a*a*a*a*zz` against one long name takes seconds
and grows with every star. Here each expression is compiled by RE2 instead, which
matches in one pass over the path whatever the pattern. The rules are weighed as
pathspec's `GitIgnoreSpec` weighs them: the last rule that matches the path itself
decides; failing that, the last rule that matches a folder above it. Each
expression is searched for, as pathspec does (most begin with `^`).
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


def _rule(line: str) -> _Rule | None:
    """The rule of one line; None for a blank line, a comment, or a line pathspec or
    RE2 cannot read (skipped, as one bad line must not break every later walk)."""
    try:
        regex, include = GitIgnoreSpecPattern.pattern_to_regex(line)
        if regex is None or include is None:
            return None
        return _Rule(re2.compile(regex.encode("utf-8", "surrogatepass"), linear_options()), include)
    except (ValueError, re2.error):
        return None


def _any_of(rules: list[_Rule]) -> Any:
    """One expression that matches where any rule does (None when RE2 finds it too
    large): most paths match no rule, and one call tells so."""
    if not rules:
        return None
    either = b"|".join(b"(?:" + rule.regex.pattern + b")" for rule in rules)
    options = linear_options()
    options.never_capture = True
    try:
        return re2.compile(either, options)
    except re2.error:
        return None


class Globs:
    """A gitignore-style matcher for `lines` (a name without `/` matches at any
    depth; `**` spans folders; `!` re-includes; a trailing `/` matches folders only).

    >>> Globs(["*.py", "!keep.py"]).match_file("src/a.py")
    True
    >>> Globs(["*.py", "!keep.py"]).match_file("src/keep.py")
    False
    """

    __slots__ = ("_any", "_rules")

    def __init__(self, lines: Iterable[str]) -> None:
        rules: list[_Rule] = []
        for line in lines:
            rule = _rule(line)
            if rule is not None:
                rules.append(rule)
        # Weighed last line first: the first direct match found decides.
        self._rules = rules[::-1]
        self._any = _any_of(rules)

    def match_file(self, path: str) -> bool:
        """Whether `path` (relative, `/`-separated, a folder ending in `/`) is matched."""
        # A name that is not valid UTF-8 keeps one character per undecodable byte,
        # as `?` and `*` count it.
        text = path.encode("utf-8", "replace")
        if self._any is not None and self._any.search(text) is None:
            return False  # most paths: one call, matched without the GIL
        above: bool | None = None
        for rule in self._rules:
            match = rule.regex.search(text)
            if match is None:
                continue
            if rule.folder_group is None or match.group(rule.folder_group) is None:
                return rule.include
            if above is None:
                above = rule.include
        return bool(above)
