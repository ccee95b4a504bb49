"""How a transaction's mutations, hashes and paths are stored (schema version 3; paths
inside roots as keys relative to them since version 9, see `_places`).

A transaction row carries its mutations as one msgpack array (`Stored`, array-like,
so a record costs a few dozen bytes); hashes are stored as the 32 bytes of the
blake3 digest and spoken as ``"blake3:<hex>"`` everywhere else. Stored records
follow msgspec's schema-evolution rules: new fields go last with a default.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable

import msgspec

__all__ = [
    "ENCODED",
    "Stored",
    "decode_mutations",
    "decode_ordinals",
    "encode_mutations",
    "encode_ordinals",
    "hash_key",
    "hash_text",
    "loaded_path",
    "named_paths",
    "stored_path",
]

_PREFIX = "blake3:"
_HASH = re.compile(r"blake3:[0-9a-f]{64}")


class Stored(msgspec.Struct, array_like=True, frozen=True, kw_only=True):
    """One mutation inside a transaction row: paths as stored, hashes as digest bytes."""

    ordinal: int
    op: str
    path: str
    destination: str | None
    before: bytes | None
    after: bytes | None
    before_mode: int | None
    after_mode: int | None
    kind: str = "file"
    #: False when the before image was not kept (a file over the engine's size
    #: cap, deleted): `before` is its hash, and no blob holds its bytes.
    before_kept: bool = True


_encoder = msgspec.msgpack.Encoder()
_mutations = msgspec.msgpack.Decoder(list[Stored])
_ordinals = msgspec.msgpack.Decoder(list[int])


def encode_mutations(mutations: list[Stored]) -> bytes:
    """The msgpack form of a transaction's mutations."""
    return _encoder.encode(mutations)


def decode_mutations(data: bytes) -> list[Stored]:
    """A transaction's mutations from their msgpack form."""
    return _mutations.decode(data)


def encode_ordinals(ordinals: Iterable[int]) -> bytes:
    """The applied ordinals of a transaction, sorted, as msgpack."""
    return _encoder.encode(sorted(set(ordinals)))


def decode_ordinals(data: bytes) -> list[int]:
    return _ordinals.decode(data)


def hash_key(digest: str | None) -> bytes | None:
    """The 32 stored bytes of a ``"blake3:<hex>"`` hash (ValueError if it is not one).

    >>> hash_key("blake3:" + "ab" * 32) == bytes([0xAB]) * 32
    True
    """
    if digest is None:
        return None
    if _HASH.fullmatch(digest) is None:
        raise ValueError(f"{digest!r} is not a content hash")
    return bytes.fromhex(digest[7:])


def hash_text(key: bytes | None) -> str | None:
    """The ``"blake3:<hex>"`` form of stored hash bytes.

    >>> hash_text(bytes(32)) == "blake3:" + "0" * 64
    True
    """
    return None if key is None else _PREFIX + key.hex()


def named_paths(mutations: Iterable[Stored]) -> list[str]:
    """Every stored path and move destination the mutations name, once each."""
    named: dict[str, None] = {}
    for m in mutations:
        named[m.path] = None
        if m.destination is not None:
            named[m.destination] = None
    return list(named)


#: A path that is not UTF-8 (a lone surrogate from surrogateescape, which SQLite
#: text and msgpack cannot hold) is stored as this and its bytes in base64. Paths
#: inside a root are stored as keys (`_places`), which never start with it.
ENCODED = "b64:"


def stored_path(path: str) -> str:
    """`path` as the journal stores it (lossless for names that are not UTF-8).

    >>> stored_path("/w/a.txt"), loaded_path(stored_path("/w/caf\\udce9"))
    ('/w/a.txt', '/w/caf\\udce9')
    """
    if path.isascii():
        return path
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return ENCODED + base64.b64encode(path.encode("utf-8", "surrogateescape")).decode()
    return path


def loaded_path(text: str) -> str:
    """A stored path as the engine gave it."""
    if text.startswith(ENCODED):
        return base64.b64decode(text[len(ENCODED) :]).decode("utf-8", "surrogateescape")
    return text
