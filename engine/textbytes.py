"""Which bytes the engine treats as text: UTF-8 without NUL bytes.

Free of the engine's other modules, as the search worker (`searchworker`)
applies it in a process of its own.
"""

from __future__ import annotations

__all__ = ["is_text"]


def is_text(data: bytes) -> bool:
    """Whether bytes are UTF-8 text without NUL bytes.

    >>> is_text(b"hello\\n"), is_text(b"\\x00\\x01"), is_text(b"\\xff")
    (True, False, False)
    """
    if b"\x00" in data:
        return False
    if data.isascii():  # word-at-a-time; decoding would walk it byte by byte
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
