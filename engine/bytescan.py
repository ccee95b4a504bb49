"""Searches of long bytes that leave other threads room to run.

A C call such as `bytes.find` holds the GIL for its whole length: on a 50 MiB
file that is tens of milliseconds in which no other thread runs, the event
loop's included. A long search here is made in windows, and the GIL can pass to
another thread between two of them.
"""

from __future__ import annotations

__all__ = ["SEARCH_WINDOW", "find"]

#: The most bytes one C search call scans.
SEARCH_WINDOW = 1 << 20


def find(data: bytes, needle: bytes, start: int = 0) -> int:
    """`data.find(needle, start)`, in windows of SEARCH_WINDOW bytes.

    >>> find(b"abcabc", b"ca"), find(b"abcabc", b"ca", 3), find(b"abc", b"x")
    (2, -1, -1)
    """
    window = max(SEARCH_WINDOW, 4 * len(needle))
    end = len(data)
    while start < end:
        # A match that starts inside the window ends before `stop`.
        stop = min(end, start + window + len(needle) - 1)
        found = data.find(needle, start, stop)
        if found >= 0:
            return found
        start += window
    return -1
