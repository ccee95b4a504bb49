"""Git's binary patches: `GIT binary patch` hunks, decoded and applied, pure.

`git diff --binary` describes a changed binary file as a forward hunk (and a
reverse one, which is not needed to apply) after a full `index` line. A hunk is
`literal N` (the new file, N bytes) or `delta N` (git's copy/insert delta against
the old file, N bytes of delta), zlib-deflated and base85-encoded in lines whose
first character gives the line's decoded length. Nothing here touches the disk.

Memory is bounded by what a file may hold (`limit`, the engine's max_file_size):
a stated size over it is refused before anything is inflated, inflating stops one
byte past the stated size, and a delta stops the moment its output would pass the
size it states, which was checked against `limit` first.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from typing import Literal

from msgspec import Struct

__all__ = [
    "MAX_DELTA_COMMANDS",
    "BinaryError",
    "BinaryHunk",
    "Room",
    "TooLarge",
    "apply_binary",
    "blob_id",
    "decode_line",
    "deflate_bound",
    "delta_limit",
    "delta_sizes",
]


class BinaryError(ValueError):
    """A binary hunk that cannot be decoded or applied; the message says why."""


class TooLarge(BinaryError):
    """A stated size over what a file may hold: refused before any byte is built."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} states {size} bytes, over the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class Room:
    """What the binary hunks of one call may still inflate to, all its patches together.

    One hunk is bounded by what a file may hold; without a total, a batch of many
    small hunks could each inflate to that much.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def take(self, size: int) -> None:
        """Count `size` more bytes, or raise TooLarge (before they are inflated)."""
        if size > self.left:
            used = self.limit - self.left
            raise TooLarge("the call's binary hunks together", used + size, self.limit)
        self.left -= size


#: The most instructions one delta may hold. Each costs a step in Python (about a
#: microsecond), and one-byte inserts would let a 50 MiB delta take a minute; git's
#: deltas copy and insert runs (a file rewritten whole needs one insert per 127
#: bytes: 400,000 for 50 MiB).
MAX_DELTA_COMMANDS = 1_000_000


def delta_limit(limit: int) -> int:
    """The most bytes a delta for a file of at most `limit` bytes may have.

    Its header holds two sizes (at most 10 bytes each); an insert carries up to
    127 bytes after one command byte, and the copies git writes take fewer bytes
    than they build, so a delta git makes is at most this much bigger than its
    target.

    >>> delta_limit(127)
    148
    """
    return limit + limit // 127 + 20


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


def deflate_bound(size: int) -> int:
    """The most bytes zlib's deflate makes of `size` bytes, at any level (its
    `deflateBound`, with room for the stream's header and checksum).

    A hunk whose data is longer is no output of git's: its lines are refused as
    they are decoded, before a bomb's megabytes of them are.

    >>> deflate_bound(0), deflate_bound(1 << 20)
    (64, 1048960)
    """
    return size + (size >> 12) + (size >> 14) + (size >> 25) + 64


def inflate(kind: Literal["literal", "delta"], size: int, encoded: bytes, limit: int) -> BinaryHunk:
    """Inflate a hunk's deflated bytes and check its stated size.

    Raises TooLarge when the stated size is over `limit` (for a delta, over
    `delta_limit(limit)`), before anything is inflated, or a delta states a result
    over `limit`; BinaryError when the data does not inflate or inflates to another
    size than stated. The output is capped one byte past the stated size, so a
    lying stream costs no more memory than an honest one.

    >>> inflate("literal", 2, zlib.compress(b"hi"), 10).data
    b'hi'
    """
    cap = limit if kind == "literal" else delta_limit(limit)
    if size > cap:
        raise TooLarge(f"the {kind} hunk", size, cap)
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(encoded, size + 1)
    except zlib.error as exc:
        raise BinaryError(f"the hunk's data does not inflate: {exc}") from None
    if len(data) > size or inflater.unconsumed_tail:
        raise BinaryError(f"the hunk inflates to more than the {size} bytes it states")
    if not inflater.eof:
        raise BinaryError("the hunk's data does not inflate: the stream is cut short")
    if len(data) != size:
        raise BinaryError(f"the hunk inflates to {len(data)} bytes, not the {size} it states")
    if kind == "delta":
        _, target_size = delta_sizes(data)
        if target_size > limit:
            raise TooLarge("the delta", target_size, limit)
    return BinaryHunk(kind=kind, size=size, data=data)


def delta_sizes(delta: bytes) -> tuple[int, int]:
    """The source and target sizes a delta's header states.

    >>> delta_sizes(bytes([5, 7]))
    (5, 7)
    """
    source, position = _varint(delta, 0)
    target, _ = _varint(delta, position)
    return source, target


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


def apply_delta(source: bytes, delta: bytes, limit: int) -> bytes:
    """Apply git's delta (copy ranges of `source`, insert literal bytes) to `source`.

    Raises TooLarge when the delta states a result over `limit` bytes (checked
    before anything is built), and BinaryError when it is for a source of another
    size, copies past its end, is cut short, or builds a result of another size
    than it states: it stops as soon as its output would pass that size, or
    once it has run MAX_DELTA_COMMANDS instructions.

    >>> apply_delta(b"hello", bytes([5, 7, 0x91, 0, 5, 2]) + b", ", 100)
    b'hello, '
    """
    expected_source, position = _varint(delta, 0)
    if expected_source != len(source):
        raise BinaryError(f"the delta is for {expected_source} bytes, the file has {len(source)}")
    target_size, position = _varint(delta, position)
    if target_size > limit:  # checked when parsed too: this one guards other callers
        raise TooLarge("the delta", target_size, limit)
    out = bytearray()
    commands = 0
    while position < len(delta):
        command = delta[position]
        position += 1
        commands += 1
        if commands > MAX_DELTA_COMMANDS:
            raise BinaryError(f"the delta holds more than {MAX_DELTA_COMMANDS} instructions")
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
            _check_room(out, size, target_size)
            out += source[offset : offset + size]
        elif command:
            if position + command > len(delta):
                raise BinaryError("the delta ends inside inserted data")
            _check_room(out, command, target_size)
            out += delta[position : position + command]
            position += command
        else:
            raise BinaryError("the delta holds a reserved command (0)")
    if len(out) != target_size:
        raise BinaryError(f"the delta builds {len(out)} bytes, not the {target_size} it states")
    return bytes(out)


def _check_room(out: bytearray, adding: int, target_size: int) -> None:
    """Stop a delta before its output passes the size it states."""
    if len(out) + adding > target_size:
        raise BinaryError(f"the delta builds more than the {target_size} bytes it states")


def apply_binary(hunk: BinaryHunk, original: bytes, limit: int) -> bytes:
    """The new bytes of a file from its forward binary hunk, at most `limit` of them.

    >>> apply_binary(BinaryHunk(kind="literal", size=2, data=b"hi"), b"old", 10)
    b'hi'
    """
    if hunk.kind == "literal":
        return hunk.data
    return apply_delta(original, hunk.data, limit)
