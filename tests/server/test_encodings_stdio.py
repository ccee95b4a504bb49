"""Encodings and line endings through the real `ledgerfs serve` and the SDK's client.

A table of the main cases (UTF-8 with and without a BOM, UTF-16 LE and BE with a
BOM, Latin-1 named by the caller, cp1252 declared by the file; LF, CRLF, CR and
mixed line endings): read_file reports the form, edit_file and apply_patch change
only the edited text's bytes, undo and rewind give the exact bytes back. Then a
file not valid in its encoding: refused with one envelope, nothing written.
"""

from __future__ import annotations

import base64
import codecs
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from ._support import envelope, ok, stdio_params

pytestmark = pytest.mark.anyio

BOM8, LE, BE = codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE

#: (case, codec, BOM, encoding argument, text, what read_file reports: encoding, line_endings)
CASES = [
    ("utf-8 lf", "utf-8", b"", None, "un\ndeux é\ntrois\n", "utf-8", "lf"),
    ("utf-8 bom crlf", "utf-8", BOM8, None, "un\r\ndeux é\r\ntrois\r\n", "utf-8", "crlf"),
    ("utf-16-le bom crlf", "utf-16-le", LE, None, "un\r\ndeux é\r\ntrois", "utf-16-le", "crlf"),
    ("utf-16-be bom cr", "utf-16-be", BE, None, "un\rdeux é\rtrois\r", "utf-16-be", "cr"),
    (
        "latin-1 named mixed",
        "latin-1",
        b"",
        "latin-1",
        "un\r\ndeux é\ntrois\r",
        "iso8859-1",
        "mixed",
    ),
    (
        "cp1252 declared crlf",
        "cp1252",
        b"",
        None,
        "# -*- coding: cp1252 -*-\r\nun\r\ndeux é €\r\ntrois\r\n",
        "cp1252",
        "crlf",
    ),
]


def line_of(text: str, word: str) -> tuple[int, str]:
    """The 1-based number and the text (its line end kept) of the LF-split line holding `word`."""
    lines = text.split("\n")
    index = next(i for i, line in enumerate(lines) if word in line)
    ended = lines[index] + ("\n" if index < len(lines) - 1 else "")
    return index + 1, ended


def hunk(name: str, text: str, old: str, new: str) -> str:
    """A diff of the one LF-split line holding `old`, as diff would write it for `text`."""
    number, line = line_of(text, old)
    body = ""
    for tag, side in (("-", line), ("+", line.replace(old, new))):
        body += tag + side + ("" if side.endswith("\n") else "\n\\ No newline at end of file\n")
    return f"--- a/{name}\n+++ b/{name}\n@@ -{number},1 +{number},1 @@\n{body}"


@pytest.mark.parametrize(
    ("codec", "bom", "named", "text", "encoding", "endings"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
async def test_edits_patches_undo_and_rewind_keep_the_files_bytes(
    workspace: Path,
    codec: str,
    bom: bytes,
    named: str | None,
    text: str,
    encoding: str,
    endings: str,
) -> None:
    path = workspace / "f.txt"
    original = bom + text.encode(codec)
    path.write_bytes(original)
    extra: dict[str, Any] = {} if named is None else {"encoding": named}

    def stored(new_text: str) -> bytes:
        return bom + new_text.encode(codec)

    async with Client(stdio_params(workspace)) as client:
        read = ok(await client.call_tool("read_file", {"path": "f.txt", **extra}))
        assert (read["content"], read["encoding"]) == (text, encoding)
        assert (read["bom"], read["line_endings"]) == (bool(bom), endings)

        edit = {"path": "f.txt", "edits": [{"old_text": "deux é", "new_text": "zwei ü"}]}
        edited = ok(await client.call_tool("edit_file", {**edit, **extra}))
        assert path.read_bytes() == stored(text.replace("deux é", "zwei ü"))
        # The diff shows text wherever the file says its encoding (not the bare Latin-1).
        assert ("Binary files" in edited["diff"]) is (named is not None)
        ok(await client.call_tool("undo", {"transaction": edited["transaction"]}))
        assert path.read_bytes() == original

        patch = hunk("f.txt", text, "trois", "drei")
        # A Latin-1 file that names no encoding is patched by its bytes, as git would
        # send them; the others by their text.
        sent = (
            {"patch_base64": base64.b64encode(patch.encode(codec)).decode()}
            if named
            else {"patch": patch}
        )
        patched = ok(await client.call_tool("apply_patch", sent))
        assert path.read_bytes() == stored(text.replace("trois", "drei"))
        ok(await client.call_tool("undo", {"transaction": patched["transaction"]}))
        assert path.read_bytes() == original

        ok(await client.call_tool("edit_file", {**edit, **extra}))
        ok(await client.call_tool("rewind", {"session": edited["session"]}))
        assert path.read_bytes() == original


@pytest.mark.parametrize(
    ("data", "arguments", "details"),
    [
        (b"caf\xe9 a\n", {}, {"reason": "invalid_bytes", "encoding": "utf-8", "offset": 3}),
        (LE + b"a\x00b", {}, {"reason": "invalid_bytes", "encoding": "utf-16-le", "offset": 4}),
        (b"a", {"encoding": "nope"}, {"reason": "unknown_encoding", "field": "encoding"}),
    ],
)
async def test_a_file_not_valid_in_its_encoding_is_refused_with_one_envelope(
    workspace: Path, data: bytes, arguments: dict[str, Any], details: dict[str, Any]
) -> None:
    (workspace / "bad.txt").write_bytes(data)
    edit = {"path": "bad.txt", "edits": [{"old_text": "a", "new_text": "b"}], **arguments}
    async with Client(stdio_params(workspace)) as client:
        body = envelope(await client.call_tool("edit_file", edit), "VALIDATION")
    assert body["details"].items() >= details.items(), body
    assert (workspace / "bad.txt").read_bytes() == data


async def test_write_file_keeps_a_bom_unless_told(workspace: Path) -> None:
    path = workspace / "b.txt"
    path.write_bytes(BOM8 + b"old\r\n")
    async with Client(stdio_params(workspace)) as client:
        ok(await client.call_tool("write_file", {"path": "b.txt", "content": "new\n"}))
        assert path.read_bytes() == BOM8 + b"new\r\n"
        ok(await client.call_tool("write_file", {"path": "b.txt", "content": "x\n", "bom": False}))
        assert path.read_bytes() == b"x\r\n"
        ok(
            await client.call_tool(
                "write_file", {"path": "u.txt", "content": "é\n", "encoding": "utf-16"}
            )
        )
        assert (workspace / "u.txt").read_bytes() == LE + "é\n".encode("utf-16-le")
