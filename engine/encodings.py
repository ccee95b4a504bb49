"""Text encodings and line endings of files: found once, kept byte for byte.

Every route that turns a file's bytes into text or text into a file's bytes
comes here: read_file, edit_file, write_file, apply_patch, a stale change
merged (engine/stale.py), rewind's merge and the diffs of a result. Each works
on the file's **view**: its text as UTF-8 bytes, without a byte order mark.
What the route makes of the view is stored back in the file's own encoding,
with its BOM, so every byte outside the edited text is kept. Undo and rewind
restore bytes as the journal holds them.

A file's encoding, the first rule that applies (`form_of`):

1. the caller names it (`encoding`): any text codec Python knows;
2. a byte order mark: UTF-8, UTF-32 LE/BE, UTF-16 LE/BE;
3. the file declares it in its first bytes: a `coding:` (or `coding=`)
   comment on one of the first two lines, as PEP 263 reads it (also Emacs's
   `-*- coding: x -*-`, Vim's `fileencoding=x` and Ruby's `# encoding: x`),
   or an XML declaration (`<?xml version="1.0" encoding="ISO-8859-1"?>`);
4. UTF-8.

A codec named or declared and a BOM of that codec's family are kept together
(`utf-16` with `FF FE` is UTF-16 LE with its BOM). A file whose bytes are not
valid in its encoding, or would not come back the same once decoded and
encoded again, is refused for text edits (VALIDATION, `invalid_bytes`, with
the encoding and the offset of the first bad byte), never rewritten in another
encoding; a file found as UTF-8 that holds a NUL byte is binary (`binary_file`).

Line endings are reported as `lf`, `crlf`, `cr`, `mixed` or `none`; where
every line ends the same way (CRLF or CR), text written with LF alone is
given that ending (`with_endings`).
"""

from __future__ import annotations

import codecs
import re
from typing import Literal

import msgspec

from .errors import Code, LedgerError

__all__ = [
    "LineEndings",
    "TextForm",
    "codec_name",
    "declared",
    "form_of",
    "found_form",
    "line_endings",
    "shared_views",
    "stored_text",
    "text_views",
    "uniform_ending",
    "with_endings",
    "write_form",
]

LineEndings = Literal["lf", "crlf", "cr", "mixed", "none"]

#: Byte order marks by codec, longest first: UTF-32 LE's starts with UTF-16 LE's.
_BOMS: tuple[tuple[str, bytes], ...] = (
    ("utf-32-le", codecs.BOM_UTF32_LE),
    ("utf-32-be", codecs.BOM_UTF32_BE),
    ("utf-8", codecs.BOM_UTF8),
    ("utf-16-le", codecs.BOM_UTF16_LE),
    ("utf-16-be", codecs.BOM_UTF16_BE),
)
_BOM_OF = dict(_BOMS)
#: The bytes a BOM starts with: a file starting with none of them has none.
_BOM_STARTS = frozenset(mark[:1] for _, mark in _BOMS)
#: Codec names that say "with a BOM" (Python's), and the codec the BOM then picks.
_WITH_BOM = {"utf-8-sig": "utf-8", "utf-16": "utf-16-le", "utf-32": "utf-32-le"}
#: The family a codec's BOM belongs to: a named codec keeps a BOM of its family.
_FAMILY = {
    "utf-8": "utf-8",
    "utf-8-sig": "utf-8",
    "utf-16": "utf-16",
    "utf-16-le": "utf-16",
    "utf-16-be": "utf-16",
    "utf-32": "utf-32",
    "utf-32-le": "utf-32",
    "utf-32-be": "utf-32",
}

# PEP 263's expression, on a comment line; an XML declaration at the very start.
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.MULTILINE)
_XML = re.compile(rb"""<\?xml[^>]*?\sencoding\s*=\s*["']([-\w.:]+)["']""")


