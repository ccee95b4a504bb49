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


async def prepare_patch(
    text: str,
    expected_hashes: dict[str, str] | None,
    prefix: str,
    resolve: Resolve,
    check_link: LinkCheck,
    limit: int,
    room: Room,
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
    for index, fp in enumerate(file_patches, start=1):
        if index % EVERY == 0:
            count = len(file_patches)
            await report(index, count, f"{index} of {count} files of the patch prepared")
        follow = follows_links(fp)
        old = await resolve(fp.old_path, field, follow) if fp.old_path is not None else None
        new = None
        if fp.new_path is not None and fp.new_path != fp.old_path:
            new = await resolve(fp.new_path, field, follow)
        targets.append(PatchTarget(patch=fp, old=old, new=new))
        for target in (old, new):
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

    Raises what `apply_hunks` raises, VALIDATION (a folder in the way, an entry
    type git has but files do not, such as a submodule), PATCH_FAILED (`wrong_type`:
    the patch changes a link where a file is, or the other way round) and what
    `check_link` raises for a link pointing outside every root.
    """
    first = len(planner.changes)
    vacated: list[str] = []
    for target in targets:
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


def _plan_file(planner: Planner, target: PatchTarget) -> None:
    fp = target.patch
    source = target.old.path if target.old is not None else None
    path = target.new.path if target.new is not None else source
    assert path is not None
    if source is not None and path != source:
        planner.move(source, path)
    current = planner.state.get(path)
    if current.is_dir:
        raise LedgerError(Code.VALIDATION, f"{planner.label(path)} is a folder.", path=path)
    planner.refuse_unread(path, current)
    _check_type(fp, current, planner.label(path))
    mode = _patch_mode(fp, planner.label(path))
    original = current.data
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
                applied = apply_hunks(_in_form(fp, form), view, limit=planner.max_size)
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


def _text_form(fp: FilePatch, current: Entry) -> TextForm | None:
    """The form of a file whose text hunks apply to its decoded text (its view): one
    with a BOM or in another encoding than UTF-8. None: they apply to its bytes, as
    `git apply` applies them (bytes that are not UTF-8 included)."""
    if fp.binary is not None or current.data is None or is_link_mode(current.mode):
        return None
    form = form_of(current.data)
    return None if form.plain else form


def _in_form(fp: FilePatch, form: TextForm) -> FilePatch:
    """A patch's hunks as text of a file in `form`: bytes of a line that are not UTF-8
    read in the file's encoding (a diff `git diff` made of a Latin-1 file), and a
    BOM that starts the file's first line dropped (the view has none)."""
    hunks = []
    for hunk in fp.hunks:
        lines = [(tag, _in_encoding(text, form.encoding)) for tag, text in hunk.lines]
        if form.bom and hunk.old_start <= 1 and hunk.new_start <= 1:
            for side in ("-", "+"):
                first = next((i for i, (t, _) in enumerate(lines) if t in (" ", side)), None)
                if first is not None:
                    tag, text = lines[first]
                    lines[first] = (tag, text.removeprefix("\ufeff"))
        hunks.append(msgspec.structs.replace(hunk, lines=lines))
    return msgspec.structs.replace(fp, hunks=hunks)


def _in_encoding(text: str, encoding: str) -> str:
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes the patch held that are not UTF-8
        raw = text.encode("utf-8", "surrogateescape")
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError:
            return text
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

    Raises VALIDATION for a git mode no file or link has (a submodule's 160000).
    """
    new = _new_side_mode(fp)
    if new is None:
        return None
    if new == LINK:
        return LINK_MODE
    if new not in _REGULAR:
        raise LedgerError(
            Code.VALIDATION,
            f"{label} has git mode {new}, which is not a file or a symbolic link "
            "(submodules are not supported).",
            path=label,
            details={"argument": "patch", "file": fp.path, "mode": new, "line": fp.line},
        )
    # Only a mode the patch sets explicitly changes permissions.
    return int(fp.new_mode[-3:], 8) if fp.new_mode is not None else None


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
