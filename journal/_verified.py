"""The last verified point of a journal's audit chain, kept outside its folder.

`ledgerfs verify` checks what was chained after this point and trusts what came
before it (``verify --full`` checks everything). The point lives beside the
journal's mark (`_marker`), in the user's state folder, so that someone who can
write the workspace cannot move it forward to hide a record behind it; a point
that cannot be read counts as none (everything is checked).
"""

from __future__ import annotations

from pathlib import Path

from ._marker import mark_path, read_kept, write_kept
from ._records import VerifiedPoint

__all__ = ["point_path", "read_point", "write_point"]


def point_path(journal: Path) -> Path:
    mark = mark_path(journal)
    return mark.with_name(mark.stem + ".verified.json")


def read_point(journal: Path) -> VerifiedPoint | None:
    """The journal's last verified point, or None."""
    return read_kept(point_path(journal), VerifiedPoint, journal)


def write_point(point: VerifiedPoint) -> bool:
    """Record `point` (atomically); False when it cannot be written."""
    return write_kept(point_path(Path(point.journal)), point)
