"""The one boundary where an OSError met before any file changed becomes an envelope.

Most specific first, the same errno always gives the same code, whichever call met
it: a missing component, or a component that is not a folder (ENOTDIR), is
NOT_FOUND; a name too long is VALIDATION; a symlink met while *resolving* is a
loop (FILE_POLICY_DENIED), while met on an *access* of a path already resolved it
means a folder was swapped for a link since (NOT_ALLOWED); a process out of
descriptors is TOOL_UNAVAILABLE (the server's limit, not the file); permissions
and everything else are FILE_POLICY_DENIED. The errno's name rides in `details`.

Errors met while applying a transaction are not mapped here: they become the
cause inside a ROLLBACK_ envelope (`transaction`).
"""

from __future__ import annotations

import errno

from .errors import Code, LedgerError, errno_name

__all__ = ["os_error", "out_of_descriptors"]


def os_error(exc: OSError, path: str | None = None, *, resolving: bool = False) -> LedgerError:
    """The envelope for an OSError met on `path` before anything changed.

    >>> os_error(NotADirectoryError(20, "Not a directory"), "a/b").code.value
    'NOT_FOUND'
    >>> loop = OSError(40, "Too many levels of symbolic links")
    >>> os_error(loop, "a").code.value, os_error(loop, "a", resolving=True).code.value
    ('NOT_ALLOWED', 'FILE_POLICY_DENIED')
    >>> os_error(OSError(24, "Too many open files"), "a").code.value
    'TOOL_UNAVAILABLE'
    """
    name = errno_name(exc)
    if path is None and isinstance(exc.filename, str):
        path = exc.filename
    details = {"errno": name}
    match exc.errno:
        case errno.ENOENT | errno.ENOTDIR:
            return LedgerError(
                Code.NOT_FOUND, f"{path!r} does not exist.", path=path, details=details
            )
        case errno.ENAMETOOLONG:
            return LedgerError(
                Code.VALIDATION, f"{path!r} is too long.", path=path, details=details
            )
        case errno.EISDIR:
            return LedgerError(
                Code.VALIDATION, f"{path!r} is a folder.", path=path, details=details
            )
        case errno.ELOOP if resolving:
            return LedgerError(
                Code.FILE_POLICY_DENIED,
                f"{path!r} leads into a symlink loop.",
                path=path,
                details={"reason": "symlink_loop", **details},
            )
        case errno.ELOOP | errno.EXDEV if not resolving:
            return _changed(path, details)
        case errno.EINVAL if resolving:
            # readlink of a name that stopped being a link while it was resolved.
            return _changed(path, details)
        case errno.EMFILE | errno.ENFILE:
            return LedgerError(
                Code.TOOL_UNAVAILABLE,
                f"The server has no file descriptor left ({exc.strerror or exc}).",
                path=path,
                details=details,
                suggestion="raise the server's open-file limit (ulimit -n) and restart it",
            )
    return LedgerError(
        Code.FILE_POLICY_DENIED,
        f"{path!r} cannot be accessed: {exc.strerror or exc}.",
        path=path,
        details=details,
    )


def out_of_descriptors(exc: OSError) -> bool:
    """Whether `exc` says the process or the system has no descriptor left: never a
    property of the file, so a walk that met it must fail, not pass the file over."""
    return exc.errno in (errno.EMFILE, errno.ENFILE)


def _changed(path: str | None, details: dict[str, str]) -> LedgerError:
    return LedgerError(
        Code.NOT_ALLOWED,
        f"{path!r} changed while it was opened: a folder on the way is now a link.",
        path=path,
        details={"reason": "path_changed", **details},
        suggestion="check the path with list_allowed_directories and get_file_info",
    )