class TextForm(msgspec.Struct, frozen=True):
    """How a file's text is stored: its codec (Python's name for it) and its BOM.

    >>> form = TextForm("utf-16-le", bom=True)
    >>> form.view(b"\\xff\\xfea\\x00\\r\\x00\\n\\x00", "f")
    b'a\\r\\n'
    >>> form.stored(b"b\\n", "f")
    b'\\xff\\xfeb\\x00\\n\\x00'
    """

    encoding: str = "utf-8"
    bom: bool = False

    @property
    def plain(self) -> bool:
        """Whether the view is the file's bytes themselves (UTF-8 without a BOM)."""
        return self.encoding == "utf-8" and not self.bom

    @property
    def mark(self) -> bytes:
        return _BOM_OF[self.encoding] if self.bom else b""

    def view(self, data: bytes, label: str, *, binary: bool = False) -> bytes:
        """The file's text as UTF-8 without its BOM.

        Raises VALIDATION `invalid_bytes` (details: encoding, offset) where the
        bytes are not valid in the encoding or would not encode back the same,
        and `binary_file` for a NUL byte when `binary` says NUL means binary.
        """
        body = data[len(self.mark) :]
        if binary and b"\x00" in body:
            offset = body.index(b"\x00") + len(self.mark)
            raise self._refused(label, "binary_file", offset, "holds a NUL byte: it is binary")
        if self.plain and body.isascii():
            return body  # word-at-a-time; decoding would walk it byte by byte
        try:
            text = body.decode(self.encoding)
        except UnicodeDecodeError as exc:
            raise self._refused(label, "invalid_bytes", exc.start + len(self.mark)) from None
        if self.encoding == "utf-8":
            return body
        try:
            back = text.encode(self.encoding)
            view = text.encode("utf-8")
        except UnicodeEncodeError:
            back = b""
        if back != body:
            offset = next(
                (i for i, (a, b) in enumerate(zip(back, body, strict=False)) if a != b),
                min(len(back), len(body)),
            )
            raise self._refused(
                label, "invalid_bytes", offset + len(self.mark), "would not be kept byte for byte"
            )
        return view

    def stored(self, view: bytes, label: str, field: str = "content") -> bytes:
        """A view (UTF-8 text) as the file's bytes: in its encoding, after its BOM.

        Raises VALIDATION `not_encodable` naming `field` for a character the
        encoding has no bytes for.
        """
        if self.encoding == "utf-8":
            return self.mark + view
        # A patch's bytes that are not UTF-8 come back as surrogates: not encodable.
        return self.mark + self.encoded(view.decode("utf-8", "surrogateescape"), label, field)

    def encoded(self, text: str, label: str, field: str = "content") -> bytes:
        """`text` in this encoding (without the BOM); VALIDATION `not_encodable`."""
        try:
            return text.encode(self.encoding)
        except UnicodeEncodeError as exc:
            char = text[exc.start]
            raise LedgerError(
                Code.VALIDATION,
                f"{field} holds {char!r} (U+{ord(char):04X}), which {self.encoding} "
                f"cannot encode; {label} is kept in {self.encoding}.",
                path=label,
                details={
                    "field": field,
                    "reason": "not_encodable",
                    "encoding": self.encoding,
                    "character": f"U+{ord(char):04X}",
                },
                suggestion="write the character another way, or name another encoding "
                "with write_file's encoding",
            ) from None

    def _refused(self, label: str, reason: str, offset: int, why: str = "") -> LedgerError:
        why = why or f"is not valid {self.encoding}"
        return LedgerError(
            Code.VALIDATION,
            f"{label} {why} at byte {offset}; text edits keep a file in its own "
            "encoding, so it cannot be edited as text.",
            path=label,
            details={"reason": reason, "encoding": self.encoding, "offset": offset},
            suggestion="name the file's encoding with the encoding argument, or write "
            "its bytes whole with write_file (encoding: base64)",
        )


def codec_name(name: str, field: str = "encoding") -> str:
    """Python's name of a text codec; VALIDATION naming `field` for another name.

    >>> codec_name("Latin-1"), codec_name("UTF8"), codec_name("utf_16")
    ('iso8859-1', 'utf-8', 'utf-16')
    """
    try:
        info = codecs.lookup(name)
    except LookupError:
        info = None
    # A bytes-to-bytes codec (zlib, base64, rot13...) is not a text encoding.
    if info is None or not getattr(info, "_is_text_encoding", True):
        raise LedgerError(
            Code.VALIDATION,
            f"{field} {name!r} is not a text encoding this server knows.",
            details={"field": field, "reason": "unknown_encoding", "encoding": name},
            suggestion="name a text encoding as Python spells it: utf-8, utf-16, latin-1, "
            "cp1252, shift_jis...",
        )
    return info.name


def _bom_form(data: bytes) -> TextForm | None:
    if data[:1] not in _BOM_STARTS:
        return None  # most text: one set lookup instead of a test of every BOM
    for name, mark in _BOMS:
        if data.startswith(mark):
            return TextForm(name, bom=True)
    return None


