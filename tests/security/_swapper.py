"""A swapper process: exchanges two names atomically, as fast as it can, until stdin closes.

`python -m tests.security._swapper A B` swaps A and B with renameat2(RENAME_EXCHANGE)
in a tight loop (one is a real folder, the other a symlink to a folder outside the
root), prints "ready" once, and at the end prints how many swaps it made, leaving
A as it found it. A separate process, so it races the server on the other core.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import sys

RENAME_EXCHANGE = 2
AT_FDCWD = -100


def main() -> None:
    first, second = (os.fsencode(arg) for arg in sys.argv[1:3])
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    renameat2 = libc.renameat2
    renameat2.argtypes = (
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    )
    swaps = 0
    print("ready", flush=True)
    while True:
        for _ in range(200):
            if renameat2(AT_FDCWD, first, AT_FDCWD, second, RENAME_EXCHANGE) != 0:
                raise OSError(ctypes.get_errno(), "renameat2")
            swaps += 1
        if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.read(1):
            break
    if swaps % 2:
        renameat2(AT_FDCWD, first, AT_FDCWD, second, RENAME_EXCHANGE)
    print(swaps, flush=True)


if __name__ == "__main__":
    main()
