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
from ledgerfs.engine.encodings import TextForm, declared, form_of, line_endings

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
        opened = portal.wrap_async_context_manager(Engine.open(config))
        with opened as engine:
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


# -- the rules, one by one ----------------------------------------------------------

BOM8, LE, BE = codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE


@pytest.mark.parametrize(
    ("data", "named", "found"),
    [
        (b"plain\n", None, ("utf-8", False)),
        (BOM8 + b"a\n", None, ("utf-8", True)),
        (LE + "a".encode("utf-16-le"), None, ("utf-16-le", True)),
        (BE + "a".encode("utf-16-be"), None, ("utf-16-be", True)),
        (codecs.BOM_UTF32_LE + "a".encode("utf-32-le"), None, ("utf-32-le", True)),
        (codecs.BOM_UTF32_BE + "a".encode("utf-32-be"), None, ("utf-32-be", True)),
        (b"#!/usr/bin/env python\n# -*- coding: latin-1 -*-\n", None, ("iso8859-1", False)),
        (b"# vim: set fileencoding=cp1252 :\nx\n", None, ("cp1252", False)),
        (b"# encoding: utf-8\n", None, ("utf-8", False)),
        (b"x = 1\ny = 2\n# coding: latin-1\n", None, ("utf-8", False)),  # third line
        (b'<?xml version="1.0" encoding="ISO-8859-1"?>\n<a/>', None, ("iso8859-1", False)),
        (b"<?xml version='1.0' encoding='Shift_JIS'?><a/>", None, ("shift_jis", False)),
        (b"<a/>\n<?xml encoding='latin-1'?>", None, ("utf-8", False)),  # not at the start
        (b"# coding: no-such-codec\n", None, ("utf-8", False)),
        (BOM8 + b"# coding: latin-1\n", None, ("utf-8", True)),  # the BOM wins
        (BE + "a".encode("utf-16-be"), "utf-16", ("utf-16-be", True)),
        (BOM8 + b"a", "UTF8", ("utf-8", True)),
        (b"a", "utf-8-sig", ("utf-8", False)),
        ("a".encode("utf-16-le"), "utf-16", ("utf-16-le", False)),
        (BOM8 + b"a", "utf-16", ("utf-16-le", False)),
        (LE + b"a\x00", "latin-1", ("iso8859-1", False)),
    ],
)
def test_the_encoding_is_named_then_marked_then_declared_then_utf8(
    data: bytes, named: str | None, found: tuple[str, bool]
) -> None:
    assert form_of(data, named) == TextForm(*found)


#: Pieces of a file's first bytes that detection reads: every BOM, declarations
#: of every kind, line ends in and around them, and plain text.
HEAD_PIECES = st.sampled_from(
    [
        codecs.BOM_UTF8,
        codecs.BOM_UTF16_LE,
        codecs.BOM_UTF16_BE,
        codecs.BOM_UTF32_LE,
        codecs.BOM_UTF32_BE,
        b"\x00",
        b"# -*- coding: latin-1 -*-",
        b"#coding=cp1252",
        b"# vim: set fileencoding=koi8-r :",
        b"# coding: no-such",
        b"coding: latin-1",
        b"<?xml version='1.0' encoding='utf-16'?>",
        b"#!/usr/bin/env python",
        b"\n",
        b"\r\n",
        b"x = 1",
        b"\xe9",
    ]
)


def _declared_as_pep_263_reads_it(data: bytes) -> str | None:
    """What the first two lines declare, read the plain way (the reference)."""
    head = data[:1024]
    if head.startswith(b"<?xml"):
        return declared(head[: head.find(b">") + 1])
    first_two = b"\n".join(head.split(b"\n", 2)[:2])
    found = re.search(rb"(?m)^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", first_two)
    if found is None:
        return None
    try:
        return codecs.lookup(found.group(1).decode("ascii")).name
    except LookupError:
        return None


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(HEAD_PIECES, max_size=8))
def test_detection_finds_every_bom_and_declaration_there_is(pieces: list[bytes]) -> None:
    """The shortcuts of detection (a first byte no BOM starts with, a head without
    "coding") answer what a test of every BOM and the declaration's pattern do."""
    data = b"".join(pieces)
    marks = [
        codecs.BOM_UTF32_LE,
        codecs.BOM_UTF32_BE,
        codecs.BOM_UTF8,
        codecs.BOM_UTF16_LE,
        codecs.BOM_UTF16_BE,
    ]
    has_bom = any(data.startswith(mark) for mark in marks)
    assert form_of(data).bom is has_bom
    assert declared(data) == _declared_as_pep_263_reads_it(data)