def declared(data: bytes) -> str | None:
    """The encoding the file's first bytes declare, if Python knows it.

    >>> declared(b"#!/usr/bin/env python\\n# -*- coding: latin-1 -*-\\n")
    'iso8859-1'
    >>> declared(b"<?xml version='1.0' encoding='Windows-1252'?><a/>"), declared(b"x = 1")
    ('cp1252', None)
    """
    head = data[:1024]
    if head.startswith(b"<?xml"):
        found = _XML.match(head[: head.find(b">") + 1])
    else:
        # PEP 263 reads the first two lines. Cut where the second ends, without
        # splitting the rest; a declaration names "coding", so a text without it
        # (nearly all) is answered by one substring search, not the pattern.
        second_end = head.find(b"\n", head.find(b"\n") + 1)
        first_two = head[:second_end] if second_end >= 0 else head
        found = _CODING.search(first_two) if b"coding" in first_two else None
    if found is None:
        return None
    try:
        return codec_name(found.group(1).decode("ascii"))
    except LedgerError:
        return None  # an encoding Python does not know: read as if undeclared


def _named_form(name: str, bom: TextForm | None) -> TextForm:
    """A named codec, with the BOM found when it is of the codec's family."""
    family = _FAMILY.get(name)
    same_family = bom is not None and family is not None and _FAMILY[bom.encoding] == family
    if bom is not None and same_family and (name in _WITH_BOM or name == bom.encoding):
        return bom
    if name in _WITH_BOM:
        return TextForm(_WITH_BOM[name], bom=True)
    return TextForm(name)


def form_of(data: bytes | None, named: str | None = None) -> TextForm:
    """How `data` is stored: `named` (a codec_name), else its BOM, else what it declares,
    else UTF-8 (see the module's docstring).

    >>> form_of(b"\\xef\\xbb\\xbfhi"), form_of(b"# coding: cp1252\\n")
    (TextForm(encoding='utf-8', bom=True), TextForm(encoding='cp1252', bom=False))
    >>> form_of(b"\\xff\\xfeh\\x00", "utf-16"), form_of(b"\\xff\\xfeh\\x00", "latin-1")
    (TextForm(encoding='utf-16-le', bom=True), TextForm(encoding='iso8859-1', bom=False))
    >>> form_of(b"h\\x00", "utf-16"), form_of(b"<?xml version='1.0' encoding='utf-16'?>")
    (TextForm(encoding='utf-16-le', bom=False), TextForm(encoding='utf-16-le', bom=False))
    """
    bom = _bom_form(data) if data else None
    if named is None and bom is not None:
        return bom
    name = codec_name(named) if named is not None else declared(data) if data else None
    if name is None:
        return TextForm()
    form = _named_form(name, bom)
    # A name that asks for a BOM (utf-8-sig, utf-16) reads a file without one.
    keep = not data or not form.bom or data.startswith(form.mark)
    return form if keep else TextForm(form.encoding)


def found_form(data: bytes, named: str | None, label: str) -> tuple[TextForm, bytes]:
    """`data`'s form and view; raises what `TextForm.view` raises.

    A NUL byte makes a file binary unless its encoding came from its BOM or the caller.
    """
    form = form_of(data, named)
    binary = named is None and not form.bom
    return form, form.view(data, label, binary=binary)


def text_views(data: bytes) -> tuple[TextForm, bytes] | None:
    """`data`'s form and view, or None when it is not text in the encoding it is found in.

    >>> text_views(b"\\xfe\\xff\\x00h")
    (TextForm(encoding='utf-16-be', bom=True), b'h')
    >>> text_views(b"\\x00\\x01") is None, text_views(b"caf\\xe9") is None
    (True, True)
    """
    try:
        return found_form(data, None, "")
    except LedgerError:
        return None


def shared_views(*datas: bytes) -> tuple[TextForm, list[bytes]] | None:
    """The views of several versions of one file, when all are text in one form
    (a merge works on them, then stores its result in that form); else None.

    Versions in an encoding nothing names (no BOM, no declaration, not UTF-8: a
    Latin-1 file, say) are merged by their bytes' lines, as git merges them,
    unless one holds a NUL byte (binary).

    >>> shared_views(b"\\xef\\xbb\\xbfa\\n", b"\\xef\\xbb\\xbfb\\n")
    (TextForm(encoding='utf-8', bom=True), [b'a\\n', b'b\\n'])
    >>> shared_views(b"caf\\xe9\\n", b"the\\n")
    (TextForm(encoding='utf-8', bom=False), [b'caf\\xe9\\n', b'the\\n'])
    >>> shared_views(b"\\xef\\xbb\\xbfa\\n", b"a\\n") is None, shared_views(b"\\x00") is None
    (True, True)
    """
    found = [text_views(data) for data in datas]
    forms = {f[0] for f in found if f is not None}
    if None not in found:
        return (forms.pop(), [f[1] for f in found if f is not None]) if len(forms) == 1 else None
    if forms - {TextForm()} or any(b"\x00" in d or _bom_form(d) for d in datas):
        return None
    return TextForm(), list(datas)


