"""The public surfaces: `__all__` lists exactly what each package exports."""

from __future__ import annotations

import importlib
import types

import pytest

PACKAGES = ["ledgerfs", "ledgerfs.engine", "ledgerfs.journal", "ledgerfs.engine.issues"]


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
