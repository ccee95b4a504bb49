"""docs/tools.md agrees with the tool registry."""

from __future__ import annotations

from pathlib import Path

from ledgerfs.engine.tooldocs import BEGIN, END, reference
from ledgerfs.engine.tools import REGISTRY

DOC = Path(__file__).resolve().parents[1] / "docs" / "tools.md"


def test_the_tool_reference_is_generated_from_the_registry() -> None:
    text = DOC.read_text(encoding="utf-8")
    generated = text.split(BEGIN + "\n", 1)[1].split(END, 1)[0]
    assert generated == f"\n{reference()}\n", (
        "docs/tools.md is out of date: run python -m ledgerfs.engine.tooldocs docs/tools.md"
    )


def test_every_tool_and_argument_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    for tool in REGISTRY:
        section = text.split(f"### `{tool.name}`: {tool.title}\n", 1)[1].split("### ", 1)[0]
        assert tool.description in section
        for name in tool.input_schema()["properties"]:
            assert f"| `{name}` |" in section, (tool.name, name)
