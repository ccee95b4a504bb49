"""journal/ never imports engine, and its public surface matches __all__."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from ledgerfs import journal
from tests._imports import arrows

PACKAGE = Path(journal.__file__).parent


def _third_party(source: str) -> set[str]:
    """The top-level names of what a source file imports absolutely."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_journal_never_imports_engine() -> None:
    # Relative imports count: `from ..engine import x` reaches the engine as surely.
    from_journal = [a for a in arrows() if a.source.partition(".")[0] == "journal"]
    assert from_journal
    leaving = [a for a in from_journal if not a.target.startswith("journal")]
    assert not leaving, leaving


def test_journal_uses_only_allowed_dependencies() -> None:
    allowed = {"anyio", "msgspec", "blake3", "sqlite_utils", "pyfastcdc", "zstandard", "__future__"}
    for file in PACKAGE.rglob("*.py"):
        for top in _third_party(file.read_text()):
            assert top in allowed or top in sys.stdlib_module_names, (file, top)


def test_all_matches_public_names() -> None:
    public = {n for n in dir(journal) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(journal, n)).__name__ == "module"}
    assert set(journal.__all__) == public - modules
    assert journal.__all__ == sorted(journal.__all__, key=str)


def test_py_typed_present() -> None:
    assert (PACKAGE / "py.typed").exists()
