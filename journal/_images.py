"""How an image's bytes are stored: whole, zstd-compressed, or as shared chunks.

An image up to `CHUNKED_FROM` bytes is one blob. A bigger one is cut into
content-defined chunks (FastCDC: a gear hash picks cut points from the bytes
themselves, so an edit moves only the cuts near it) and stored as the list of
its chunks; each chunk is a blob of its own, named by its blake3 hash like any
image, so the chunks an edit left alone are the previous image's and cost
nothing. A blob's bytes are stored zstd-compressed when that makes them
smaller. docs/journal.md has the measurements behind the sizes and the level.

The cutting and hashing run on the caller's thread (`image`); compression runs
where a blob is found new (`pack`), so an image already stored costs a lookup.
"""

from __future__ import annotations

import itertools
import threading
from enum import IntEnum

import blake3
import msgspec
import zstandard
from pyfastcdc import FastCDC

__all__ = [
    "BROKEN",
    "CHUNKED_FROM",
    "Form",
    "Image",
    "decode_chunk_ids",
    "encode_chunk_ids",
    "image",
    "pack",
    "split",
    "unpack",
]

# FastCDC's sizes: cuts fall after MIN_CHUNK bytes, about AVG_CHUNK later on average,
# and at MAX_CHUNK at the latest. A one-line edit of a 50 MiB text rewrites one or
# two chunks (about 21 KiB each, 7 KiB compressed) and the image's chunk list.
MIN_CHUNK = 4096
AVG_CHUNK = 16384
MAX_CHUNK = 65536
# Images above this are chunked. It is at least MAX_CHUNK, so a chunked image is
# longer than any chunk and no chunk's hash can name a chunked image.
CHUNKED_FROM = 65536
# Blobs shorter than this are stored as they are (a zstd frame costs ~10 bytes).
COMPRESS_FROM = 64
# zstd's level 3 (its default): level 1 compresses text 4 % worse, level 6 is 3x slower.
LEVEL = 3


class Form(IntEnum):
    """How a row of ``blobs`` holds its image's bytes (its ``form`` column)."""

    #: ``data`` is the bytes (every blob written before schema version 8).
    RAW = 0
    #: ``data`` is one zstd frame of the bytes.
    ZSTD = 1
    #: ``data`` is empty; the bytes are the chunks ``blob_chunks`` lists, in order.
    CHUNKED = 2


class Image(msgspec.Struct, frozen=True):
    """An image ready to store: whole (`data`), or cut into `chunks` ((key, bytes) in order)."""

    key: bytes
    size: int
    data: bytes | None = None
    chunks: list[tuple[bytes, memoryview]] | None = None


#: What decoding a damaged blob or chunk list raises.
BROKEN = (zstandard.ZstdError, msgspec.DecodeError, ValueError)

_local = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    """This thread's compressor (a context is not shared between threads, and
    making one per blob costs more than compressing a small blob)."""
    made: zstandard.ZstdCompressor | None = getattr(_local, "compressor", None)
    if made is None:
        made = _local.compressor = zstandard.ZstdCompressor(level=LEVEL, write_checksum=False)
    return made


def _decompressor() -> zstandard.ZstdDecompressor:
    made: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if made is None:
        made = _local.decompressor = zstandard.ZstdDecompressor()
    return made


def split(data: bytes) -> list[memoryview]:
    """`data` cut at content-defined points (views into it, in order).

    >>> pieces = split(bytes(range(256)) * 1024)
    >>> b"".join(pieces) == bytes(range(256)) * 1024 and len(pieces) > 1
    True
    """
    chunker = FastCDC(AVG_CHUNK, min_size=MIN_CHUNK, max_size=MAX_CHUNK)
    return [chunk.data for chunk in chunker.cut_buf(data)]


def image(key: bytes, data: bytes) -> Image:
    """`data` (whose hash is `key`) as it will be stored: chunked if above `CHUNKED_FROM`.

    An image that makes a single chunk stays whole (its chunk would be itself).
    """
    if len(data) <= CHUNKED_FROM:
        return Image(key=key, size=len(data), data=data)
    pieces = split(data)
    if len(pieces) == 1:
        return Image(key=key, size=len(data), data=data)
    chunks = [(blake3.blake3(piece).digest(), piece) for piece in pieces]
    return Image(key=key, size=len(data), chunks=chunks)


def pack(data: bytes | memoryview) -> tuple[Form, bytes]:
    """The form and stored bytes of a whole blob: compressed where that is smaller.

    >>> pack(b"abc")
    (<Form.RAW: 0>, b'abc')
    >>> form, stored = pack(b"line\\n" * 100)
    >>> form, unpack(form, stored) == b"line\\n" * 100
    (<Form.ZSTD: 1>, True)
    """
    if len(data) >= COMPRESS_FROM:
        packed = _compressor().compress(data)
        if len(packed) < len(data):
            return Form.ZSTD, packed
    return Form.RAW, bytes(data)


def unpack(form: int, stored: bytes) -> bytes:
    """The bytes of a whole blob (RAW or ZSTD); zstandard.ZstdError if a frame is broken."""
    if form == Form.ZSTD:
        return _decompressor().decompress(stored)
    if form != Form.RAW:
        raise ValueError(f"a blob of form {form} is not whole")
    return stored


_encoder = msgspec.msgpack.Encoder()
_ids = msgspec.msgpack.Decoder(list[int])


def encode_chunk_ids(ids: list[int]) -> bytes:
    """A chunked image's chunk ids as stored: msgpack of their differences, compressed.

    A first store gives an image consecutive ids, and an edit replaces a few of
    them, so the differences are mostly 1 (one byte each) and compress to little.

    >>> decode_chunk_ids(encode_chunk_ids([7, 8, 9, 120, 10])) == [7, 8, 9, 120, 10]
    True
    """
    deltas = [b - a for a, b in itertools.pairwise([0, *ids])]
    return _compressor().compress(_encoder.encode(deltas))


def decode_chunk_ids(stored: bytes) -> list[int]:
    """The chunk ids `encode_chunk_ids` stored (ValueError or ZstdError if broken)."""
    ids: list[int] = []
    total = 0
    for delta in _ids.decode(_decompressor().decompress(stored)):
        total += delta
        ids.append(total)
    return ids
