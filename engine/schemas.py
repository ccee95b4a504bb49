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

The tool listing (`listed_schema`) is leaner still, since every conversation
carries it: each property says what a model needs in its *brief* (the field's
``Meta(extra={"brief": ...})``, else its description), and what the server
checks anyway (lengths, ranges, patterns, each batch operation's own fields,
a default that says "nothing") is left to the server's VALIDATION envelope and
to docs/tools.md, which shows the whole schema; an argument that may be left
out shows its type without ``null`` (a client sends null for it, or leaves it
out: the same to the server).
"""

from __future__ import annotations

from typing import Any

import msgspec
import msgspec.inspect

__all__ = ["input_schema", "listed_schema", "object_schema", "output_schema"]


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
    return _joined_types(lean)


def _joined_types(lean: dict[str, Any]) -> dict[str, Any]:
    """A union of bare types as one ``type`` list: one node for three."""
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


#: What the listing leaves to the server's own checks (and docs/tools.md).
_UNLISTED = frozenset(
    {
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "additionalProperties",
        "discriminator",
    }
)


def listed_schema(kind: type[msgspec.Struct]) -> dict[str, Any]:
    """The schema of a tool's arguments as the tool listing shows it: every property
    with its brief, no constraint the server checks itself, no ``null`` branch.

    >>> from ledgerfs.engine.requests import EditFile
    >>> listed_schema(EditFile)["properties"]["expected_hash"]
    {'description': 'content_hash last read.', 'type': 'string'}
    """
    schema = input_schema(kind)
    briefs = _briefs(kind)
    nested = _briefs_by_name(kind)
    for name, definition in schema.get("$defs", {}).items():
        _list_properties(definition, nested.get(name, {}))
    _list_properties(schema, briefs)
    listed: dict[str, Any] = _unconstrained(schema)
    listed = _inlined(listed, listed.pop("$defs", {}))
    if not listed.get("required"):
        listed.pop("required", None)
    return listed


def _list_properties(definition: dict[str, Any], briefs: dict[str, str]) -> None:
    """Give each property its brief, and drop the null an optional one takes (leaving
    an argument out says the same, in fewer characters on every listing)."""
    definition.pop("description", None)  # the tool's own description says it
    for name, prop in definition.get("properties", {}).items():
        if name in briefs:
            prop["description"] = briefs[name]
        if _empty(prop.get("default", ...)):  # left out, it is empty: null, off, 0, []
            del prop["default"]
        branches = prop.get("anyOf", [])
        if len(branches) == 2 and branches[1] == {"type": "null"}:
            del prop["anyOf"]  # null is what leaving an argument out means
            prop.update(branches[0])
        kinds = prop.get("type")
        if isinstance(kinds, list) and "null" in kinds:
            rest = [kind for kind in kinds if kind != "null"]
            prop["type"] = rest[0] if len(rest) == 1 else rest
        if None in prop.get("enum", ()):
            prop["enum"] = [value for value in prop["enum"] if value is not None]
        items = prop.get("items")
        if isinstance(items, dict) and "anyOf" in items and "discriminator" in items:
            # A tagged union (a batch's operations): each is described by its tool.
            prop["items"] = {"type": "object"}


def _empty(value: Any) -> bool:
    """Whether a default says only "nothing" (what a model assumes of an argument left out)."""
    return value is None or value is False or value == [] or (type(value) is int and value == 0)


def _unconstrained(node: Any) -> Any:
    """`node` without the keywords the listing leaves to the server (`_UNLISTED`),
    and without descriptions below a property (its brief says it)."""
    if isinstance(node, list):
        return [_unconstrained(item) for item in node]
    if not isinstance(node, dict):
        return node
    lean: dict[str, Any] = {}
    for key, value in node.items():
        if key in _UNLISTED:
            continue
        if key in _SCHEMA_MAPS:
            lean[key] = {name: _unconstrained(s) for name, s in value.items()}
        elif key == "items" and isinstance(value, dict):
            lean[key] = {k: v for k, v in _unconstrained(value).items() if k != "description"}
        elif key in ("enum", "const", "required", "default", "examples"):
            lean[key] = value
        else:
            lean[key] = _unconstrained(value)
    return _joined_types(lean)


def _inlined(node: Any, defs: dict[str, Any]) -> Any:
    """`node` with each ``$ref`` replaced by its definition: a tool's few nested
    structs (an edit, a cell operation) cost less written in place than named."""
    if isinstance(node, list):
        return [_inlined(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _inlined(defs[ref.rsplit("/", 1)[-1]], defs)
    return {key: _inlined(value, defs) for key, value in node.items()}


def _briefs(kind: type[msgspec.Struct]) -> dict[str, str]:
    """Each field of `kind` that has a brief (``Meta(extra={"brief": ...})``): its brief."""
    info = msgspec.inspect.type_info(kind)
    assert isinstance(info, msgspec.inspect.StructType)
    found: dict[str, str] = {}
    for field in info.fields:
        brief = _brief_of(field.type)
        if brief is not None:
            found[field.encode_name] = brief
    return found


def _briefs_by_name(kind: type[msgspec.Struct]) -> dict[str, dict[str, str]]:
    """The briefs of every struct reachable from `kind`'s fields, by class name (as
    msgspec names their ``$defs``)."""
    found: dict[str, dict[str, str]] = {}
    pending: list[msgspec.inspect.Type] = [msgspec.inspect.type_info(kind)]
    while pending:
        node = pending.pop()
        if isinstance(node, msgspec.inspect.StructType):
            name = node.cls.__name__
            if name in found:
                continue
            found[name] = _briefs(node.cls)
            pending += [field.type for field in node.fields]
        elif isinstance(node, msgspec.inspect.Metadata):
            pending.append(node.type)
        elif isinstance(node, msgspec.inspect.UnionType):
            pending += list(node.types)
        elif isinstance(node, (msgspec.inspect.ListType, msgspec.inspect.DictType)):
            pending.append(getattr(node, "item_type", None) or node.value_type)  # type: ignore[union-attr]
    return found


def _brief_of(node: msgspec.inspect.Type) -> str | None:
    """The brief a field's type carries (on it, or on a branch of its union)."""
    if isinstance(node, msgspec.inspect.Metadata):
        brief = (node.extra or {}).get("brief")
        return brief if brief is not None else _brief_of(node.type)
    if isinstance(node, msgspec.inspect.UnionType):
        for branch in node.types:
            brief = _brief_of(branch)
            if brief is not None:
                return brief
    return None
