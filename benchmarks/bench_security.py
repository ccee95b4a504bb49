"""What the security checks cost on the hot path, in per-thread CPU time.

Measured with `time.thread_time` (the calling thread's CPU, so other load on
the machine does not count), each as a ratio to its baseline in the same run:

- the no-follow open (`nofollow.open_beneath`: openat2 with RESOLVE_NO_SYMLINKS,
  or the per-component O_NOFOLLOW walk where openat2 is missing) against a plain
  `os.open` of the same path, eight folders deep; and the walk against openat2;
- the content check (`credentials.secret_content`) on 4 KiB and 1 MiB of source text,
  against hashing the same bytes with blake3 (which every read already does);
- the name rules (`policy.secret_reason`) on a three-part path.

    python -m benchmarks.bench_security [--calls N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from blake3 import blake3

from ledgerfs.engine import nofollow
from ledgerfs.engine.credentials import secret_content
from ledgerfs.engine.policy import secret_reason


def per_call(fn: Callable[[], object], calls: int) -> float:
    """Microseconds of this thread's CPU per call of `fn`."""
    fn()
    start = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - start) / calls * 1e6


def opener(open_fn: Callable[[str, int], int], path: str) -> Callable[[], None]:
    def run() -> None:
        os.close(open_fn(path, os.O_RDONLY | os.O_CLOEXEC))

    return run


def source_text(size: int) -> bytes:
    here = Path(nofollow.__file__).parent
    text = b"".join(p.read_bytes() for p in sorted(here.glob("*.py")))
    return (text * (size // len(text) + 1))[:size]


def run(calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(os.path.realpath(tmp)).joinpath(*"abcdefgh")
        folder.mkdir(parents=True)
        target = folder / "f.txt"
        target.write_bytes(b"x" * 4096)
        path = str(target)
        plain = per_call(opener(os.open, path), calls)
        beneath = per_call(opener(nofollow.open_beneath, path), calls)
        walk = per_call(opener(nofollow._walk, path), calls)
    small, large = source_text(4096), source_text(1 << 20)
    hash_small = per_call(lambda: blake3(small).digest(), calls)
    check_small = per_call(lambda: secret_content(small), calls)
    hash_large = per_call(lambda: blake3(large).digest(), max(calls // 100, 10))
    check_large = per_call(lambda: secret_content(large), max(calls // 100, 10))
    names = per_call(lambda: secret_reason(["src", "engine", "core.py"]), calls)
    return {
        "open_plain_us": plain,
        "open_beneath_us": beneath,
        "open_beneath_vs_plain": beneath / plain,
        "open_walk_us": walk,
        "open_walk_vs_openat2": walk / beneath,
        "openat2_available": float(nofollow.OPENAT2),
        "content_check_4k_us": check_small,
        "content_check_4k_vs_blake3": check_small / hash_small,
        "content_check_1m_us": check_large,
        "content_check_1m_vs_blake3": check_large / hash_large,
        "name_rules_us": names,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    figures = run(args.calls)
    for name, value in figures.items():
        print(f"{name:32} {value:10.3f}")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
