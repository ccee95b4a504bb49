"""The sandbox: turning a client's path into a checked absolute path inside a root.

Every path is resolved with symlinks followed and the containment check runs on
the resolved path, so no spelling (`..`, absolute paths, links, look-alike
characters) leads outside a root. A target that does not exist yet is resolved
through its parent. The result is canonical (no symlink in it), and every access
afterwards opens it through `nofollow`, which follows no symlink: what changes
between this check and an access (a folder swapped for a link) makes the access
fail, never lead elsewhere.

The journal's files are refused by identity (device and inode) and by resolved
path, wherever `--journal` puts them; a hard link is refused as a possible secret
under another name.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import threading
import unicodedata
from collections.abc import Callable, Sequence
from typing import TypedDict

import msgspec

from .characters import deceptive_character
from .credentials import secret_content
from .errors import Code, LedgerError, not_a_folder
from .nonutf8 import escape_text, unescape_path
from .oserrors import os_error
from .policy import internal_part, secret_reason

__all__ = [
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "ResolveOptions",
    "Resolved",
    "Workspace",
    "inside_root",
    "nearest_existing",
]

MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096


class ResolveOptions(TypedDict, total=False):
    """How `Workspace.resolve` treats a path: its keyword arguments, for callers
    that pass them on."""

    must_exist: bool
    field: str
    allow_root: bool
    follow_last: bool
    creates: bool


class Resolved(msgspec.Struct, frozen=True, kw_only=True):
    """A path that passed the sandbox: absolute, resolved, inside `root`."""

    path: str
    root: str
    exists: bool
    is_dir: bool
    #: Folders above a new target that do not exist yet, outermost first.
    missing: tuple[str, ...] = ()


def inside_root(path: str, root: str) -> str:
    """`path` relative to `root`, both resolved and absolute, `path` inside `root`.

    A prefix cut: os.path.relpath would re-normalise both and walk them, which
    is most of the cost of a resolve, for an answer already known.

    >>> inside_root("/w/src/a.py", "/w"), inside_root("/w", "/w"), inside_root("/a", "/")
    ('src/a.py', '.', 'a')
    """
    if path == root:
        return "."
    return path[len(root.rstrip(os.sep)) + 1 :]


class Workspace:
    """The allowed roots and the path rules that keep every call inside them."""

    def __init__(self, roots: list[str], *, allow_secrets: bool = False) -> None:
        if not roots:
            raise LedgerError(Code.ROOTS_EMPTY)
        self.roots: tuple[str, ...] = tuple(os.path.realpath(root) for root in roots)
        self.allow_secrets = allow_secrets
        # What is inside each root starts with this (a root is never empty).
        self._prefixes = tuple(root.rstrip(os.sep) + os.sep for root in self.roots)
        # The journal: its files by identity, its paths (a file, or a folder and
        # everything below it) by resolved path, and the path whose ancestors
        # cannot be moved or deleted.
        self._journal_ids: frozenset[tuple[int, int]] = frozenset()
        self._journal_paths: frozenset[str] = frozenset()  # the files and the trees
        self._journal_trees: tuple[str, ...] = ()  # what lies below a tree starts so
        self._journal_db: str | None = None

    def protect_journal(self, db: str) -> None:
        """Refuse the journal at `db` to every tool: its files, sidecars and folder.

        The folder is protected whole unless it is a root or holds one; then the
        database, its `-wal`/`-shm`/`-journal` sidecars and the journal's own
        subfolders are.
        """
        db = os.path.realpath(db)
        folder = os.path.dirname(db)
        trees = [os.path.join(folder, "owners"), os.path.join(folder, "locks")]
        if not any(
            root == folder or root.startswith(folder.rstrip(os.sep) + os.sep) for root in self.roots
        ):
            trees.append(folder)
        paths = [db] + [db + suffix for suffix in ("-wal", "-shm", "-journal")]
        ids = set()
        for path in [*paths, *trees]:
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:
                continue
            ids.add((st.st_dev, st.st_ino))
        self._journal_ids = frozenset(ids)
        self._journal_paths = frozenset(paths + trees)
        self._journal_trees = tuple(tree + os.sep for tree in trees)
        self._journal_db = db

    def resolve(
        self,
        raw: object,
        *,
        must_exist: bool = True,
        field: str = "path",
        allow_root: bool = True,
        follow_last: bool = True,
        creates: bool = False,
    ) -> Resolved:
        """Check a client's path and resolve it inside a root.

        With `follow_last` false, a symbolic link as the last component is the
        result itself (in its resolved folder), not what it leads to: a patch,
        a delete and a move change links as git, `rm` and `mv` do.

        With `creates`, the call may make the path: each name it would create
        (the target and its missing folders, as resolved) must hold no
        deceptive character (`characters.deceptive_character`). Names that
        exist already stay usable: they can be read, changed, moved and deleted.

        Raises VALIDATION (not a string, empty, NUL, unencodable, too long, a
        new name with a deceptive character), NOT_ALLOWED (outside every root),
        NOT_FOUND (missing when `must_exist`, or a missing parent), SECRET_DENIED,
        and FILE_POLICY_DENIED (`.git/`, `.ledgerfs/`, symlink loops, devices,
        fifos, sockets).
        """
        if not isinstance(raw, str):
            raise LedgerError(
                Code.VALIDATION,
                f"{field} must be a string, got {type(raw).__name__}.",
                details={"field": field},
            )
        text = _validated(raw, field)
        # os.path.join, for a text known to be non-empty.
        candidate = text if text.startswith(os.sep) else self._prefixes[0] + text
        if not follow_last and os.path.islink(candidate):
            return self._resolve_link(text, candidate, field)
        resolved, st = _realpath(candidate, text)
        root = self._root_of(resolved)
        if root is None:
            raise LedgerError(
                Code.NOT_ALLOWED,
                f"{text!r} resolves outside the allowed directories.",
                path=text,
                details={"resolved": resolved, "roots": list(self.roots)},
            )
        if resolved == root and not allow_root:
            raise LedgerError(
                Code.FILE_POLICY_DENIED, "A root folder itself cannot be changed.", path=text
            )
        self._check_policy(text, resolved, root)
        self._check_journal(text, resolved, st, replaced=not allow_root)
        result = self._with_state(text, resolved, root, st, must_exist=must_exist)
        if creates and not result.exists:
            _check_new_names([*result.missing, result.path], text, field)
        return result

    def beneath(self, anchor: Resolved, rest: str, text: str, field: str) -> Resolved:
        """A new path under `anchor`, an entry the same change removes first.

        Nothing on disk below `anchor` is consulted: what is there now (a link,
        a file, a folder's old contents) is gone by the time the path is made,
        so the path is `anchor`'s own, resolved without following it, joined
        with `rest`, and `anchor` with every folder down to the path is missing
        (made by the change, after the removal). The names are checked as any
        new name is. `text` is the path as the client gave it.

        Raises VALIDATION (a deceptive new name, a `.` or `..` step),
        FILE_POLICY_DENIED and SECRET_DENIED as `resolve` does.
        """
        steps = rest.split("/")
        if any(step in ("", ".", "..") for step in steps):
            raise LedgerError(
                Code.VALIDATION,
                f"{text!r} has an empty, '.' or '..' step below a path the change removes.",
                path=text,
                details={"field": field, "reason": "path_step"},
            )
        folders = [anchor.path]
        for step in steps[:-1]:
            folders.append(os.path.join(folders[-1], step))
        path = os.path.join(folders[-1], steps[-1])
        self._check_policy(text, path, anchor.root)
        self._check_journal(text, path, None, replaced=False)
        _check_new_names([*folders, path], text, field)
        return Resolved(
            path=path, root=anchor.root, exists=False, is_dir=False, missing=tuple(folders)
        )

    def _resolve_link(self, text: str, candidate: str, field: str) -> Resolved:
        """A link itself: its folder resolved and checked, its name kept."""
        folder, name = os.path.split(candidate)
        parent = self.resolve(folder, field=field)
        path = os.path.join(parent.path, name)
        root = self._root_of(path)
        if root is None or path == root:
            raise LedgerError(
                Code.NOT_ALLOWED,
                f"{text!r} resolves outside the allowed directories.",
                path=text,
                details={"resolved": path, "roots": list(self.roots)},
            )
        self._check_policy(text, path, root)
        self._check_journal(text, path, None, replaced=True)
        return Resolved(path=path, root=root, exists=True, is_dir=False)

    def check_link_target(self, link: str, target: bytes, label: str) -> None:
        """Refuse a symbolic link at `link` (resolved) whose `target` leaves every root.

        The target is checked as written, with `..` folded, and again after
        resolving the links it passes through on the way.

        Raises VALIDATION (an empty target or one with a NUL byte) and
        NOT_ALLOWED naming the target.
        """
        text = os.fsdecode(target)
        if not text or "\x00" in text:
            raise LedgerError(
                Code.VALIDATION,
                f"The link {label} has an empty target or one with a NUL byte.",
                path=label,
                details={"link": label, "reason": "bad_link_target"},
            )
        joined = os.path.join(os.path.dirname(link), text)
        for candidate in (os.path.normpath(joined), os.path.realpath(joined)):
            if self._root_of(candidate) is None:
                raise LedgerError(
                    Code.NOT_ALLOWED,
                    f"The link {label} would point to {text!r}, outside the allowed "
                    "directories; such a link is never created.",
                    path=label,
                    details={
                        "link": label,
                        "target": text,
                        "resolved": candidate,
                        "roots": list(self.roots),
                    },
                )

    def _root_of(self, resolved: str) -> str | None:
        for root, prefix in zip(self.roots, self._prefixes, strict=True):
            if resolved == root or resolved.startswith(prefix):
                return root
        return None

    def _check_policy(self, text: str, resolved: str, root: str) -> None:
        inside = "" if resolved == root else inside_root(resolved, root)
        _policy_allows(text, inside, self.allow_secrets)

    def refuse_journal(self, path: str) -> None:
        """Raise FILE_POLICY_DENIED if the canonical `path` is a journal file or
        lies in its folder, by path (`vet` refuses what a load opened by identity)."""
        self._check_journal(path, path, None, replaced=False)

    def _check_journal(
        self, text: str, resolved: str, st: os.stat_result | None, *, replaced: bool
    ) -> None:
        if self._journal_db is None:
            return
        hit = resolved in self._journal_paths or resolved.startswith(self._journal_trees)
        if not hit and st is not None:
            hit = (st.st_dev, st.st_ino) in self._journal_ids
        if not hit and replaced:
            # Moving or deleting a folder that holds the journal would take it along.
            hit = self._journal_db.startswith(resolved.rstrip(os.sep) + os.sep)
        if hit:
            raise LedgerError(
                Code.FILE_POLICY_DENIED,
                f"{text!r} is the engine's journal; it is never read or changed through a tool.",
                path=text,
                details={"reason": "journal"},
            )

    def vet(self, path: str, st: os.stat_result, data: bytes | None) -> None:
        """Refuse what a load opened: the journal by identity, a hard link, secret bytes.

        Called by every load with the opened file's stat (`data` None), then with
        its bytes. Raises FILE_POLICY_DENIED (the journal) and SECRET_DENIED (a
        file with several names, or bytes in a known credential format).
        """
        if data is None:
            if (st.st_dev, st.st_ino) in self._journal_ids:
                raise LedgerError(
                    Code.FILE_POLICY_DENIED,
                    "This file is the engine's journal; no tool reads or changes it.",
                    path=path,
                    details={"reason": "journal"},
                )
            if not self.allow_secrets and st.st_nlink > 1:
                raise LedgerError(
                    Code.SECRET_DENIED,
                    "This file has other names (hard links); one of them may be a secret.",
                    path=path,
                    details={"reason": "hard_link", "links": st.st_nlink},
                )
            return
        if not self.allow_secrets:
            found = secret_content(data)
            if found is not None:
                raise LedgerError(
                    Code.SECRET_DENIED,
                    f"The file's content is a {found}.",
                    path=path,
                    details={"reason": f"content: {found}"},
                )

    def _with_state(
        self,
        text: str,
        resolved: str,
        root: str,
        st: os.stat_result | None,
        *,
        must_exist: bool,
    ) -> Resolved:
        try:
            if st is None:
                st = os.stat(resolved)
        except FileNotFoundError:
            if must_exist:
                raise LedgerError(Code.NOT_FOUND, f"{text!r} does not exist.", path=text) from None
            missing = _missing_folders(resolved, root, text)
            return Resolved(path=resolved, root=root, exists=False, is_dir=False, missing=missing)
        except OSError as exc:
            raise os_error(exc, text, resolving=True) from exc
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            raise LedgerError(
                Code.FILE_POLICY_DENIED,
                f"{text!r} is not a regular file or folder.",
                path=text,
                details={"reason": "special_file", "mode": stat.filemode(st.st_mode)},
            )
        return Resolved(path=resolved, root=root, exists=True, is_dir=stat.S_ISDIR(st.st_mode))


def _missing_folders(resolved: str, root: str, text: str) -> tuple[str, ...]:
    """The folders between `root` and a new target that do not exist yet."""
    parent = os.path.dirname(resolved)
    folder = nearest_existing(parent, lambda p: len(p) <= len(root) or os.path.lexists(p))
    missing = _folders_between(folder, parent)
    if not os.path.isdir(folder):
        raise not_a_folder(text, f"{inside_root(folder, root)!r} in {text!r}", folder=folder)
    return tuple(missing)


def nearest_existing(path: str, exists: Callable[[str], bool]) -> str:
    """`path`, or the nearest folder above it that `exists` (`/` when none does).

    Found by bisection, a few probes however deep `path` is: a folder that exists
    has every folder above it existing.

    >>> nearest_existing("/a/b/c/d", lambda p: p in {"/", "/a", "/a/b"})
    '/a/b'
    """
    if exists(path):
        return path
    parts = path.split(os.sep)
    # The folder of the first k parts exists at k == low (`/`), not at k == high.
    low, high = 1, len(parts)
    while high - low > 1:
        middle = (low + high) // 2
        if exists(os.sep.join(parts[:middle])):
            low = middle
        else:
            high = middle
    return os.sep.join(parts[:low]) or os.sep


def _folders_between(top: str, bottom: str) -> list[str]:
    """The folders below `top` down to `bottom` (included), shallowest first.

    >>> _folders_between("/a", "/a/b/c")
    ['/a/b', '/a/b/c']
    """
    if bottom == top:
        return []
    found = []
    cut = bottom.find(os.sep, len(top.rstrip(os.sep)) + 1)
    while cut != -1:
        found.append(bottom[:cut])
        cut = bottom.find(os.sep, cut + 1)
    return [*found, bottom]


# How many answers the pure checks keep: a client's working set of paths, with
# memory bounded even for paths of the longest kind (a few MiB).
_KEPT = 512


def refuse_by_name(
    path: str, parts: Sequence[str], allow_secrets: bool, spelled: Sequence[str] = ()
) -> None:
    """Refuse `path` for the names of its `parts` (or `spelled`, as the client wrote
    it): FILE_POLICY_DENIED inside `.git`/`.ledgerfs`, SECRET_DENIED for a secret's
    name unless `allow_secrets`."""
    part = internal_part(parts)
    if part is not None:
        raise LedgerError(
            Code.FILE_POLICY_DENIED,
            f"{part}/ is managed outside the engine; it is never read or changed here.",
            path=path,
            details={"reason": f"inside {part}/"},
        )
    reason = None if allow_secrets else secret_reason(parts) or secret_reason(spelled)
    if reason is not None:
        raise LedgerError(Code.SECRET_DENIED, path=path, details={"reason": reason})


@functools.lru_cache(maxsize=_KEPT)
def _policy_allows(text: str, inside: str, allow_secrets: bool) -> bool:
    """Refuse a path inside `.git`/`.ledgerfs`, or a secret by its resolved
    (`inside` its root) or spelled (`text`) name; True if allowed.

    A function of its arguments alone, so an answer is kept (a refusal, raised,
    is not): a client touches the same few paths again and again.
    """
    parts = inside.split(os.sep) if inside else []
    # The name as the client spelled it counts too: a link named `.env`
    # is a secret whatever it points to.
    spelled = [part for part in text.split(os.sep) if part not in ("", ".")]
    refuse_by_name(text, parts, allow_secrets, spelled)
    return True
    # The name as the client spelled it counts too: a link named `.env`
    # is a secret whatever it points to.
    spelled = [part for part in text.split(os.sep) if part not in ("", ".")]
    reason = secret_reason(parts) or secret_reason(spelled)
    if reason is not None:
        raise LedgerError(Code.SECRET_DENIED, path=text, details={"reason": reason})
    return True


@functools.lru_cache(maxsize=_KEPT)
def _validated(raw: str, field: str) -> str:
    """`raw` checked and unescaped (kept, as `_policy_allows` keeps its answers)."""
    if not raw.strip():
        raise LedgerError(Code.VALIDATION, f"{field} is empty.", details={"field": field})
    if "\x00" in raw:
        raise LedgerError(
            Code.VALIDATION, f"{field} contains a NUL byte.", details={"field": field}
        )
    try:
        # surrogateescape: a name that is not UTF-8 reaches here as the bytes it
        # is (from a patch, or from the escaped form); a client's lone surrogate
        # never does (requests refuse it), and any other surrogate fails here.
        encoded = raw.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise LedgerError(
            Code.VALIDATION, f"{field} is not valid UTF-8.", details={"field": field}
        ) from exc
    if len(encoded) > MAX_PATH_BYTES:
        raise LedgerError(
            Code.VALIDATION,
            f"{field} is longer than {MAX_PATH_BYTES} bytes.",
            details={"field": field, "bytes": len(encoded)},
        )
    # A name that is not UTF-8 comes back in the escaped form of `nonutf8`.
    text = unescape_path(raw)
    for name in text.split("/"):
        _check_name(name, field)
    return text


def _check_name(name: str, field: str) -> None:
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise LedgerError(
            Code.VALIDATION,
            f"A name in {field} is longer than {MAX_NAME_BYTES} bytes.",
            details={"field": field, "name": name[:64] + "..."},
        )
    if name.isascii():
        return  # NFKC folds no ASCII character
    # Full-width dots and slashes read as `..` or `/` but are ordinary names here;
    # refuse them so what a person reads is what the engine touches.
    folded = unicodedata.normalize("NFKC", name)
    if folded != name and (folded in {".", ".."} or "/" in folded or "\\" in folded):
        raise LedgerError(
            Code.VALIDATION,
            f"A name in {field} imitates a path separator or dot folder.",
            details={"field": field, "name": name},
        )


def _check_new_names(paths: list[str], text: str, field: str) -> None:
    """Refuse a name the call would create that holds a deceptive character (VALIDATION).

    Only new names: a file that has such a name already (made by another
    program) can still be read, moved to a clean name or deleted.
    """
    for path in paths:
        name = os.path.basename(path)
        found = deceptive_character(name)
        if found is None:
            continue
        point, why = found
        shown = escape_text(name).encode("unicode_escape").decode()
        raise LedgerError(
            Code.VALIDATION,
            f"The new name {shown!r} in {field} holds {point} ({why}); names that "
            "hide or reorder characters, or break lines, are never created.",
            path=text,
            details={
                "field": field,
                "name": shown,
                "code_point": point,
                "reason": f"{point}: {why}",
            },
            suggestion="choose a name without invisible, format or control characters",
        )


def _realpath(candidate: str, text: str) -> tuple[str, os.stat_result | None]:
    """The canonical path of `candidate`, and its stat when it exists.

    A link replaced while it is read (EINVAL from readlink: it is no longer a
    link) is asked again; a path that keeps changing is NOT_ALLOWED.
    """
    for _ in range(_ATTEMPTS):
        try:
            return _canonical(candidate)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise os_error(exc, text, resolving=True) from exc
            changing = exc
    raise os_error(changing, text, resolving=True) from changing


def _canonical(candidate: str) -> tuple[str, os.stat_result | None]:
    """The canonical path of `candidate`, and its stat when it exists.

    An existing path is resolved by the kernel: an O_PATH descriptor (which opens
    nothing, not even a fifo) read back through /proc, one walk instead of an
    lstat per component. Elsewhere, and for a path that does not exist yet,
    `os.path.realpath` resolves what exists, following every link, including a
    dangling one at the end.
    """
    try:
        if _PROC_FD:
            for _ in range(_ATTEMPTS):
                found = _resolve_open(candidate)
                if found is not None:
                    return found
        return os.path.realpath(candidate, strict=True), None
    except FileNotFoundError:
        return os.path.realpath(candidate, strict=False), None


def _resolve_open(candidate: str) -> tuple[str, os.stat_result] | None:
    """The /proc name of an O_PATH descriptor of `candidate` and its stat, or None
    when the name is not the candidate's file's any more (the caller asks again).

    A file renamed over or deleted between the open and the readlink is named
    "<path> (deleted)"; its stat, taken after the name, then shows no links left.
    A stat with links proves the name was live, though not that it is still the
    candidate's (`_still_leads_there`). The descriptor stays open until that is
    settled: it keeps the file's inode from being freed, and its number from
    being given to a new file put at the candidate's name meanwhile.
    """
    fd = os.open(candidate, os.O_PATH | os.O_CLOEXEC)
    try:
        resolved = os.readlink(str(fd), dir_fd=_FD_FOLDER.fd())
        st = os.fstat(fd)
        if st.st_nlink > 0 and _still_leads_there(candidate, resolved, st):
            return resolved, st
        return None
    finally:
        os.close(fd)


def _still_leads_there(candidate: str, resolved: str, st: os.stat_result) -> bool:
    """Whether `candidate` still leads to the file its descriptor named `resolved`.

    A file swapped out of its name (renameat2 RENAME_EXCHANGE: `FileOps.swap_in`
    leaves the replaced file under a temp name until it unlinks it) keeps a link,
    under the other name, which /proc then reports. Where the last names agree,
    nothing was swapped away from the candidate's name; elsewhere (a swap, or a
    link to a file named otherwise) one stat of the candidate tells. The caller
    holds a descriptor of the file, so no other file can have its inode number.
    """
    if os.path.basename(resolved) == os.path.basename(candidate):
        return True
    try:
        now = os.stat(candidate)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


class _FdFolder:
    """A descriptor of this process's /proc/<pid>/fd, for reading descriptors' names.

    Opened once rather than walking /proc/self at every resolve (a third of the
    readlink's cost). A forked child's copy would name its parent's descriptors,
    so a child forgets it at the fork and opens its own.
    """

    def __init__(self) -> None:
        self._fd: int | None = None
        self._lock = threading.Lock()

    def fd(self) -> int:
        fd = self._fd
        if fd is None:
            with self._lock:
                if self._fd is None:
                    self._fd = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                fd = self._fd
        return fd

    def forget(self) -> None:
        """In a forked child: drop the parent's folder (the next resolve opens ours)."""
        fd, self._fd = self._fd, None
        self._lock = threading.Lock()
        if fd is not None:
            os.close(fd)


_FD_FOLDER = _FdFolder()
os.register_at_fork(after_in_child=_FD_FOLDER.forget)


# A path replaced this often in a row while being resolved falls back to realpath.
_ATTEMPTS = 3


# Whether /proc shows this process's descriptors as paths (Linux with /proc mounted).
_PROC_FD = hasattr(os, "O_PATH") and os.path.isdir("/proc/self/fd")
