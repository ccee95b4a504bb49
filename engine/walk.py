"""The sandboxed walk under a folder: what search and trees may show.

An entry is yielded only if the sandbox would let a client read it: nothing inside
`.git/` or `.ledgerfs/`, no secret (unless secrets are allowed), no device, fifo
or socket, and no symlink that leads outside the roots or to any of those. Folder
links are never followed, so a walk cannot loop or leave the roots. `.gitignore`
files are honoured on request, nested ones relative to their own folder.

A walk holds the folder it lists open (opened without following links) and
opens that folder's files relative to it (`Walk.open`): a file's sandbox check
is the walk that reached it, not a resolve of its whole path again. At most one
folder is held at a time; coming back to a folder after its subfolders opens it
again by its path, through the same no-link opener.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Generator, Iterator, Sequence

import msgspec

from .cancel import raise_if_cancelled
from .errors import Code, LedgerError
from .fileops import check_opened, open_at
from .globs import Globs
from .nofollow import open_beneath, open_dir, stat_beneath
from .oserrors import out_of_descriptors
from .paths import Resolved, Workspace, inside_root, refuse_by_name
from .policy import internal_part, secret_reason
from .reads import read_content

__all__ = ["Walk", "WalkEntry", "folder_contents", "globs"]

_GITIGNORE_MAX = 1024 * 1024


class WalkEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One entry the walk may show: its resolved path and where it sits."""

    path: str
    #: Relative to the walked folder, with `/` separators.
    relative: str
    name: str
    is_dir: bool
    depth: int
    size: int | None = None
    #: A link to a file inside the roots (read through the sandbox, as `read_file`).
    link: bool = False


def globs(patterns: Sequence[str]) -> Globs | None:
    """A gitignore-style matcher for `patterns` (a name without `/` matches at any
    depth; `**` spans folders), or None for no patterns.

    >>> spec = globs(["*.py"])
    >>> spec is not None and spec.match_file("src/a.py")
    True
    """
    if not patterns:
        return None
    return Globs(patterns)


class _Ignore(msgspec.Struct, frozen=True):
    base: str  # the folder of the .gitignore relative to the root, "" at the root
    spec: Globs


