"""The lean schemas a client sees accept exactly what msgspec's schemas accept."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from ledgerfs.engine.schemas import input_schema, listed_schema, object_schema, output_schema
from ledgerfs.engine.tools import REGISTRY

# Values of every JSON kind, put in turn in place of each property.
PROBES: list[Any] = [None, True, 0, 7, -1, 1.5, "", "x", "blake3:" + "0" * 64, [], ["x"], [1], {}]


def _cases() -> list[tuple[str, str]]:
    return [(tool.name, side) for tool in REGISTRY for side in ("input", "output")]


def _schemas(name: str, side: str) -> tuple[dict[str, Any], dict[str, Any]]:
    tool = next(t for t in REGISTRY if t.name == name)
    kind = tool.request if side == "input" else tool.result
    lean = input_schema(kind) if side == "input" else output_schema(kind)
    return object_schema(kind), lean


def _valid(schema: dict[str, Any], document: Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(document)


def _subschemas(node: Any) -> list[dict[str, Any]]:
    """`node` and every schema inside it (the keys of `properties` and `$defs` are names)."""
    if isinstance(node, list):
        return [found for item in node for found in _subschemas(item)]
    if not isinstance(node, dict):
        return []
    found = [node]
    for key, value in node.items():
        if key in ("properties", "$defs"):
            found += [s for child in value.values() for s in _subschemas(child)]
        elif key not in ("enum", "const", "required", "default", "examples"):
            found += _subschemas(value)
    return found


@pytest.mark.parametrize(("name", "side"), _cases())
def test_each_property_accepts_the_same_values(name: str, side: str) -> None:
    full, lean = _schemas(name, side)
    for prop in full["properties"]:
        alone = [{**s["properties"][prop], "$defs": s.get("$defs", {})} for s in (full, lean)]
        for value in PROBES:
            assert _valid(alone[0], value) == _valid(alone[1], value), (prop, value)
            document = {key: None for key in full.get("required", [])} | {prop: value}
            assert _valid(full, document) == _valid(lean, document), (prop, value)


@pytest.mark.parametrize(("name", "side"), _cases())
def test_lean_schemas_carry_no_titles_and_no_split_type_unions(name: str, side: str) -> None:
    _, lean = _schemas(name, side)
    for node in _subschemas(lean):
        assert "title" not in node, node
        branches = node.get("anyOf", [])
        assert not (branches and all(set(b) == {"type"} for b in branches)), node
        if side == "output":
            assert "default" not in node, node


@pytest.mark.parametrize("name", [tool.name for tool in REGISTRY])
def test_the_listing_refuses_nothing_the_server_accepts(name: str) -> None:
    # It leaves the server's own checks out, never adds one: every value the whole
    # schema accepts, the listed one does (null aside: it shows an optional argument's
    # type, and leaving the argument out means null), so a client that checks before
    # it calls never holds back a call the server would take.
    tool = next(t for t in REGISTRY if t.name == name)
    full, listed = object_schema(tool.request), listed_schema(tool.request)
    assert set(listed["properties"]) == set(full["properties"])
    assert set(listed.get("required", [])) == set(full.get("required", []))
    for prop in full["properties"]:
        required = full.get("required", [])
        for value in PROBES:
            document = {key: "x" for key in required} | {prop: value}
            if _valid(full, document) and (value is not None or prop in required):
                assert _valid(listed, document), (prop, value)
