"""Reading a large file: the engine's one worker-thread hop against aiofiles, in one run.

    python -m benchmarks.bench_aiofiles [--sizes 8,16] [--rounds 7] [--json FILE] [--dir DIR]

What `read_file` and `read_media_file` do with a file's bytes is one blocking
step in one worker thread: open it through the no-follow opener, read it whole,
hash it (``reads.read_content``). The variants read the same file, opened the
same way, and hash it the same way:

- ``thread``: today's step, ``anyio.to_thread.run_sync(read_content, ...)``;
- ``thread_chunked``: one hop too, but 1 MiB reads, each hashed as it arrives
  (the streaming read's access pattern without aiofiles);
- ``aiofiles_stream``: ``aiofiles`` over the same descriptor, 1 MiB chunks, each
  chunk hashed on the loop as it arrives (a streamed read);
- ``aiofiles_whole``: ``aiofiles`` reading the whole file in one call, hashed in
  a worker thread;
- ``engine_read_file`` / ``engine_read_media``: the whole tool call through an
  open engine's session, for scale (text decoding and the result struct
  included; a media file is base64-encoded).

Per read: wall time, the event loop thread's CPU (`time.thread_time`), and the
longest gap a 1 ms ticker task on the same loop saw (how long the loop could
not run anything else). Variants alternate inside each round; figures are
medians of per-round ratios against ``thread`` (above 1: slower than today).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiofiles  # type: ignore[import-untyped]
import anyio
import blake3

from ledgerfs.engine import Engine
from ledgerfs.engine.nofollow import open_beneath
from ledgerfs.engine.paths import Resolved
from ledgerfs.engine.reads import read_content

from ._stats import figure_fields, summary, write_json
from .bench_engine import bench_folder, content, machine_info

MiB = 1024 * 1024
CHUNK = 1 * MiB
SIZES = (8, 16)
#: read_media_file's ceiling (engine/reads.py MAX_MEDIA_BYTES is 10 MiB).
MEDIA_MAX = 10 * MiB


def _hash(data: bytes | bytearray) -> str:
    return "blake3:" + blake3.blake3(data).hexdigest()


async def thread(path: str) -> tuple[int, str]:
    """Today's step: read and hash in one worker-thread hop."""
    target = Resolved(path=path, root=os.path.dirname(path), exists=True, is_dir=False)
    data, digest = await anyio.to_thread.run_sync(read_content, target, 1 << 40)
    return len(data), digest


def _chunked(path: str) -> tuple[bytes, str]:
    fd = open_beneath(path, os.O_RDONLY | os.O_CLOEXEC)
    hasher = blake3.blake3()
    chunks = []
    try:
        while chunk := os.read(fd, CHUNK):
            hasher.update(chunk)
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks), "blake3:" + hasher.hexdigest()


async def thread_chunked(path: str) -> tuple[int, str]:
    """One worker-thread hop; 1 MiB reads hashed as they come, kept, joined."""
    data, digest = await anyio.to_thread.run_sync(_chunked, path)
    return len(data), digest


async def aiofiles_stream(path: str) -> tuple[int, str]:
    """aiofiles over the no-follow descriptor, 1 MiB at a time, hashed as it comes.

    The chunks are kept and joined: a read returns the file's bytes.
    """
    fd = open_beneath(path, os.O_RDONLY | os.O_CLOEXEC)
    hasher = blake3.blake3()
    chunks = []
    async with aiofiles.open(fd, "rb") as f:
        while chunk := await f.read(CHUNK):
            hasher.update(chunk)
            chunks.append(chunk)
    return len(b"".join(chunks)), "blake3:" + hasher.hexdigest()


async def aiofiles_whole(path: str) -> tuple[int, str]:
    """aiofiles reading the whole file in one call; hashed in a worker thread."""
    fd = open_beneath(path, os.O_RDONLY | os.O_CLOEXEC)
    async with aiofiles.open(fd, "rb") as f:
        data = await f.read()
    return len(data), await anyio.to_thread.run_sync(_hash, data)


VARIANTS: dict[str, Callable[[str], Awaitable[tuple[int, str]]]] = {
    "thread": thread,
    "thread_chunked": thread_chunked,
    "aiofiles_stream": aiofiles_stream,
    "aiofiles_whole": aiofiles_whole,
}