class Walk:
    """Walk `folder` (resolved, inside a root) depth-first, in name order."""

    def __init__(
        self,
        workspace: Workspace,
        folder: Resolved,
        *,
        gitignore: bool = True,
        exclude: Sequence[str] = (),
        max_depth: int | None = None,
        sizes: bool = True,
    ) -> None:
        self.workspace = workspace
        self.folder = folder
        self.gitignore = gitignore
        self.exclude = globs(exclude)
        self.max_depth = max_depth
        #: Whether file entries carry their size: one stat a file, which a walk
        #: that opens its files (and so learns their sizes there) goes without.
        self.sizes = sizes
        prefix = "" if folder.path == folder.root else inside_root(folder.path, folder.root)
        #: The walked folder relative to its root, "" for the root itself.
        self._prefix = prefix.replace(os.sep, "/")
        self._inside = prefix.split(os.sep) if prefix else []
        #: The folder held open (its path and descriptor), for reading its files.
        self._held: tuple[str, int] | None = None

    def entries(self) -> Generator[WalkEntry, None, None]:
        """Every entry below the folder, a folder before what it holds.

        Folders that cannot be listed are passed over, as a listing race or a
        permission would otherwise end the whole walk; a process out of
        descriptors (EMFILE, ENFILE) raises, as passing folders over would lie.
        """
        if self._hidden():
            return
        # The .gitignore files of the folders above apply too, as git applies them
        # (the walked folder's own is read with its listing).
        ignores: list[_Ignore] = []
        base = ""
        for part in ["", *self._inside][:-1]:
            base = f"{base}/{part}" if base else part
            folder = os.path.join(self.folder.root, base)
            if os.path.lexists(os.path.join(folder, ".gitignore")):
                ignores = self._ignores_in(folder, base, ignores)
        # An explicit stack of folder listings, not recursion: a folder an agent
        # made thousands of levels deep is walked like a shallow one. Each step
        # costs the same at any depth: an entry's folders were admitted before it,
        # so only its own name is checked.
        stack = [self._listing(self.folder.path, "", 1, ignores)]
        try:
            while stack:
                found = next(stack[-1], None)
                if found is None:
                    stack.pop()
                    continue
                entry, outer = found
                yield entry
                if entry.is_dir and (self.max_depth is None or entry.depth < self.max_depth):
                    stack.append(self._listing(entry.path, entry.relative, entry.depth + 1, outer))
        finally:
            self._release()

    def open(self, entry: WalkEntry, max_size: int) -> tuple[int, int]:
        """A descriptor of a file entry the walk yielded, opened as the sandbox
        lets it be read, and the size its stat gave: the descriptor is the
        caller's to read, to vet the bytes of (`Workspace.vet`: secret content)
        and to close.

        A file is opened relative to its folder's descriptor, its name not
        followed, and checked by its stat as every load is (the journal, hard
        links, the size); a link is resolved and opened as `read_file` opens it.
        Raises LedgerError (refused), TooLarge, and OSError (gone, or replaced by
        a link, a folder or a special file since it was listed).
        """
        if entry.link:
            target = self.workspace.resolve(entry.path)
            fd = open_beneath(target.path, os.O_RDONLY | os.O_NONBLOCK)
            try:
                st = os.fstat(fd)
                check_opened(target.path, st, max_size, self.workspace.vet)
            except BaseException:
                os.close(fd)
                raise
            return fd, st.st_size
        self.workspace.refuse_journal(entry.path)
        # The entry's path is its folder's, a separator and its name.
        folder = entry.path[: -len(entry.name) - 1] or os.sep
        return open_at(
            self._folder_fd(folder), entry.name, entry.path, max_size, self.workspace.vet
        )

    def _folder_fd(self, folder: str) -> int:
        """A descriptor of `folder`: the one held, or the folder opened again."""
        if self._held is not None and self._held[0] == folder:
            return self._held[1]
        fd = open_dir(folder)
        self._hold(folder, fd)
        return fd

    def _hold(self, folder: str, fd: int) -> None:
        self._release()
        self._held = (folder, fd)

    def _release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            os.close(held[1])

    def _hidden(self) -> bool:
        """Whether the walked folder itself lies where nothing may be shown."""
        if internal_part(self._inside) is not None:
            return True
        return not self.workspace.allow_secrets and secret_reason([*self._inside, "-"]) is not None

    def _listing(
        self, folder: str, relative: str, depth: int, ignores: list[_Ignore]
    ) -> Iterator[tuple[WalkEntry, list[_Ignore]]]:
        """The entries of one folder the walk may show, each with the ignores that
        apply inside it (`ignores` plus the folder's own .gitignore)."""
        # Listed through a descriptor opened without following links: a folder
        # swapped for a link while the walk goes on lists nothing outside.
        try:
            fd = open_dir(folder)
        except OSError as exc:
            if out_of_descriptors(exc):
                raise
            return
        # Held, for opening the files listed here (`open`), until another folder is.
        self._hold(folder, fd)
        try:
            with os.scandir(fd) as scan:
                items = sorted(scan, key=lambda item: item.name)
            # Each entry's type (and size) now, while the descriptor holds the
            # folder: a DirEntry that must stat later would use it by number.
            types = [_type_of(item, sizes=self.sizes) for item in items]
        except OSError as exc:
            if out_of_descriptors(exc):
                raise
            return
        if any(item.name == ".gitignore" for item in items):
            base = self._from_root(relative) if relative else self._prefix
            ignores = self._ignores_in(folder, base, ignores)
        # The folder is canonical: a name is joined to it by a separator alone.
        above = folder if folder.endswith(os.sep) else folder + os.sep
        below = relative + "/" if relative else ""
        filtered = self.exclude is not None or bool(ignores)
        for index, (item, (kind, size)) in enumerate(zip(items, types, strict=True)):
            if index % _CANCEL_EVERY == 0:
                raise_if_cancelled()
            rel = below + item.name
            entry = self._admit(item, kind, size, above + item.name, rel, depth)
            if entry is None or (filtered and self._excluded(rel, entry.is_dir, ignores)):
                continue
            yield entry, ignores

    def _admit(
        self, item: os.DirEntry[str], kind: int, size: int | None, path: str, rel: str, depth: int
    ) -> WalkEntry | None:
        """The entry if the sandbox lets a client see it, else None.

        Only its own name is checked: the folders above it were admitted already.
        """
        allow_secrets = self.workspace.allow_secrets
        if _refused_name(item.name, allow_secrets):
            return None
        if kind == stat.S_IFLNK:
            return self._link(item, path, rel, depth)
        if kind == stat.S_IFDIR:
            if not allow_secrets and _secret_folder(item.name):
                return None  # a folder that holds only secrets (.ssh, .aws, ...)
            return WalkEntry(path=path, relative=rel, name=item.name, is_dir=True, depth=depth)
        if kind == stat.S_IFREG:
            return WalkEntry(
                path=path, relative=rel, name=item.name, is_dir=False, depth=depth, size=size
            )
        return None  # devices, fifos, sockets, and entries gone since the listing

    def _link(self, item: os.DirEntry[str], path: str, rel: str, depth: int) -> WalkEntry | None:
        # A link is shown only as a file the sandbox resolves (inside the roots, no
        # secret behind it); a link to a folder is never entered.
        try:
            target = self.workspace.resolve(path)
        except LedgerError:
            return None
        if target.is_dir:
            return None
        try:
            size = stat_beneath(target.path).st_size
        except OSError:
            return None
        return WalkEntry(
            path=path, relative=rel, name=item.name, is_dir=False, depth=depth, size=size, link=True
        )

    def _excluded(self, rel: str, is_dir: bool, ignores: list[_Ignore]) -> bool:
        probe = rel + "/" if is_dir else rel
        if self.exclude is not None and self.exclude.match_file(probe):
            return True
        probe = self._from_root(probe)
        for ignore in ignores:
            inner = probe[len(ignore.base) + 1 :] if ignore.base else probe
            if ignore.spec.match_file(inner):
                return True
        return False

    def _from_root(self, rel: str) -> str:
        return f"{self._prefix}/{rel}" if self._prefix else rel

    def _ignores_in(self, folder: str, relative: str, ignores: list[_Ignore]) -> list[_Ignore]:
        """`ignores` plus the folder's own .gitignore, if it has one we may read."""
        if not self.gitignore:
            return ignores
        path = os.path.join(folder, ".gitignore")
        try:
            target = self.workspace.resolve(path)
            data, _ = read_content(target, _GITIGNORE_MAX, self.workspace.vet)
        except (LedgerError, OSError):
            return ignores
        lines = data.decode("utf-8", errors="replace").splitlines()
        return [*ignores, _Ignore(relative, Globs(lines))]