async def _fails(session: Session, tool: str, **arguments: Any) -> dict[str, Any]:
    with pytest.raises(LedgerError) as caught:
        await session.call(tool, arguments)
    body = caught.value.envelope.error
    assert body.code == Code.VALIDATION, body
    return dict(body.details)


EDIT = {"edits": [{"old_text": "a", "new_text": "b"}]}
UNKNOWN = {"reason": "unknown_encoding", "field": "encoding"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("data", "arguments", "details"),
    [
        # Latin-1 bytes in a file that names no encoding: not UTF-8, at the é.
        (b"caf\xe9 a\n", EDIT, {"reason": "invalid_bytes", "encoding": "utf-8", "offset": 3}),
        (b"a\x00b", EDIT, {"reason": "binary_file", "encoding": "utf-8", "offset": 1}),
        # UTF-16 with an odd byte at the end, and with a lone surrogate (offsets count the BOM).
        (LE + b"a\x00b", EDIT, {"reason": "invalid_bytes", "encoding": "utf-16-le", "offset": 4}),
        (
            LE + b"a\x00\x00\xd8b\x00",
            EDIT,
            {"reason": "invalid_bytes", "encoding": "utf-16-le", "offset": 4},
        ),
        (
            b"# coding: ascii\na\xff\n",
            EDIT,
            {"reason": "invalid_bytes", "encoding": "ascii", "offset": 17},
        ),
        # Bytes that decode, but would not encode back the same: never rewritten.
        (b"+AGE- a", {**EDIT, "encoding": "utf-7"}, {"reason": "invalid_bytes", "offset": 0}),
        (b"a\xe9", {**EDIT, "encoding": "utf-8"}, {"reason": "invalid_bytes", "offset": 1}),
        # New text the encoding cannot hold.
        (
            b"a\xe9",
            {"edits": [{"old_text": "a", "new_text": "\u20ac"}], "encoding": "latin-1"},
            {"reason": "not_encodable", "encoding": "iso8859-1", "character": "U+20AC"},
        ),
        (
            b"a",
            {**EDIT, "encoding": "no-such"},
            {"reason": "unknown_encoding", "field": "encoding"},
        ),
        (b"a", {**EDIT, "encoding": "rot13"}, {"reason": "unknown_encoding"}),
    ],
)
async def test_a_text_edit_the_encoding_cannot_keep_is_refused_and_changes_nothing(
    engine: Engine, workspace: Path, data: bytes, arguments: dict[str, Any], details: dict[str, Any]
) -> None:
    (workspace / "f").write_bytes(data)
    session = await engine.session()
    got = await _fails(session, "edit_file", path="f", **arguments)
    assert got.items() >= details.items(), got
    assert (workspace / "f").read_bytes() == data


@pytest.mark.anyio
async def test_patches_and_reads_refuse_bytes_their_encoding_does_not_hold(
    engine: Engine, workspace: Path
) -> None:
    broken = LE + "a\nb\n".encode("utf-16-le") + b"\x00\xdc"
    (workspace / "u.txt").write_bytes(broken)
    session = await engine.session()
    patch = "--- a/u.txt\n+++ b/u.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    got = await _fails(session, "apply_patch", patch=patch)
    assert (got["reason"], got["encoding"], got["offset"]) == ("invalid_bytes", "utf-16-le", 10)
    assert (workspace / "u.txt").read_bytes() == broken
    (workspace / "l.txt").write_bytes(b"caf\xe9\n")
    got = await _fails(session, "read_file", path="l.txt", encoding="utf-8")
    assert (got["reason"], got["offset"]) == ("invalid_bytes", 3)
    read = await session.call("read_file", {"path": "l.txt"})
    assert (read.encoding, base64.b64decode(read.content)) == ("base64", b"caf\xe9\n")
    named = await session.call("read_file", {"path": "l.txt", "encoding": "latin-1"})
    assert (named.content, named.encoding, named.line_endings) == ("café\n", "iso8859-1", "lf")


