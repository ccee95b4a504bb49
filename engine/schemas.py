"""The JSON schemas a client sees of a tool: its arguments and its result.

A schema is msgspec's, with the struct at the root (MCP wants an object there)
and every property described at its top level, then made lean: a client parses
and walks the whole listing (the MCP SDK's client does so several times per
tools/list, and lists once per first call of each tool in flight), and it
compiles each output schema to check every result against it, so what it costs
grows with the number of JSON nodes. What leaves accepts exactly what it
accepted before:

- ``title`` (the struct's class name) is dropped: no validator reads it.
- ``{"anyOf": [{"type": "string"}, {"type": "null"}]}`` becomes
  ``{"type": ["string", "null"]}``, one node for three.
- An output schema drops ``default`` (a result always carries every field, and a
  validator ignores defaults).
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["input_schema", "object_schema", "output_schema"]


def object_schema(kind: type[msgspec.Struct]) -> dict[str, Any]:
    """A struct's JSON schema with the struct itself at the root (MCP wants an object).

    Every property carries its description at its top level; the tag of a tagged
    union (a batch operation's `op`) gets one here, as msgspec gives it none.

    >>> from ledgerfs.engine.requests import ListDirectory
    >>> object_schema(ListDirectory)["required"]
    ['path']
    """
    schema = msgspec.json.schema(kind)
    defs: dict[str, Any] = dict(schema.get("$defs", {}))
    for definition in defs.values():
        _describe(definition)
    ref = schema.get("$ref")
    if ref is None:
        root = dict(schema)
    else:
        root = dict(defs.pop(ref.rsplit("/", 1)[-1]))
        if defs:
            root["$defs"] = defs
    root.setdefault("type", "object")
    root.setdefault("properties", {})
    return root


def input_schema(kind: type[msgspec.Struct]) -> dict[str, Any]:
    """The lean schema of a tool's arguments (defaults kept: they tell a caller what
    an argument left out means).

    >>> from ledgerfs.engine.requests import EditFile
    >>> input_schema(EditFile)["properties"]["expected_hash"]["type"]
    ['string', 'null']
    """
    lean: dict[str, Any] = _lean(object_schema(kind), defaults=True)
    return lean


def output_schema(kind: type[msgspec.Struct]) -> dict[str, Any]:
    """The lean schema of a tool's result.

    >>> from ledgerfs.engine.results import MutationResult
    >>> "default" in output_schema(MutationResult)["properties"]["dry_run"]
    False
    """
    lean: dict[str, Any] = _lean(object_schema(kind), defaults=False)
    return lean


def _describe(definition: dict[str, Any]) -> None:
    for name, prop in definition.get("properties", {}).items():
        if "description" in prop:
            continue
        # msgspec puts an optional field's description on its non-null branch;
        # a client reads it from the property itself.
        for branch in prop.get("anyOf", []):
            if "description" in branch:
                prop["description"] = branch.pop("description")
                break
        values = prop.get("enum")
        if "description" not in prop and values is not None and len(values) == 1:
            prop["description"] = f"The kind of {name}: {values[0]}."


#: Keywords whose value maps names to schemas (the names themselves are not keywords).
_SCHEMA_MAPS = frozenset({"properties", "$defs", "patternProperties"})


def _lean(node: Any, *, defaults: bool) -> Any:
    """`node` (a schema, or a list of them) without what no validator reads."""
    if isinstance(node, list):
        return [_lean(item, defaults=defaults) for item in node]
    if not isinstance(node, dict):
        return node
    lean: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" or (key == "default" and not defaults):
            continue
        if key in _SCHEMA_MAPS:
            lean[key] = {name: _lean(s, defaults=defaults) for name, s in value.items()}
        elif key in ("enum", "const", "required", "default", "examples"):
            lean[key] = value  # values, not schemas
        else:
            lean[key] = _lean(value, defaults=defaults)
    branches = lean.get("anyOf")
    if "type" not in lean and branches and all(_bare_type(b) for b in branches):
        del lean["anyOf"]
        lean["type"] = [b["type"] for b in branches]
    return lean


def _bare_type(schema: Any) -> bool:
    """Whether `schema` says only ``{"type": <one name>}``."""
    return (
        isinstance(schema, dict) and schema.keys() == {"type"} and isinstance(schema["type"], str)
    )