#: Entries of one folder between two looks for a cancelled call.
_CANCEL_EVERY = 64


def _type_of(item: os.DirEntry[str], *, sizes: bool) -> tuple[int, int | None]:
    """An entry's file type (`stat.S_IFLNK`, `S_IFDIR`, `S_IFREG`, 0 for any other
    or gone) and, with `sizes`, a file's size.

    Without sizes the type is the listing's own (no system call) where the file
    system gives one.
    """
    try:
        if sizes:
            st = item.stat(follow_symlinks=False)
            return stat.S_IFMT(st.st_mode), st.st_size if stat.S_ISREG(st.st_mode) else None
        if item.is_symlink():
            return stat.S_IFLNK, None
        if item.is_dir(follow_symlinks=False):
            return stat.S_IFDIR, None
        return (stat.S_IFREG if item.is_file(follow_symlinks=False) else 0), None
    except OSError:
        return 0, None


# The name rules are functions of a name alone, and a tree repeats its names
# (`__init__.py`, `README.md`, `src`): their answers are kept.
_KEPT_NAMES = 4096


@functools.lru_cache(maxsize=_KEPT_NAMES)
def _refused_name(name: str, allow_secrets: bool) -> bool:
    """Whether the walk never shows an entry by this name: an internal folder, or
    a secret unless secrets are allowed."""
    if internal_part([name]) is not None:
        return True
    return not allow_secrets and secret_reason([name]) is not None


