"""Encodings and line endings kept byte for byte, on a real engine.

Every form a text file comes in (UTF-8 with and without a BOM, UTF-16 LE/BE with
a BOM, Latin-1 named by the caller, cp1252 declared by the file) with LF, CRLF, CR
and mixed line endings, over random contents: read_file reports the form; an
edit, a patch, undo and rewind leave every byte outside the edited text as it
was. Then the rules of engine/encodings.py one by one: detection, refusals, what
write_file keeps, diffs and merges of text in other encodings.
"""

from __future__ import annotations

import base64
import codecs
import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgerfs.engine import Code, Engine, LedgerError, Session
from ledgerfs.engine.encodings import TextForm, form_of, line_endings

MARK, OTHER = "<<MARK>>", "<<OTHER>>"
#: Characters every form here can store (Latin-1 and cp1252 included); no '<' or '>'.
ALPHABET = "abz XY09_é ü ß ñ ¿ © ÿ"
ENDS = {"lf": ["\n"], "crlf": ["\r\n"], "cr": ["\r"], "mixed": ["\n", "\r\n", "\r"]}


class Form(msgspec.Struct, frozen=True):
    """How a case stores its text, and how a caller talks about it."""

    name: str
    codec: str
    bom: bytes = b""
    #: The encoding argument the calls give (None: found from the file).
    named: str | None = None
    #: A first line that declares the encoding.
    declaration: str = ""
    #: The patch is sent as a `git diff` of the file would hold it: its bytes in
    #: the file's encoding (patch_base64), not as text.
    patch_in_codec: bool = False

    def encode(self, text: str) -> bytes:
        return self.bom + text.encode(self.codec)

    def args(self) -> dict[str, Any]:
        return {} if self.named is None else {"encoding": self.named}


FORMS = [
    Form("utf-8", "utf-8"),
    Form("utf-8-bom", "utf-8", codecs.BOM_UTF8),
    Form("utf-16-le-bom", "utf-16-le", codecs.BOM_UTF16_LE),
    Form("utf-16-be-bom", "utf-16-be", codecs.BOM_UTF16_BE),
    Form("latin-1-named", "latin-1", named="latin-1", patch_in_codec=True),
    Form("cp1252-declared", "cp1252", declaration="# -*- coding: cp1252 -*-"),
    Form("cp1252-declared-git-diff", "cp1252", declaration="# coding=cp1252", patch_in_codec=True),
]
#: What read_file reports as the encoding of each.
REPORTED = {
    "utf-8": "utf-8",
    "utf-16-le": "utf-16-le",
    "utf-16-be": "utf-16-be",
    "latin-1": "iso8859-1",
    "cp1252": "cp1252",
}


class Env(msgspec.Struct):
    portal: BlockingPortal
    engine: Engine
    root: Path
    other: Session
    count: Iterator[int]

    def call(self, caller: Session, tool: str, **arguments: Any) -> Any:
        return self.portal.call(caller.call, tool, arguments)

    def session(self, name: str) -> Session:
        return self.portal.call(self.engine.session, name)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """One engine for every example (opened once: examples use new files and sessions)."""
    root = Path(os.path.realpath(tmp_path_factory.mktemp("enc")))
    config = {"roots": [str(root)], "durability": "normal", "auto_occ": "off"}
    with start_blocking_portal("asyncio") as portal:
        with portal.wrap_async_context_manager(Engine.open(config)) as engine:
            other = portal.call(engine.session, "other")
            yield Env(portal, engine, root, other, itertools.count())


def uniform(text: str) -> str | None:
    """The one line end of a text whose every line ends alike in CRLF or CR."""
    found = set(re.findall(r"\r\n|\r|\n", text))
    return found.pop() if len(found) == 1 and found != {"\n"} else None


@st.composite
def documents(draw: st.DrawFn, form: Form) -> tuple[str, str]:
    """(text with MARK and OTHER lines among random ones, the replacement of MARK)."""
    ends = ENDS[draw(st.sampled_from(sorted(ENDS)))]
    line = st.text(alphabet=ALPHABET, max_size=10)
    lines = draw(st.lists(line, max_size=5))
    lines.insert(draw(st.integers(0, len(lines))), MARK)
    lines.insert(draw(st.integers(lines.index(MARK) + 1, len(lines))), OTHER)
    if form.declaration:
        lines.insert(0, form.declaration)
    ended = [text + draw(st.sampled_from(ends)) for text in lines]
    if draw(st.booleans()):
        ended[-1] = lines[-1]  # no line end at the end of the file
    new = draw(st.text(alphabet=ALPHABET, min_size=1, max_size=8))
    if draw(st.booleans()):
        new += "\n" + draw(st.text(alphabet=ALPHABET, max_size=8))
    return "".join(ended), new


