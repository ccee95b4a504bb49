"""The last verified point of a journal's audit chain, kept outside its folder.

`ledgerfs verify` checks what was chained after this point and trusts what came
before it (``verify --full`` checks everything). The point lives beside the
journal's mark (`_marker`), in the user's state folder, so that someone who can
write the workspace cannot move it forward to hide a record behind it; a point
that cannot be read counts as none (everything is checked).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import msgspec

from ._marker import mark_path
from ._records import VerifiedPoint

__all__ = ["point_path", "read_point", "write_point"]


def point_path(journal: Path) -> Path:
    mark = mark_path(journal)
    return mark.with_name(mark.stem + ".verified.json")


def read_point(journal: Path) -> VerifiedPoint | None:
    """The journal's last verified point, or None."""
    try:
        point = msgspec.json.decode(point_path(journal).read_bytes(), type=VerifiedPoint)
    except (OSError, msgspec.DecodeError):
        return None
    return point if point.journal == str(journal) else None


def write_point(point: VerifiedPoint) -> bool:
    """Record `point` (atomically); False when it cannot be written."""
    path = point_path(Path(point.journal))
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(msgspec.json.encode(point))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True