@functools.lru_cache(maxsize=_KEPT_NAMES)
def _secret_folder(name: str) -> bool:
    """Whether everything in a folder by this name is a secret (.ssh, .aws, ...)."""
    return secret_reason([name, "-"]) is not None


def folder_contents(
    workspace: Workspace, folder: Resolved, limit: int, *, links: bool = False
) -> tuple[list[str], list[str]]:
    """The files and the folders inside `folder` (folders deepest first), for
    deleting or copying it with everything in it; with `links`, symbolic links
    are listed among the files (as entries: never followed).

    Raises FILE_POLICY_DENIED for `.git/` or `.ledgerfs/`, a link (unless
    `links`), or a device, fifo or socket inside; SECRET_DENIED for a secret
    inside (unless secrets are allowed); VALIDATION past `limit` entries;
    OSError for the caller to map.
    """
    files: list[str] = []
    folders: list[str] = []
    inside = (
        [] if folder.path == folder.root else inside_root(folder.path, folder.root).split(os.sep)
    )

    # An explicit stack of (folder, the parts its entries are checked with, its
    # entries still to see), not recursion: a folder thousands of levels deep is
    # listed like a shallow one. Below the top an entry is checked with its
    # folder's name and its own: the folders above were checked on the way down.
    stack = [(folder.path, inside, _listed(folder.path))]
    while stack:
        path, parts, items = stack[-1]
        found = next(items, None)
        if found is None:
            stack.pop()
            if stack:
                folders.append(path)  # after everything in it: deepest first
                _check_count(folder, files, folders, limit)
            continue
        item, st = found
        item_path = os.path.join(path, item.name)
        here = [*parts, item.name]
        refuse_by_name(item_path, here, workspace.allow_secrets)
        if stat.S_ISDIR(st.st_mode):
            stack.append((item_path, [item.name], _listed(item_path)))
            continue
        if stat.S_ISREG(st.st_mode) or (links and stat.S_ISLNK(st.st_mode)):
            files.append(item_path)
        else:
            raise LedgerError(
                Code.FILE_POLICY_DENIED,
                f"{item_path} is a link or special file; delete it on its own first.",
                path=item_path,
                details={"reason": "not_a_regular_file", "mode": stat.filemode(st.st_mode)},
            )
        _check_count(folder, files, folders, limit)
    return files, folders


def _listed(path: str) -> Iterator[tuple[os.DirEntry[str], os.stat_result]]:
    """The entries of the folder at `path` with their own stats, in name order."""
    # Through a no-link descriptor: a folder swapped for a link lists nothing outside.
    fd = open_dir(path)
    try:
        with os.scandir(fd) as scan:
            found = sorted(scan, key=lambda item: item.name)
        stats = [item.stat(follow_symlinks=False) for item in found]
    finally:
        os.close(fd)
    return zip(found, stats, strict=True)


def _check_count(folder: Resolved, files: list[str], folders: list[str], limit: int) -> None:
    if len(files) + len(folders) > limit:
        raise LedgerError(
            Code.VALIDATION,
            f"{folder.path} holds more than {limit} entries; delete it in parts.",
            path=folder.path,
            details={"reason": "too_many_entries", "limit": limit},
        )
