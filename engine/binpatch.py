"""Git's binary patches: `GIT binary patch` hunks, decoded and applied, pure.

`git diff --binary` describes a changed binary file as a forward hunk (and a
reverse one, which is not needed to apply) after a full `index` line. A hunk is
`literal N` (the new file, N bytes) or `delta N` (git's copy/insert delta against
the old file, N bytes of delta), zlib-deflated and base85-encoded in lines whose
first character gives the line's decoded length. Nothing here touches the disk.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from typing import Literal

from msgspec import Struct

__all__ = ["BinaryError", "BinaryHunk", "apply_binary", "blob_id", "decode_line"]


class BinaryError(ValueError):
    """A binary hunk that cannot be decoded or applied; the message says why."""


class BinaryHunk(Struct, frozen=True, kw_only=True):
    """One decoded `literal` or `delta` hunk: `data` is inflated, `size` as stated."""

    kind: Literal["literal", "delta"]
    size: int
    data: bytes


def blob_id(data: bytes) -> str:
    """The object id git gives `data` as a blob (what `index` lines name).

    >>> blob_id(b"")
    'e69de29bb2d1d6434b8b29ae775ad8c2e48c5391'
    """
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _line_length(char: str) -> int:
    """Decoded bytes on a line: `A`-`Z` are 1-26, `a`-`z` are 27-52."""
    if "A" <= char <= "Z":
        return ord(char) - ord("A") + 1
    if "a" <= char <= "z":
        return ord(char) - ord("a") + 27
    raise BinaryError(f"bad length character {char!r}")


def decode_line(line: str) -> bytes:
    """One base85 line of a binary hunk, its length prefix honoured.

    Raises BinaryError for a bad prefix, a bad character or a short line.

    >>> decode_line("BXlVcd")
    b'hi'
    """
    if not line:
        raise BinaryError("empty line inside a binary hunk")
    length = _line_length(line[0])
    body = line[1:]
    if len(body) != (length + 3) // 4 * 5:
        raise BinaryError(f"a line of {len(body)} characters cannot hold {length} bytes")
    try:
        return base64.b85decode(body)[:length]
    except ValueError as exc:
        raise BinaryError(f"bad base85 data: {exc}") from None


def inflate(kind: Literal["literal", "delta"], size: int, encoded: bytes) -> BinaryHunk:
    """Inflate a hunk's deflated bytes and check its stated size.

    >>> inflate("literal", 2, zlib.compress(b"hi")).data
    b'hi'
    """
    try:
        data = zlib.decompress(encoded)
    except zlib.error as exc:
        raise BinaryError(f"the hunk's data does not inflate: {exc}") from None
    if len(data) != size:
        raise BinaryError(f"the hunk inflates to {len(data)} bytes, not the {size} it states")
    return BinaryHunk(kind=kind, size=size, data=data)


def _varint(delta: bytes, position: int) -> tuple[int, int]:
    """A size of a delta header: 7 bits a byte, least significant first."""
    value = shift = 0
    while True:
        if position >= len(delta):
            raise BinaryError("the delta ends inside its header")
        byte = delta[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def apply_delta(source: bytes, delta: bytes) -> bytes:
    """Apply git's delta (copy ranges of `source`, insert literal bytes) to `source`.

    Raises BinaryError when the delta is for a source of another size, copies
    past its end, is cut short, or builds a result of another size than it states.

    >>> apply_delta(b"hello", bytes([5, 7, 0x91, 0, 5, 2]) + b", ")
    b'hello, '
    """
    expected_source, position = _varint(delta, 0)
    if expected_source != len(source):
        raise BinaryError(f"the delta is for {expected_source} bytes, the file has {len(source)}")
    target_size, position = _varint(delta, position)
    out = bytearray()
    while position < len(delta):
        command = delta[position]
        position += 1
        if command & 0x80:
            # Which offset and size bytes follow is in the command's low 7 bits.
            needed = bin(command & 0x7F).count("1")
            if position + needed > len(delta):
                raise BinaryError("the delta ends inside a copy instruction")
            offset, size = 0, 0
            for bit, shift in ((0x01, 0), (0x02, 8), (0x04, 16), (0x08, 24)):
                if command & bit:
                    offset |= delta[position] << shift
                    position += 1
            for bit, shift in ((0x10, 0), (0x20, 8), (0x40, 16)):
                if command & bit:
                    size |= delta[position] << shift
                    position += 1
            size = size or 0x10000
            if offset + size > len(source):
                raise BinaryError("the delta copies past the end of the file")
            out += source[offset : offset + size]
        elif command:
            if position + command > len(delta):
                raise BinaryError("the delta ends inside inserted data")
            out += delta[position : position + command]
            position += command
        else:
            raise BinaryError("the delta holds a reserved command (0)")
    if len(out) != target_size:
        raise BinaryError(f"the delta builds {len(out)} bytes, not the {target_size} it states")
    return bytes(out)


def apply_binary(hunk: BinaryHunk, original: bytes) -> bytes:
    """The new bytes of a file from its forward binary hunk.

    >>> apply_binary(BinaryHunk(kind="literal", size=2, data=b"hi"), b"old")
    b'hi'
    """
    if hunk.kind == "literal":
        return hunk.data
    return apply_delta(original, hunk.data)