U16 = LE + "a\r\nb\r\n".encode("utf-16-le")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("before", "arguments", "after"),
    [
        # The file's BOM and encoding are kept unless told otherwise.
        (BOM8 + b"a\n", {}, BOM8 + b"x\n"),
        (BOM8 + b"a\n", {"encoding": "utf-8"}, BOM8 + b"x\n"),
        (BOM8 + b"a\n", {"bom": False}, b"x\n"),
        (b"a\n", {"bom": True}, BOM8 + b"x\n"),
        (U16, {}, LE + "x\r\n".encode("utf-16-le")),  # and its CRLF, from LF text
        (U16, {"encoding": "utf-16-be"}, BE + "x\r\n".encode("utf-16-be")),
        (U16, {"bom": False}, "x\r\n".encode("utf-16-le")),
        (None, {"encoding": "utf-16"}, LE + "x\n".encode("utf-16-le")),
        (None, {"encoding": "UTF-16BE"}, "x\n".encode("utf-16-be")),
        (None, {"encoding": "utf-8-sig"}, BOM8 + b"x\n"),
        (b"caf\xe9\n", {"encoding": "latin-1"}, b"x\n"),
        (BOM8 + b"a\n", {"encoding": "latin-1"}, b"x\n"),  # Latin-1 has no BOM
        (b"a\rb\r", {}, b"x\r"),  # a CR file stays CR
        (b"a\r\nb\n", {}, b"x\n"),  # mixed endings: the text as written
        (BOM8 + b"a\n", {"encoding": "base64", "content": "eAo="}, b"x\n"),  # bytes as given
    ],
)
async def test_write_file_keeps_the_files_encoding_bom_and_line_end(
    engine: Engine,
    workspace: Path,
    before: bytes | None,
    arguments: dict[str, Any],
    after: bytes,
) -> None:
    if before is not None:
        (workspace / "w").write_bytes(before)
    session = await engine.session()
    await session.call("write_file", {"path": "w", "content": "x\n", **arguments})
    assert (workspace / "w").read_bytes() == after
    # The same through a batch's write operation.
    if before is not None:
        (workspace / "w").write_bytes(before)
    else:
        (workspace / "w").unlink()
    op = {"op": "write", "path": "w", "content": "x\n", **arguments}
    await session.call("batch", {"operations": [op]})
    assert (workspace / "w").read_bytes() == after


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content", "stored"),
    [
        ("# -*- coding: latin-1 -*-\né\n", "# -*- coding: latin-1 -*-\né\n".encode("latin-1")),
        ("<?xml version='1.0' encoding='cp1252'?>\n<a>€</a>\n", None),
    ],
)
async def test_new_text_is_stored_in_the_encoding_it_declares(
    engine: Engine, workspace: Path, content: str, stored: bytes | None
) -> None:
    session = await engine.session()
    await session.call("write_file", {"path": "d", "content": content})
    assert (workspace / "d").read_bytes() == (stored or content.encode("cp1252"))
    read = await session.call("read_file", {"path": "d"})
    assert read.content == content


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "details"),
    [
        ({"encoding": "base64", "bom": True}, {"field": "bom"}),
        ({"encoding": "latin-1", "bom": True}, {"field": "bom", "reason": "no_bom"}),
        ({"encoding": "hex"}, {"field": "encoding", "reason": "unknown_encoding"}),
        ({"encoding": "latin-1", "content": "\u20ac"}, {"reason": "not_encodable"}),
    ],
)
async def test_write_file_refuses_what_it_cannot_store(
    engine: Engine, workspace: Path, arguments: dict[str, Any], details: dict[str, Any]
) -> None:
    session = await engine.session()
    got = await _fails(session, "write_file", **{"path": "w", "content": "eAo=", **arguments})
    assert got.items() >= details.items(), got
    assert not (workspace / "w").exists()
    op = {"op": "write", "path": "w", "content": "eAo=", **arguments}
    got = await _fails(session, "batch", operations=[op])
    if "field" in details:
        assert got["field"] == "operations[0]." + details["field"]


