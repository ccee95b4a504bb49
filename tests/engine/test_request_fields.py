"""Each one-operation tool and its batch operation share one declaration of their
arguments: the tool adds the arguments of a whole call, the operation its `op` tag."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ledgerfs.engine import requests as r
from ledgerfs.engine.tools import find_tool

#: (tool, its request, its batch operation, the `op` tag)
PAIRS = [
    ("write_file", r.WriteFile, r.WriteOp, "write"),
    ("edit_file", r.EditFile, r.EditOp, "edit"),
    ("apply_patch", r.ApplyPatch, r.PatchOp, "patch"),
    ("move_file", r.MoveFile, r.MoveOp, "move"),
    ("delete_file", r.DeleteFile, r.DeleteOp, "delete"),
    ("create_directory", r.CreateDirectory, r.MkdirOp, "mkdir"),
]
CALL_FIELDS = ("expected_status_hash", "dry_run")
#: The least arguments of each operation.
ARGUMENTS: dict[str, dict[str, Any]] = {
    "write": {"path": "a", "content": ""},
    "edit": {"path": "a", "edits": [{"old_text": "x", "new_text": "y"}]},
    "patch": {"patch": "x"},
    "move": {"source": "a", "destination": "b"},
    "delete": {"path": "a"},
    "mkdir": {"path": "a"},
}


def properties(kind: type[msgspec.Struct]) -> dict[str, Any]:
    schema = msgspec.json.schema(kind)
    name = schema["$ref"].rsplit("/", 1)[1]
    found: dict[str, Any] = schema["$defs"][name]["properties"]
    return found


@pytest.mark.parametrize(("tool", "request_", "op", "tag"), PAIRS)
def test_a_tool_is_its_operation_plus_the_call_fields(
    tool: str, request_: type[msgspec.Struct], op: type[msgspec.Struct], tag: str
) -> None:
    assert find_tool(tool).request is request_
    assert request_.__struct_fields__ == (*op.__struct_fields__, *CALL_FIELDS)
    shared = {k: v for k, v in properties(op).items() if k != "op"}
    assert properties(op)["op"] == {"enum": [tag]}
    assert {k: v for k, v in properties(request_).items() if k not in CALL_FIELDS} == shared


@pytest.mark.parametrize(("tool", "request_", "op", "tag"), PAIRS)
def test_a_batch_operation_is_decoded_by_its_tag(
    tool: str, request_: type[msgspec.Struct], op: type[msgspec.Struct], tag: str
) -> None:
    arguments = ARGUMENTS[tag]
    batch = r.decode_request(r.Batch, {"operations": [{"op": tag, **arguments}]})
    assert type(batch.operations[0]) is op
    assert type(r.decode_request(request_, arguments)) is request_
