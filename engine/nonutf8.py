"""Text that is not UTF-8: refused in arguments, escaped in replies, accepted back in paths.

A client's JSON can carry a lone surrogate (`"\\ud800"`), which no file name,
content or UTF-8 reply can hold: such an argument is VALIDATION, naming the field.

A file name on disk can hold bytes that are not UTF-8. Python gives them back as
lone surrogates (U+DC80-U+DCFF, `surrogateescape`), which JSON cannot carry. In a
reply such a name is written in the **escaped form**: the name (one path
component) between double quotes, each byte that is not UTF-8 as `\\xHH`, and
`\\` and `"` as `\\\\` and `\\"`. So `caf\\xe9.txt` (Latin-1 bytes) is listed as
`"caf\\xe9.txt"`, and a path of it as `/root/"caf\\xe9.txt"`. A path argument
may spell a component in the escaped form; it names the file with those bytes.
(A real name that itself starts and ends with `"` and holds `\\xHH` escapes of
bytes that are not UTF-8 is read as the escaped form.)
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from .errors import Code, LedgerError

__all__ = ["escape_text", "reject_surrogates", "reply_json", "unescape_path", "without_surrogates"]

_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED = re.compile(r'"((?:[^"\\]|\\[\\"]|\\x[0-9a-fA-F]{2})*)"')
_ESCAPE = re.compile(r'\\(?:x([0-9a-fA-F]{2})|([\\"]))')


def reject_surrogates(value: Any, field: str = "") -> None:
    """Raise VALIDATION when any string in `value` (keys too) holds a lone surrogate.

    `details.field` names where, as request fields are named (`edits[0].old_text`).

    >>> reject_surrogates({"path": "a.txt", "edits": [{"old_text": "x"}]})
    >>> try:
    ...     reject_surrogates({"edits": [{"old_text": "a\\ud800"}]})
    ... except LedgerError as exc:
    ...     print(exc.details)
    {'field': 'edits[0].old_text', 'reason': 'lone_surrogate'}
    """
    try:
        # One pass in C over every string: UTF-8 cannot encode a lone surrogate.
        msgspec.json.encode(value)
    except Exception:  # a surrogate, or a value JSON cannot hold: walk it to name the field
        _reject_in(value, field)


def _reject_in(value: Any, field: str) -> None:
    if isinstance(value, str):
        if not value.isascii() and _SURROGATE.search(value):
            where = field or "the arguments"
            raise LedgerError(
                Code.VALIDATION,
                f"{where} holds a lone surrogate (not UTF-8 text).",
                details={"field": where, "reason": "lone_surrogate"},
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            name = escape_text(key) if isinstance(key, str) else repr(key)
            _reject_in(key, f"{field} (a key)" if field else "a key")
            _reject_in(item, f"{field}.{name}" if field else name)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _reject_in(item, f"{field}[{index}]")


def _escape_name(name: str) -> str:
    text: list[str] = []
    pending = bytearray()
    for char in name:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # a byte surrogateescape could not decode
            pending.append(code - 0xDC00)
        elif 0xD800 <= code <= 0xDFFF:  # a lone surrogate from a client: shown, not a byte
            text.append(_escape_bytes(pending))
            pending.clear()
            text.append(f"\\u{code:04x}")
        else:
            pending += char.encode("utf-8")
    text.append(_escape_bytes(pending))
    return '"' + "".join(text) + '"'


def _escape_bytes(raw: bytes | bytearray) -> str:
    text = []
    index = 0
    while index < len(raw):
        try:
            char, size = _utf8_char(raw, index)
        except UnicodeDecodeError:
            text.append(f"\\x{raw[index]:02x}")
            index += 1
            continue
        text.append({"\\": "\\\\", '"': '\\"'}.get(char, char))
        index += size
    return "".join(text)


def _utf8_char(raw: bytes | bytearray, index: int) -> tuple[str, int]:
    lead = raw[index]
    size = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4
    return bytes(raw[index : index + size]).decode("utf-8"), size


def escape_text(text: str) -> str:
    """`text` with every '/'-separated part that holds a surrogate in the escaped form.

    >>> escape_text("/w/caf\\udce9.txt"), escape_text("plain/a.txt")
    ('/w/"caf\\\\xe9.txt"', 'plain/a.txt')
    """
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return "/".join(
        _escape_name(part) if _SURROGATE.search(part) else part for part in text.split("/")
    )


def without_surrogates(value: Any) -> Any:
    """`value` (builtins: dict, list, str, ...) with every string's surrogates escaped."""
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, dict):
        return {without_surrogates(k): without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_surrogates(item) for item in value]
    return value


def reply_json(value: object) -> str:
    """A result or envelope (or any value msgspec encodes) as the JSON text a tool server returns.

    Names that are not UTF-8 are written in the escaped form; the common case
    (nothing to escape) costs one encode.
    """
    try:
        return msgspec.json.encode(value).decode()
    except UnicodeEncodeError:
        return msgspec.json.encode(without_surrogates(msgspec.to_builtins(value))).decode()


def unescape_path(text: str) -> str:
    """A path argument with components in the escaped form turned back into their bytes.

    >>> unescape_path('/w/"caf\\\\xe9.txt"') == "/w/caf\\udce9.txt"
    True
    >>> unescape_path('"quoted".txt'), unescape_path('"\\\\x41"')
    ('"quoted".txt', '"\\\\x41"')
    """
    if '"' not in text:
        return text
    return "/".join(_unescape_name(part) for part in text.split("/"))


def _unescape_name(part: str) -> str:
    match = _ESCAPED.fullmatch(part)
    if match is None or "\\x" not in part:
        return part
    raw = bytearray()
    last = 0
    body = match.group(1)
    for escape in _ESCAPE.finditer(body):
        raw += body[last : escape.start()].encode("utf-8")
        hexa, literal = escape.groups()
        raw += bytes([int(hexa, 16)]) if hexa else literal.encode()
        last = escape.end()
    raw += body[last:].encode("utf-8")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return bytes(raw).decode("utf-8", "surrogateescape")
    return part  # valid UTF-8: a real name that only looks escaped