@pytest.mark.anyio
async def test_a_batch_edit_names_the_encoding(engine: Engine, workspace: Path) -> None:
    (workspace / "l").write_bytes(b"caf\xe9\r\n")
    session = await engine.session()
    op = {
        "op": "edit",
        "path": "l",
        "encoding": "latin-1",
        "edits": [{"old_text": "é", "new_text": "è"}],
    }
    await session.call("batch", {"operations": [op]})
    assert (workspace / "l").read_bytes() == b"caf\xe8\r\n"


@pytest.mark.anyio
async def test_the_diff_of_a_utf16_change_shows_its_text(engine: Engine, workspace: Path) -> None:
    (workspace / "u").write_bytes(U16)
    session = await engine.session()
    edit = {"path": "u", "edits": [{"old_text": "b", "new_text": "c"}]}
    result = await session.call("edit_file", edit)
    assert "-b\r\n+c\r\n" in result.diff
    rewritten = await session.call(
        "write_file", {"path": "u", "content": "a\r\nc\r\n", "encoding": "utf-16-be"}
    )
    assert (
        "same text, stored as utf-16-le with a BOM, then as utf-16-be with a BOM" in rewritten.diff
    )


@pytest.mark.anyio
async def test_a_git_diff_of_a_file_with_a_bom_applies_to_its_text(
    engine: Engine, workspace: Path
) -> None:
    (workspace / "b.txt").write_bytes(BOM8 + b"one\ntwo\n")
    session = await engine.session()
    patch = "--- a/b.txt\n+++ b/b.txt\n@@ -1,2 +1,2 @@\n-\ufeffone\n+\ufeffONE\n two\n"
    await session.call("apply_patch", {"patch": patch})
    assert (workspace / "b.txt").read_bytes() == BOM8 + b"ONE\ntwo\n"


@pytest.mark.anyio
async def test_a_stale_edit_of_a_utf16_file_merges_as_text(engine: Engine, workspace: Path) -> None:
    lines = [f"line {i}\r\n" for i in range(10)]
    (workspace / "m").write_bytes(BE + "".join(lines).encode("utf-16-be"))
    agent, other = await engine.session("agent"), await engine.session("other")
    read = await agent.call("read_file", {"path": "m"})
    await other.call(
        "edit_file", {"path": "m", "edits": [{"old_text": "line 8", "new_text": "L8"}]}
    )
    edit = {"old_text": "line 1\n", "new_text": "L1\n"}
    await agent.call(
        "edit_file",
        {"path": "m", "edits": [edit], "expected_hash": read.content_hash, "on_stale": "merge"},
    )
    lines[1], lines[8] = "L1\r\n", "L8\r\n"
    assert (workspace / "m").read_bytes() == BE + "".join(lines).encode("utf-16-be")


@pytest.mark.anyio
async def test_a_patch_adding_bytes_a_utf16_file_cannot_hold_is_refused(
    engine: Engine, workspace: Path
) -> None:
    (workspace / "u.txt").write_bytes(U16)
    session = await engine.session()
    # A Latin-1 byte in a patch line: no UTF-16 text holds it.
    patch = b"--- a/u.txt\n+++ b/u.txt\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+caf\xe9\r\n"
    got = await _fails(session, "apply_patch", patch_base64=base64.b64encode(patch).decode())
    assert (got["reason"], got["character"]) == ("not_encodable", "U+DCE9")
    assert (workspace / "u.txt").read_bytes() == U16