async def timed(read: Callable[[], Awaitable[Any]], reads: int) -> dict[str, float]:
    """Wall and loop CPU per read, and the longest gap a 1 ms ticker saw, in ms."""
    gaps: list[float] = []
    done = anyio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await anyio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        await anyio.sleep(0.005)
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in range(reads):
            await read()
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        done.set()
    return {
        "wall_ms": wall / reads * 1e3,
        "loop_cpu_ms": cpu / reads * 1e3,
        "max_gap_ms": max(gaps, default=0.0) * 1e3,
    }


async def measure_round(
    folder: Path, size: int, reads: int, turn: int = 0
) -> dict[str, dict[str, float]]:
    """Every variant on a file of `size` bytes, one after the other, the first
    one rotating with `turn`; each read once untimed first. Results by name."""
    text = folder / f"big-{size}.txt"
    media = folder / f"big-{size}.png"
    text.write_bytes(content(size))
    media.write_bytes(content(min(size, MEDIA_MAX)))
    expected = (size, _hash(text.read_bytes()))
    out: dict[str, dict[str, float]] = {}
    names = list(VARIANTS)
    shift = turn % len(names)
    for name in names[shift:] + names[:shift]:
        variant = VARIANTS[name]

        async def once(variant: Callable[[str], Awaitable[tuple[int, str]]] = variant) -> None:
            if await variant(str(text)) != expected:
                raise RuntimeError("a variant read something else")

        await once()
        out[name] = await timed(once, reads)
    config = {"roots": [str(folder)], "journal": str(folder / "journal.db")}
    async with Engine.open(config) as engine:
        session = await engine.session()

        async def read_file() -> None:
            await session.call("read_file", {"path": text.name})

        async def read_media() -> None:
            await session.call("read_media_file", {"path": media.name})

        out["engine_read_file"] = await timed(read_file, reads)
        out["engine_read_media"] = await timed(read_media, reads)
    return out


_ORDER = [*VARIANTS, "engine_read_file", "engine_read_media"]


def run(folder: Path, sizes: tuple[int, ...], rounds: int, reads: int) -> dict[str, Any]:
    """`rounds` rounds of every size and variant; figures and raw per-read numbers."""
    cells: dict[str, dict[str, list[float]]] = {}
    for r in range(rounds):
        for mib in sizes:
            work = folder / f"aiofiles-r{r}-{mib}m"
            work.mkdir(parents=True, exist_ok=True)
            try:
                result = anyio.run(measure_round, work, mib * MiB, reads, r)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            for name, values in sorted(result.items(), key=lambda item: _ORDER.index(item[0])):
                for key, value in values.items():
                    cells.setdefault(f"{name}_{mib}m", {}).setdefault(key, []).append(value)
            print(
                f"round {r + 1}/{rounds} {mib:>3} MiB: "
                + "  ".join(f"{n} {v['wall_ms']:.1f} ms" for n, v in result.items()),
                flush=True,
            )
    figures: dict[str, dict[str, Any]] = {}
    for mib in sizes:
        base = cells[f"thread_{mib}m"]
        for name in ("thread_chunked", "aiofiles_stream", "aiofiles_whole"):
            cell = cells[f"{name}_{mib}m"]
            for key, label in (("wall_ms", "time"), ("loop_cpu_ms", "loop_cpu")):
                figures[f"{name}_{mib}m_{label}_vs_thread"] = summary(
                    [a / b for a, b in zip(cell[key], base[key], strict=True)]
                )
    raw = {name: {k: summary(v) for k, v in cell.items()} for name, cell in cells.items()}
    return {**figure_fields(figures), "raw": {"reads": raw, "ratios": figures}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse arguments, run, print the figures and optionally write JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="8,16", help="file sizes in MiB, comma-separated")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (variants alternate)")
    parser.add_argument("--reads", type=int, default=3, help="reads per variant per round")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    args = parser.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    folder = bench_folder(args.dir)
    result = run(folder, sizes, args.rounds, args.reads)
    print()
    for name, cell in result["raw"]["reads"].items():
        print(
            f"{name:>26}: {cell['wall_ms']['median']:8.2f} ms"
            f"  loop cpu {cell['loop_cpu_ms']['median']:7.2f} ms"
            f"  longest loop gap {cell['max_gap_ms']['median']:7.2f} ms"
        )
    for name, value in result["figures"].items():
        spread = result["spread"][name]
        print(f"{name}: {value:.2f}x ({spread['min']:.2f} - {spread['max']:.2f})")
    result["machine"] = machine_info(
        folder, {"rounds": args.rounds, "reads": args.reads, "sizes_mib": list(sizes)}
    )
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
