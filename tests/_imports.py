"""The import arrows between ledgerfs's own modules, read from the source with ast.

Relative imports (`from .x import y`, `from ..journal import z`) count as well as
absolute ones; so do imports inside functions and under `if TYPE_CHECKING:`, the
latter marked as type-only.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import msgspec

import ledgerfs

PACKAGE = Path(ledgerfs.__file__).resolve().parent
#: The source folders and the package each installs as.
FOLDERS = {"engine": "ledgerfs.engine", "journal": "ledgerfs.journal"}


class Arrow(msgspec.Struct, frozen=True):
    """`source` imports `target` (module names under ledgerfs, e.g. `engine.core`)."""

    source: str
    target: str
    line: int
    type_only: bool


def modules() -> dict[str, Path]:
    """Every module of the source folders by its name under ledgerfs (`engine.core`)."""
    found: dict[str, Path] = {}
    for folder in FOLDERS:
        root = (PACKAGE / folder).resolve()
        for file in sorted(root.rglob("*.py")):
            parts = [folder, *file.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = file
    return found


def imported(module: str, file: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The absolute names an import statement reaches, submodules named in it included."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = f"ledgerfs.{module}".split(".")
        if file.name != "__init__.py":
            base.pop()  # a module's own package is its first level
        base = base[: len(base) - (node.level - 1)]
        target = ".".join([*base, *([node.module] if node.module else [])])
    else:
        target = node.module or ""
    return [target, *(f"{target}.{alias.name}" for alias in node.names)]


def _type_only_nodes(tree: ast.Module) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            inside.update(id(sub) for sub in ast.walk(node))
    return inside


@functools.cache
def arrows() -> tuple[Arrow, ...]:
    """Every import of one ledgerfs module by another (once per statement and target)."""
    known = modules()
    found: list[Arrow] = []
    for module, file in known.items():
        tree = ast.parse(file.read_text(), str(file))
        type_only = _type_only_nodes(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets: set[str] = set()
            for name in imported(module, file, node):
                target = name.removeprefix("ledgerfs.")
                if name.startswith("ledgerfs.") and target in known:
                    targets.add(target)
                elif name.split(".")[0] in FOLDERS or name == "ledgerfs":
                    targets.add(name)  # a second name for the package: never allowed
            # `from . import x` names the package and its module x: keep the module.
            targets -= {t for t in targets if any(o.startswith(t + ".") for o in targets)}
            found += [
                Arrow(module, t, node.lineno, id(node) in type_only)
                for t in sorted(targets - {module})
            ]
    return tuple(found)
