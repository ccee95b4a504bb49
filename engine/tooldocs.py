"""docs/tools.md's tool reference, generated from the registry.

`python -m ledgerfs.engine.tooldocs docs/tools.md` rewrites the part of the file
between the markers; a test fails when the file and the registry disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .tools import REGISTRY, Tool

__all__ = ["BEGIN", "END", "reference", "rewrite"]

BEGIN = "<!-- tool reference: generated from engine/tools.py; do not edit by hand -->"
END = "<!-- end of the generated tool reference -->"

_CONSTRAINTS = (
    ("minimum", ">= {}"),
    ("maximum", "<= {}"),
    ("minLength", "length >= {}"),
    ("maxLength", "length <= {}"),
    ("minItems", "items >= {}"),
    ("maxItems", "items <= {}"),
    ("pattern", "matching `{}`"),
)


def reference() -> str:
    """The reference of every tool: title, hints, description and arguments."""
    return "\n".join(_tool(tool) for tool in REGISTRY)


def rewrite(path: Path) -> bool:
    """Replace the generated part of `path`; whether it changed."""
    text = path.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN + "\n")
    _, _, tail = rest.partition(END)
    new = f"{head}{BEGIN}\n\n{reference()}\n{END}{tail}"
    path.write_text(new, encoding="utf-8")
    return new != text


def _tool(tool: Tool) -> str:
    schema = tool.input_schema()
    rows = [
        f"| `{name}` | {_type(prop, schema)} | {_presence(name, prop, schema)} | "
        f"{_escape(prop.get('description', ''))} |"
        for name, prop in schema.get("properties", {}).items()
    ]
    table = (
        "| argument | type | required / default | description |\n| --- | --- | --- | --- |\n"
        + "\n".join(rows)
        if rows
        else "No arguments."
    )
    return (
        f"### `{tool.name}`: {tool.title}\n\n"
        f"{_hints(tool)}. Result: {_result(tool)}.\n\n"
        f"{tool.description}\n\n{table}\n"
    )


def _result(tool: Tool) -> str:
    fields = tool.output_schema().get("properties", {})
    return "{" + ", ".join(f"`{name}`" for name in fields) + "}"


def _hints(tool: Tool) -> str:
    hints = tool.annotations
    words = ["read-only" if hints.read_only else "changes"]
    if hints.destructive:
        words.append("destructive")
    if hints.idempotent:
        words.append("idempotent")
    if hints.open_world:
        words.append("open world")
    return ", ".join(words).capitalize()


def _presence(name: str, prop: dict[str, Any], schema: dict[str, Any]) -> str:
    if name in schema.get("required", []):
        return "required"
    return f"`{_json(prop.get('default'))}`"


def _type(prop: dict[str, Any], schema: dict[str, Any]) -> str:
    branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
    text = " or ".join(_one(branch, schema) for branch in branches)
    # An optional field's constraints sit on its non-null branch.
    sources = [prop, *branches] if "anyOf" in prop else [prop]
    limits = [form.format(src[key]) for src in sources for key, form in _CONSTRAINTS if key in src]
    return text + (f" ({', '.join(limits)})" if limits else "")


def _one(prop: dict[str, Any], schema: dict[str, Any]) -> str:
    if "enum" in prop:
        return " \\| ".join(f"`{value}`" for value in prop["enum"])
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        fields = schema.get("$defs", {}).get(name, {}).get("properties", {})
        return "{" + ", ".join(fields) + "}" if fields else "object"
    kind = prop.get("type")
    if kind == "array":
        items = prop.get("items", {})
        inner = "operation" if "anyOf" in items else _one(items, schema)
        return f"list of {inner}"
    if kind == "object":
        return "object"
    if isinstance(kind, list):  # a union of bare types, null being what "optional" says
        return " or ".join(str(name) for name in kind if name != "null")
    return str(kind)


def _json(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":  # pragma: no cover - a maintainer's command
    for name in sys.argv[1:]:
        print(f"{name}: {'rewritten' if rewrite(Path(name)) else 'up to date'}")
