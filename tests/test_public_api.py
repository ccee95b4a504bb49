"""The public surfaces: `__all__` lists exactly what each package exports, and
`ledgerfs` itself exports the embedding API only."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import types
from importlib import metadata, resources
from pathlib import Path

import pytest

import ledgerfs

PACKAGES = ["ledgerfs", "ledgerfs.engine", "ledgerfs.journal", "ledgerfs.engine.issues"]
CHECKOUT = Path(__file__).resolve().parent.parent
#: What docs/embedding.md builds on; the rest is importable from its module.
EMBEDDING_API = {"Code", "Config", "Engine", "Envelope", "LedgerError", "Session"}


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_in_sync(name: str) -> None:
    module = importlib.import_module(name)
    exported = set(module.__all__)
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert exported == public
    for attr in exported:
        assert hasattr(module, attr)


def test_ledgerfs_exports_the_embedding_api_only() -> None:
    assert set(ledgerfs.__all__) == EMBEDDING_API


def test_every_exported_name_is_documented_for_embedders() -> None:
    guide = (CHECKOUT / "docs" / "embedding.md").read_text()
    named = set(re.findall(r"`([A-Z]\w*)`", guide))
    assert named >= EMBEDDING_API, EMBEDDING_API - named


def test_the_exports_are_the_engines_own_classes() -> None:
    from ledgerfs.engine import core, errors

    assert ledgerfs.Engine is core.Engine
    assert ledgerfs.LedgerError is errors.LedgerError


@pytest.mark.parametrize("package", ["ledgerfs", "ledgerfs.engine", "ledgerfs.journal"])
def test_each_package_ships_py_typed(package: str) -> None:
    assert resources.files(package).joinpath("py.typed").is_file()


def test_the_distribution_declares_py_typed_for_each_package() -> None:
    import tomllib

    declared = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package in ("ledgerfs", "ledgerfs.engine", "ledgerfs.journal"):
        assert "py.typed" in declared["package-data"][package], package


@pytest.mark.parametrize(
    ("statement", "proper"),
    [
        ("import engine.errors", "ledgerfs.engine"),
        ("from engine import Engine", "ledgerfs.engine"),
        ("import journal", "ledgerfs.journal"),
        ("from journal._records import TxRecord", "ledgerfs.journal"),
    ],
)
def test_the_source_folders_refuse_a_second_name(statement: str, proper: str) -> None:
    # From a checkout's root the folders are importable as top-level packages: a
    # second copy of every module (a second LedgerError that `except` would miss).
    done = subprocess.run(
        [sys.executable, "-c", statement],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError:") and f"import {proper}" in last, done.stderr


#: Runs as a system without POSIX record locks would: `import fcntl` fails.
_NO_FCNTL = "import sys; sys.modules['fcntl'] = None; "


@pytest.mark.parametrize(
    "code",
    [
        "sys.argv = ['ledgerfs', '--version']; from ledgerfs.__main__ import main; main()",
        "from ledgerfs import Engine",
    ],
    ids=["command", "embedding"],
)
def test_a_system_without_posix_locks_gets_one_sentence(code: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _NO_FCNTL + code], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    if code.startswith("from"):  # the embedder gets an ImportError carrying the sentence
        assert done.stderr.rstrip().splitlines()[-1].startswith("ImportError: ledgerfs runs on")
    else:
        assert "Traceback" not in done.stderr
        assert done.stderr.count("\n") == 1 and "Linux and macOS" in done.stderr


def test_the_command_is_the_guarded_entry_point() -> None:
    [script] = [e for e in metadata.entry_points(group="console_scripts") if e.name == "ledgerfs"]
    assert script.value == "ledgerfs.__main__:main"
