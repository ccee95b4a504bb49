"""Unexpected failures: each logged once, with its traceback, under an incident id.

An exception that no boundary mapped to a code is a defect (of ledgerfs or of what
it runs on). The caller gets an envelope whose `details.incident` names the log
entry, so "report this to the operator" can be acted on; the log (the `ledgerfs`
loggers, which `ledgerfs serve` sends to stderr or `--log-file`, and an embedder's
own logging configuration otherwise) gets the traceback.

What such an entry never holds: an exception's message, nor any argument. A
message can carry whatever the failing code held (a line of a file, an argument's
value, a token read from the environment), so the entry names only the exception's
type (its qualified name), an OSError's errno name, and each frame's file, line,
function and source line: ledgerfs's own code and its libraries', never data.
"""

from __future__ import annotations

import logging
import secrets
import textwrap
import traceback

from ..journal import JournalError
from .errors import errno_name

__all__ = ["describe", "record_incident", "scrubbed_traceback"]

log = logging.getLogger(__name__)

#: How deep a chain of causes (or a group's members) the traceback follows.
_MAX_CHAIN = 8


def record_incident(exc: BaseException, what: str) -> str:
    """Log `exc` (what failed, its type, its traceback) under a new incident id; return it.

    `what` is the code's own words (never an argument's value).
    """
    incident = secrets.token_hex(4)
    log.error(
        "incident %s: %s failed unexpectedly: %s\n%s",
        incident,
        what,
        describe(exc),
        scrubbed_traceback(exc),
    )
    return incident


def describe(exc: BaseException) -> str:
    """An exception as the log may show it: its type, and an errno name or a journal
    error's kind, never its message.

    >>> describe(FileNotFoundError(2, "No such file", "/secret/x"))
    'FileNotFoundError (ENOENT)'
    >>> describe(ValueError("the content of a file"))
    'ValueError'
    """
    name = _type_name(exc)
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{name} ({errno_name(exc)})"
    if isinstance(exc, JournalError):
        return f"{name} ({exc.kind}{', ' + exc.errno_name if exc.errno_name else ''})"
    return name


def scrubbed_traceback(exc: BaseException) -> str:
    """`exc`'s traceback as Python prints it, causes and group members included, with
    every exception's message left out (see the module docstring).

    >>> words = "private" + " words"  # not in the source line the traceback shows
    >>> try:
    ...     raise KeyError(words)
    ... except KeyError as caught:
    ...     text = scrubbed_traceback(caught)
    >>> "private words" in text, text.splitlines()[-1]
    (False, 'KeyError')
    """
    return "".join(_chain(exc, seen=set(), depth=0)).rstrip("\n")


def _chain(exc: BaseException, seen: set[int], depth: int) -> list[str]:
    seen.add(id(exc))
    lines: list[str] = []
    cause = exc.__cause__
    context = None if exc.__suppress_context__ else exc.__context__
    if depth < _MAX_CHAIN:
        if cause is not None and id(cause) not in seen:
            lines += _chain(cause, seen, depth + 1)
            lines.append("\nThe above exception was the direct cause of the following:\n\n")
        elif context is not None and id(context) not in seen:
            lines += _chain(context, seen, depth + 1)
            lines.append("\nDuring handling of the above exception, another occurred:\n\n")
    if exc.__traceback__ is not None:
        lines.append("Traceback (most recent call last):\n")
        lines += traceback.extract_tb(exc.__traceback__).format()
    lines.append(describe(exc) + "\n")
    if isinstance(exc, BaseExceptionGroup) and depth < _MAX_CHAIN:
        for index, member in enumerate(exc.exceptions, 1):
            if id(member) in seen:
                continue
            lines.append(f"  member {index} of {len(exc.exceptions)}:\n")
            lines.append(textwrap.indent("".join(_chain(member, seen, depth + 1)), "  "))
    return lines


def _type_name(exc: BaseException) -> str:
    kind = type(exc)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