def line_endings(view: bytes) -> LineEndings:
    """Which line endings a text holds.

    >>> [line_endings(t) for t in (b"a\\nb", b"a\\r\\n", b"a\\rb\\r", b"a\\r\\nb\\n", b"a")]
    ['lf', 'crlf', 'cr', 'mixed', 'none']
    """
    if b"\r" not in view:
        return "lf" if b"\n" in view else "none"
    crlf = view.count(b"\r\n")
    counts: dict[LineEndings, int] = {
        "crlf": crlf,
        "lf": view.count(b"\n") - crlf,
        "cr": view.count(b"\r") - crlf,
    }
    kinds = [kind for kind, n in counts.items() if n]
    return kinds[0] if len(kinds) == 1 else "mixed"


def uniform_ending(view: bytes) -> bytes | None:
    """The line end of a text whose every line ends in CRLF, or every one in CR; else None.

    >>> uniform_ending(b"a\\r\\nb\\r\\n"), uniform_ending(b"a\\rb"), uniform_ending(b"a\\nb\\r\\n")
    (b'\\r\\n', b'\\r', None)
    """
    # memchr for a CR first: an LF-only file costs one scan.
    if b"\r" not in view:
        return None
    ending = line_endings(view)
    return b"\r\n" if ending == "crlf" else b"\r" if ending == "cr" else None


def with_endings(text: str, ending: bytes | None) -> str:
    """`text` with its LFs as `ending`, when it was written with LF alone.

    >>> with_endings("a\\nb\\n", b"\\r\\n"), with_endings("a\\r\\n", b"\\r")
    ('a\\r\\nb\\r\\n', 'a\\r\\n')
    """
    if ending is None or "\r" in text:
        return text
    return text.replace("\n", ending.decode("ascii"))


def write_form(
    prior: TextForm | None, text: str, named: str | None, bom: bool | None, field: str = "bom"
) -> TextForm:
    """The form write_file stores `text` in, over a file whose form is `prior` (None:
    a new file, or one that is not text).

    The encoding is the one named, else the one `text` declares, else the file's,
    else UTF-8. The BOM is `bom` when given; else kept where the file had one and
    the encoding has one (a `-sig`, `utf-16` or `utf-32` name asks for one).

    >>> write_form(TextForm("utf-8", bom=True), "x", None, None)
    TextForm(encoding='utf-8', bom=True)
    >>> write_form(TextForm("utf-8", bom=True), "x", None, False)
    TextForm(encoding='utf-8', bom=False)
    >>> write_form(None, "# coding: latin-1\\n", None, None)
    TextForm(encoding='iso8859-1', bom=False)
    """
    name = named if named is not None else declared(text[:1024].encode("utf-8", "replace"))
    if name is None:
        form = prior or TextForm()
    else:
        form = _named_form(name, prior if prior is not None and prior.bom else None)
    asked = bom
    if bom is None:
        bom = form.bom or (prior is not None and prior.bom)
    if form.encoding not in _BOM_OF:
        if asked:
            raise LedgerError(
                Code.VALIDATION,
                f"{form.encoding} has no byte order mark.",
                details={"field": field, "reason": "no_bom", "encoding": form.encoding},
            )
        bom = False
    return TextForm(form.encoding, bom=bom)


def stored_text(
    current: bytes | None,
    text: str,
    named: str | None,
    bom: bool | None,
    label: str,
    prefix: str = "",
) -> bytes:
    """The bytes write_file stores for `text` over a file now holding `current`.

    Kept from the file: its encoding and BOM (`write_form`), and its one line
    end (CRLF or CR) given to text written with LF alone.

    >>> stored_text(b"\\xef\\xbb\\xbfa\\r\\nb\\r\\n", "c\\nd\\n", None, None, "f")
    b'\\xef\\xbb\\xbfc\\r\\nd\\r\\n'
    """
    prior = text_views(current) if current is not None else None
    form = write_form(prior[0] if prior else None, text, named, bom, prefix + "bom")
    text = with_endings(text, uniform_ending(prior[1]) if prior else None)
    return form.mark + form.encoded(text, label, prefix + "content")
