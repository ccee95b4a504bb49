"""Patch planning: a parsed unified diff's files resolved, checked and planned.

`prepare_patch` resolves every path a patch names (no locks held) and binds the
plan; `plan_file_patch` turns one file's hunks and the bytes the planner holds
into changes, as pure as the rest of planning.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from . import patch
from .errors import Code, LedgerError
from .occ import check_hash_format
from .paths import Resolved
from .planning import ABSENT, Planner, Step

__all__ = ["plan_file_patch", "prepare_patch"]

#: Resolves a path the patch names: (relative path, field) -> Resolved.
Resolve = Callable[[str, str], Awaitable[Resolved]]


async def prepare_patch(
    text: str, expected_hashes: dict[str, str] | None, prefix: str, resolve: Resolve
) -> Step:
    """Parse `text` and resolve its paths; the step plans every file patch in order.

    Raises BEGIN_PATCH / PATCH_FAILED for a text that is not a unified diff,
    VALIDATION for a malformed hash or one naming a path the patch does not touch,
    and what resolving a path raises.
    """
    file_patches = patch.parse_patch(text)
    expected = dict(expected_hashes or {})
    for value in expected.values():
        check_hash_format(value, prefix + "expected_hashes")
    targets: list[tuple[patch.FilePatch, Resolved | None, Resolved | None]] = []
    paths: list[str] = []
    checks: list[tuple[str, str | None]] = []
    folders: list[str] = []
    field = prefix + "patch"
    for fp in file_patches:
        old = await resolve(fp.old_path, field) if fp.old_path is not None else None
        new = None
        if fp.new_path is not None and fp.new_path != fp.old_path:
            new = await resolve(fp.new_path, field)
        targets.append((fp, old, new))
        for target in (old, new):
            if target is not None:
                paths.append(target.path)
                folders.extend(m for m in target.missing if m not in folders)
        if old is not None:
            given = expected.pop(fp.old_path or "", None) or expected.pop(old.path, None)
            checks.append((old.path, given))
    if expected:
        raise LedgerError(
            Code.VALIDATION,
            f"expected_hashes names paths the patch does not touch: {sorted(expected)}",
            details={"field": prefix + "expected_hashes", "unknown": sorted(expected)},
        )

    def plan(planner: Planner) -> None:
        for fp, old, new in targets:
            source = old.path if old is not None else None
            target = new.path if new is not None else source
            assert target is not None
            plan_file_patch(planner, fp, source, target)

    return Step(paths=paths + folders, checks=checks, plan=plan, new_folders=folders)


def plan_file_patch(planner: Planner, fp: patch.FilePatch, source: str | None, target: str) -> None:
    """Plan one file's patch: a rename from `source`, then its hunks on `target`."""
    if source is not None and target != source:
        planner.move(source, target)
    # A creation is checked against what the target holds, so it never clobbers a file.
    original = planner.state.get(target, ABSENT).data
    if planner.state.get(target, ABSENT).is_dir:
        raise LedgerError(Code.VALIDATION, f"{target} is a folder.", path=target)
    if not fp.hunks and original is not None and fp.new_path is not None:
        applied_content: bytes | None = original  # a pure rename or mode change
    else:
        try:
            applied_content = patch.apply_hunks(fp, original).content
        except LedgerError as exc:
            exc.envelope.error.path = target
            raise
    mode = patch_mode(fp.new_mode)
    current_mode = planner.state.get(target, ABSENT).mode
    if applied_content is None:
        planner.delete(target, op="patch")
    elif applied_content != original or (mode is not None and mode != current_mode):
        planner.replace(target, applied_content, "patch", mode=mode)


def patch_mode(mode: str | None) -> int | None:
    """Permission bits of a git file mode.

    >>> oct(patch_mode("100755"))
    '0o755'
    """
    if mode is None or len(mode) < 3:
        return None
    return int(mode[-3:], 8)