def hunk_for(text: str, old: str, new: str) -> str:
    """A one-hunk unified diff of `text`'s line holding `old`, replaced by `new`,
    with up to two lines of context (lines split at LF, as diff splits them)."""
    lines = re.findall(r"[^\n]*\n|[^\n]+$", text)
    index = next(i for i, line in enumerate(lines) if old in line)
    start, end = max(0, index - 2), min(len(lines), index + 3)
    body: list[str] = []
    for i in range(start, end):
        tags = [" "] if i != index else ["-", "+"]
        for tag in tags:
            line = lines[i] if tag != "+" else lines[i].replace(old, new)
            body.append(tag + line)
            if not line.endswith("\n"):
                body.append("\n\\ No newline at end of file\n")
    count = end - start
    header = f"@@ -{start + 1},{count} +{start + 1},{count} @@\n"
    return "--- a/f.txt\n+++ b/f.txt\n" + header + "".join(body)


def patch_args(form: Form, patch: str, name: str) -> dict[str, Any]:
    patch = patch.replace("a/f.txt", f"a/{name}").replace("b/f.txt", f"b/{name}")
    if form.patch_in_codec:
        return {"patch_base64": base64.b64encode(patch.encode(form.codec)).decode()}
    return {"patch": patch}


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.name)
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_round_trips_keep_every_byte_outside_the_edited_text(
    env: Env, form: Form, data: st.DataObject
) -> None:
    text, new = data.draw(documents(form))
    n = next(env.count)
    name = f"f{n}.txt"
    path = env.root / name
    original = form.encode(text)
    path.write_bytes(original)
    agent = env.session(f"agent-{n}")
    end = uniform(text)
    written = new.replace("\n", end) if end is not None else new

    read = env.call(agent, "read_file", path=name, **form.args())
    assert (read.content, read.encoding) == (text, REPORTED[form.codec])
    assert (read.bom, read.line_endings) == (bool(form.bom), line_endings(text.encode()))

    # edit_file: MARK's bytes replaced, every other byte as it was; undo gives it all back.
    edited = env.call(
        agent, "edit_file", path=name, edits=[{"old_text": MARK, "new_text": new}], **form.args()
    )
    head, tail = text.split(MARK)
    assert path.read_bytes() == form.encode(head + written + tail)
    assert path.read_bytes().startswith(form.encode(head))
    assert path.read_bytes().endswith(tail.encode(form.codec))
    env.call(agent, "undo", transaction=edited.transaction)
    assert path.read_bytes() == original

    # apply_patch: the hunk is text of the file as it is decoded.
    one_line = new.replace("\n", " ")
    patched = env.call(
        agent, "apply_patch", **patch_args(form, hunk_for(text, MARK, one_line), name)
    )
    assert path.read_bytes() == form.encode(head + one_line + tail)
    env.call(agent, "undo", transaction=patched.transaction)
    assert path.read_bytes() == original

    # rewind: the agent's edit taken back, another session's later edit of another
    # line kept (merged as text, stored in the file's encoding) when a line that
    # neither changed lies between them; else the rewind alone.
    env.call(
        agent, "edit_file", path=name, edits=[{"old_text": MARK, "new_text": new}], **form.args()
    )
    lines = text.split("\n")
    mark_line = next(i for i, line in enumerate(lines) if MARK in line)
    other_line = next(i for i, line in enumerate(lines) if OTHER in line)
    apart = other_line - mark_line >= 2
    if apart:
        env.call(
            env.other,
            "edit_file",
            path=name,
            edits=[{"old_text": OTHER, "new_text": "kept"}],
            **form.args(),
        )
    env.call(agent, "rewind", session=f"agent-{n}")
    expected = text.replace(OTHER, "kept") if apart else text
    assert path.read_bytes() == form.encode(expected)
