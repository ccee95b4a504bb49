"""Every docstring example in the installed packages runs and prints what it shows."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import ledgerfs.engine
import ledgerfs.journal


def _modules() -> list[str]:
    found = {"ledgerfs"}
    for package in (ledgerfs.engine, ledgerfs.journal):
        found.add(package.__name__)
        found.update(
            info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
        )
    return sorted(found)


@pytest.mark.parametrize("name", _modules())
def test_doctests(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
