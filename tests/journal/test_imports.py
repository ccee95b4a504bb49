"""journal/ never imports engine, and its public surface matches __all__."""

from __future__ import annotations

import ast
from pathlib import Path

from ledgerfs import journal

PACKAGE = Path(journal.__file__).parent


def _imported_modules(source: str) -> set[str]:
    """Return the names of every module a source file imports absolutely."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_journal_never_imports_engine() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert files
    for file in files:
        for name in _imported_modules(file.read_text()):
            assert not name.startswith(("ledgerfs", "engine")), (file, name)


def test_journal_uses_only_allowed_dependencies() -> None:
    allowed = {"anyio", "msgspec", "blake3", "sqlite_utils", "__future__"}
    import sys

    for file in PACKAGE.rglob("*.py"):
        for name in _imported_modules(file.read_text()):
            top = name.split(".")[0]
            assert top in allowed or top in sys.stdlib_module_names, (file, name)


def test_all_matches_public_names() -> None:
    public = {n for n in dir(journal) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(journal, n)).__name__ == "module"}
    assert set(journal.__all__) == public - modules
    assert journal.__all__ == sorted(journal.__all__, key=str)


def test_py_typed_present() -> None:
    assert (PACKAGE / "py.typed").exists()
