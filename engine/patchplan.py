"""Patch planning: a parsed unified diff's files resolved, checked and planned.

`prepare_patch` resolves every path a patch names (no locks held) and binds the
plan. `engine.patchparse` turns text into `FilePatch` records and
`engine.patchapply` one file's bytes into new bytes; `plan_patch` turns each
record into planned changes on the transaction's virtual state: moves, new
content, modes, symbolic links (a link's data is its target), and the removal of
folders the patch leaves empty, as `git apply` removes them. The only disk access
while planning is listing a vacated folder, under the transaction's locks.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

import anyio.to_thread
import msgspec
from msgspec import Struct

from .binpatch import Room
from .changes import LINK_MODE, Entry, is_link_mode
from .encodings import TextForm, form_of
from .errors import Code, LedgerError
from .nofollow import open_dir
from .occ import check_hash_format
from .patchapply import apply_hunks
from .patchparse import FilePatch, parse_patch
from .paths import Resolved
from .planning import Planner, Step
from .progress import EVERY, report

__all__ = [
    "LINK",
    "PatchTarget",
    "follows_links",
    "plan_patch",
    "prepare_patch",
    "vacated_folders",
]

#: Resolves a path the patch names: (relative path, field, follow a last link).
Resolve = Callable[[str, str, bool], Awaitable[Resolved]]
#: Resolves a new path below an entry the patch removes (`Workspace.beneath`):
#: (that entry, resolved without following it; the rest; the path as named; field).
Beneath = Callable[[Resolved, str, str, str], Resolved]

#: git's mode of a symbolic link.
LINK = "120000"

#: Patch texts longer than this are parsed in a worker thread: a big one (a binary
#: file's base85 lines, decoded a line at a time) would otherwise hold the loop
#: and every other session's calls for as long as it takes.
INLINE_PATCH = 64 * 1024
_REGULAR = ("100644", "100755", "100664")

#: Checks that a link at a (resolved) path may point where its data says:
#: (link path, target bytes, label).
LinkCheck = Callable[[str, bytes, str], None]


class PatchTarget(Struct, frozen=True, kw_only=True):
    """One file of a patch with its resolved old and new paths (None: no such side)."""

    patch: FilePatch
    old: Resolved | None
    new: Resolved | None
    #: Folders to make for the new path once the patch's removals are planned: where
    #: an entry the patch removes (a link, a file) stood, and below it.
    folders: tuple[str, ...] = ()
    #: Whether the patch came as bytes (patch_base64): its text lines are then the
    #: bytes of a file's own encoding (`_in_encoding`).
    from_bytes: bool = False


async def prepare_patch(
    text: str,
    expected_hashes: dict[str, str] | None,
    prefix: str,
    resolve: Resolve,
    beneath: Beneath,
    check_link: LinkCheck,
    limit: int,
    room: Room,
    *,
    from_bytes: bool = False,
) -> Step:
    """Parse `text` and resolve its paths; the step plans the whole patch.

    Raises BEGIN_PATCH / VALIDATION for a text that is not a unified diff,
    VALIDATION for a malformed hash or one naming a path the patch does not touch,
    or a binary hunk stating more than `limit` bytes (or more than the call's
    `room` has left), and what resolving a path raises. The step charges the
    budget one per file the patch names.
    """
    parse = partial(parse_patch, text, limit=limit, room=room)
    file_patches = parse() if len(text) <= INLINE_PATCH else await anyio.to_thread.run_sync(parse)
    expected = dict(expected_hashes or {})
    for value in expected.values():
        check_hash_format(value, prefix + "expected_hashes")
    targets: list[PatchTarget] = []
    paths: list[str] = []
    checks: list[tuple[str, str | None]] = []
    folders: list[str] = []
    field = prefix + "patch"
    removed = _removed(file_patches)
    for index, fp in enumerate(file_patches, start=1):
        if index % EVERY == 0:
            count = len(file_patches)
            await report(index, count, f"{index} of {count} files of the patch prepared")
        follow = follows_links(fp)
        old = await resolve(fp.old_path, field, follow) if fp.old_path is not None else None
        new = None
        after_removal: tuple[str, ...] = ()
        if fp.new_path is not None and fp.new_path != fp.old_path:
            anchor = _removed_above(fp.new_path, removed)
            if anchor is None:
                new = await resolve(fp.new_path, field, follow)
            else:  # nothing on disk below the removed entry counts, a link least of all
                entry = await resolve(anchor, field, False)
                new = beneath(entry, fp.new_path[len(anchor) + 1 :], fp.new_path, field)
                after_removal = new.missing
        targets.append(
            PatchTarget(patch=fp, old=old, new=new, folders=after_removal, from_bytes=from_bytes)
        )
        # A path below a removed entry is neither loaded nor locked: the plan makes
        # its folders anew (nothing of the disk is under them), and the lock on the
        # removed entry, which the patch's deletion holds, keeps it to this call.
        for target in (old, None if after_removal else new):
            if target is not None:
                paths.append(target.path)
                folders.extend(m for m in target.missing if m not in folders)
        if old is not None:
            given = expected.pop(fp.old_path or "", None) or expected.pop(old.path, None)
            checks.append((old.path, given))
            if _vacates(targets[-1]):
                # Folders the patch may empty: locked and loaded with the files.
                paths.extend(vacated_folders(old))
    if expected:
        raise LedgerError(
            Code.VALIDATION,
            f"expected_hashes names paths the patch does not touch: {sorted(expected)}",
            details={"field": prefix + "expected_hashes", "unknown": sorted(expected)},
        )
    return Step(
        paths=paths + folders,
        checks=checks,
        plan=lambda planner: plan_patch(planner, targets, check_link),
        new_folders=folders,
        weight=len(file_patches),
        long=_delta_bytes(file_patches) > INLINE_DELTA,
    )


#: Delta bytes a patch may hold and still be applied on the loop's thread: a delta
#: runs an instruction per byte or two in Python, a thread hop costs a few hundred
#: microseconds.
INLINE_DELTA = 16 * 1024


def _delta_bytes(file_patches: Sequence[FilePatch]) -> int:
    """The bytes of the delta hunks of a patch."""
    return sum(
        len(fp.binary.data)
        for fp in file_patches
        if fp.binary is not None and fp.binary.kind == "delta"
    )


def _removed(file_patches: Sequence[FilePatch]) -> set[str]:
    """The paths (as the patch names them) whose entry the patch takes away:
    deleted, or renamed elsewhere."""
    return {
        fp.old_path for fp in file_patches if fp.old_path is not None and fp.new_path != fp.old_path
    }


def _removed_above(path: str, removed: set[str]) -> str | None:
    """The outermost folder of `path` (as the patch names it) that the patch removes."""
    steps = path.split("/")
    for count in range(1, len(steps)):
        above = "/".join(steps[:count])
        if above in removed:
            return above
    return None


def _vacates(target: PatchTarget) -> bool:
    """Whether a file patch takes its file out of its folder (a deletion or a rename)."""
    return target.old is not None and (target.new is not None or target.patch.new_path is None)


def _old_side_mode(fp: FilePatch) -> str | None:
    """The git mode the patch says its old file has, when it says one."""
    if fp.old_path is None:
        return None
    return fp.old_mode or fp.index_mode


def _new_side_mode(fp: FilePatch) -> str | None:
    """The git mode the patch says its new file has, when it says one."""
    if fp.new_path is None:
        return None
    return fp.new_mode or fp.index_mode


def follows_links(fp: FilePatch) -> bool:
    """Whether a link at the end of this file's path is followed to what it leads to.

    Only a change of content in place, with no link mode in sight, edits the
    file a link leads to (as a plain `diff -u` has always done here). Creations,
    deletions and renames act on the path's own entry, a link included, as
    `git apply` does.

    >>> [f] = parse_patch("--- a/x\\n+++ b/x\\n@@ -1 +1 @@\\n-a\\n+b\\n")
    >>> follows_links(f)
    True
    """
    return (
        fp.old_path is not None
        and fp.old_path == fp.new_path
        and not fp.rename
        and LINK not in (fp.old_mode, fp.new_mode, fp.index_mode)
    )


def vacated_folders(target: Resolved) -> list[str]:
    """The folders between a file the patch removes or moves away and its root.

    >>> vacated_folders(Resolved(path="/w/a/b/x", root="/w", exists=True, is_dir=False))
    ['/w/a/b', '/w/a']
    """
    folders: list[str] = []
    folder = os.path.dirname(target.path)
    while folder != target.root and folder.startswith(target.root):
        folders.append(folder)
        folder = os.path.dirname(folder)
    return folders


def plan_patch(planner: Planner, targets: Sequence[PatchTarget], check_link: LinkCheck) -> None:
    """Plan every file of a patch, then check the links it makes and drop emptied folders.

    Along each path, what the patch removes goes before what it makes, as
    `git apply` does it: first the deletions, then the folders they emptied
    where the patch puts a file or a link, then renames and the rest, each
    making the folders it needs where a removed link or file stood. So a path
    whose type the patch changes (a link, a file or a folder becoming another)
    is written as its new type, and nothing is ever written through a link the
    same patch removes.

    Raises what `apply_hunks` raises, VALIDATION (a folder in the way, an entry
    type git has but files do not, such as a submodule), PATCH_FAILED (`wrong_type`:
    the patch changes a link where a file is, or the other way round) and what
    `check_link` raises for a link pointing outside every root.
    """
    first = len(planner.changes)
    deletions = [t for t in targets if t.old is not None and t.patch.new_path is None]
    others = [t for t in targets if t.old is None or t.patch.new_path is not None]
    renames = [t for t in others if t.old is not None and _vacates(t)]
    in_place = [t for t in others if not (t.old is not None and _vacates(t))]
    vacated: list[str] = []
    for target in deletions:
        _plan_file(planner, target)
        vacated.extend(vacated_folders(target.old))  # type: ignore[arg-type]
    _clear_for(planner, others, vacated)
    for target in [*renames, *in_place]:
        _plan_file(planner, target)
        if target.old is not None and _vacates(target):
            vacated.extend(vacated_folders(target.old))
    for change in planner.changes[first:]:
        if change.op == "move" and is_link_mode(change.before_mode) and change.before is not None:
            assert change.destination is not None and change.destination_label is not None
            check_link(change.destination, change.before, change.destination_label)
        elif change.after is not None and is_link_mode(change.after_mode):
            check_link(change.path, change.after, change.label)
    _remove_emptied(planner, vacated)


def _clear_for(planner: Planner, targets: Sequence[PatchTarget], vacated: list[str]) -> None:
    """Remove the folders the deletions emptied where `targets` put a file or a link."""
    for target in targets:
        if target.folders:  # below an entry the patch removed: nothing is there
            continue
        place = (target.new or target.old).path  # type: ignore[union-attr]
        if planner.state.get(place).is_dir:
            below = place + os.sep
            _remove_emptied(planner, [f for f in vacated if f == place or f.startswith(below)])


#: git's mode of a submodule (a gitlink): a commit id where a folder is checked out.
GITLINK = "160000"


def _plan_file(planner: Planner, target: PatchTarget) -> None:
    fp = target.patch
    if _old_side_mode(fp) == GITLINK and _new_side_mode(fp) == GITLINK:
        return  # a submodule's commit moved: its checkout is its own (git apply: a no-op)
    if GITLINK in (_old_side_mode(fp), _new_side_mode(fp)):
        _refuse_mode(fp, GITLINK, planner.label((target.new or target.old).path))  # type: ignore[union-attr]
    source = target.old.path if target.old is not None else None
    path = target.new.path if target.new is not None else source
    assert path is not None
    moved_onto_folder = False
    if source is not None and path != source:
        moved_onto_folder = _move(planner, source, path, target.folders)
    else:
        for folder in target.folders:
            planner.mkdir(folder)
    current = planner.state.get(path)
    if current.is_dir:
        raise LedgerError(Code.VALIDATION, f"{planner.label(path)} is a folder.", path=path)
    planner.refuse_unread(path, current)
    _check_type(fp, current, planner.label(path))
    mode = _patch_mode(fp, planner.label(path))
    original = current.data
    if moved_onto_folder:  # what moved is at `path` in the plan, as a new entry
        mode = mode if mode is not None else current.mode
    regions: list[tuple[int, int, int, int]] | None = None
    if not fp.hunks and fp.binary is None and original is not None and fp.new_path is not None:
        content: bytes | None = original  # a pure rename or mode change
    else:
        form = _text_form(fp, current)
        try:
            if form is None:
                applied = apply_hunks(fp, original, limit=planner.max_size)
            else:
                assert original is not None
                view = form.view(original, planner.label(path), binary=not form.bom)
                in_form = _in_form(fp, form, target.from_bytes)
                applied = apply_hunks(in_form, view, limit=planner.max_size)
        except LedgerError as exc:
            exc.envelope.error.path = path
            raise
        content = applied.content
        if form is not None and content is not None:
            content = form.stored(content, planner.label(path), "patch")
        # Only an edit of existing text has lines outside its hunks to skip.
        regions = applied.regions if original and fp.binary is None else None
    if content is None:
        planner.delete(path, op="patch")
    elif content != original or (mode is not None and mode != current.mode):
        planner.replace(path, content, "patch", mode=mode, regions=regions)


def _move(planner: Planner, source: str, destination: str, folders: Sequence[str]) -> bool:
    """Plan a rename, making `folders` for it first; True when the file is put
    back at `destination` rather than moved there.

    Put back when the destination is where the file's own entry or its folder
    stood: a folder that becomes a file of its own (`git diff -M`: `dir/only.txt`
    renamed to `dir`), or a file that becomes a folder holding it (`f` renamed to
    `f/inner`). The file is deleted, the folder it leaves removed or the folders
    it needs made, then its bytes and mode put at `destination`.
    """
    below_itself = bool(folders) and (
        source == folders[0] or source.startswith(folders[0] + os.sep)
    )
    if not below_itself:
        for folder in folders:  # first: below them, nothing of the disk is read
            planner.mkdir(folder)
        if not planner.state.get(destination).is_dir:
            planner.move(source, destination)
            return False
    moving = planner.state.get(source)
    planner.delete(source, op="patch")
    inside = destination + os.sep
    left = [f for f in _folders_above(source) if f == destination or f.startswith(inside)]
    _remove_emptied(planner, left)
    for folder in folders if below_itself else ():
        planner.mkdir(folder)
    if planner.state.get(destination).is_dir:
        raise LedgerError(
            Code.VALIDATION, f"{planner.label(destination)} is a folder.", path=destination
        )
    if moving.data is not None:
        planner.replace(destination, moving.data, "patch", mode=moving.mode)
    return True


def _folders_above(path: str) -> list[str]:
    """The folders above `path`, innermost first (to the file system's root)."""
    folders: list[str] = []
    folder = os.path.dirname(path)
    while folder and folder != os.path.dirname(folder):
        folders.append(folder)
        folder = os.path.dirname(folder)
    return folders


def _text_form(fp: FilePatch, current: Entry) -> TextForm | None:
    """The form of a file whose text hunks apply to its decoded text (its view): one
    with a BOM or in another encoding than UTF-8. None: they apply to its bytes, as
    `git apply` applies them (bytes that are not UTF-8 included)."""
    if fp.binary is not None or current.data is None or is_link_mode(current.mode):
        return None
    form = form_of(current.data)
    return None if form.plain else form


def _in_form(fp: FilePatch, form: TextForm, from_bytes: bool) -> FilePatch:
    """A patch's hunks as text of a file in `form`: bytes of a line that are not UTF-8
    read in the file's encoding (a diff `git diff` made of a Latin-1 file), and a
    BOM that starts the file's first line dropped (the view has none)."""
    hunks = []
    for hunk in fp.hunks:
        lines = [(tag, _in_encoding(text, form.encoding, from_bytes)) for tag, text in hunk.lines]
        if form.bom and hunk.old_start <= 1 and hunk.new_start <= 1:
            for side in ("-", "+"):
                first = next((i for i, (t, _) in enumerate(lines) if t in (" ", side)), None)
                if first is not None:
                    tag, text = lines[first]
                    lines[first] = (tag, text.removeprefix("\ufeff"))
        hunks.append(msgspec.structs.replace(hunk, lines=lines))
    return msgspec.structs.replace(fp, hunks=hunks)


def _in_encoding(text: str, encoding: str, from_bytes: bool) -> str:
    """A hunk line's text as the file's encoding reads it.

    A patch sent as bytes (patch_base64) holds the file's own bytes, as `git diff`
    prints them: they are read in its encoding, even where they would also be
    valid UTF-8 (cp1252's "ß©" is). A patch sent as text holds text, except for
    bytes that are not UTF-8 (kept as they were); those are read in the
    encoding. The UTF-16 and UTF-32 families are never read from a line's bytes:
    a diff of such a file is text.
    """
    if text.isascii():
        return text
    raw = text.encode("utf-8", "surrogateescape")
    if from_bytes and not encoding.startswith("utf"):
        with contextlib.suppress(UnicodeDecodeError):
            return raw.decode(encoding)
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes the patch held that are not UTF-8
        with contextlib.suppress(UnicodeDecodeError):
            return raw.decode(encoding)
    return text


def _check_type(fp: FilePatch, current: Entry, label: str) -> None:
    """A patch about a link must find a link, one about a file a file.

    Raises PATCH_FAILED (`wrong_type`).
    """
    said = _old_side_mode(fp)
    if said is None or not current.exists or (said == LINK) == current.is_link:
        return
    wanted, found = ("symbolic link", "file") if said == LINK else ("file", "symbolic link")
    raise LedgerError(
        Code.PATCH_FAILED,
        f"the patch changes a {wanted} but {label} is a {found}",
        path=label,
        details={
            "file": fp.path,
            "hunk": None,
            "hunk_header": None,
            "line": None,
            "expected": wanted,
            "found": found,
            "nearest_candidate": None,
            "reason": "wrong_type",
        },
    )


def _patch_mode(fp: FilePatch, label: str) -> int | None:
    """The mode a patch gives its new file: permission bits, LINK_MODE, or None (keep).

    Raises VALIDATION for a git mode no file or link has.
    """
    new = _new_side_mode(fp)
    if new is None:
        return None
    if new == LINK:
        return LINK_MODE
    if new not in _REGULAR:
        _refuse_mode(fp, new, label)
    # Only a mode the patch sets explicitly changes permissions.
    return int(fp.new_mode[-3:], 8) if fp.new_mode is not None else None


def _refuse_mode(fp: FilePatch, mode: str, label: str) -> None:
    """Raise VALIDATION for a git mode that is neither a file nor a link."""
    raise LedgerError(
        Code.VALIDATION,
        f"{label} has git mode {mode}, which is not a file or a symbolic link "
        "(a submodule's commit moving is applied as nothing, as git apply does; "
        "adding or removing one is not supported).",
        path=label,
        details={"argument": "patch", "file": fp.path, "mode": mode, "line": fp.line},
    )


def _remove_emptied(planner: Planner, vacated: list[str]) -> None:
    """Remove the vacated folders that hold nothing once the patch is applied.

    Deepest first, so a parent emptied by its child's removal goes too. A name
    on disk the transaction does not know about (absent from its state) is
    something the patch did not touch, and keeps its folder; so does anything
    the transaction itself puts there.
    """
    for folder in sorted(set(vacated), key=lambda f: (-f.count(os.sep), f)):
        if not planner.state.get(folder).is_dir:
            continue
        try:
            emptied = planner.state.is_empty(folder, _names_in)
        except OSError:
            continue  # a folder that cannot be listed is kept
        if emptied:
            planner.remove_folder(folder)


def _names_in(folder: str) -> list[str]:
    """The names in `folder`, listed through a descriptor opened without following links."""
    fd = open_dir(folder)
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)
