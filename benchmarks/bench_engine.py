"""Engine throughput and latency against the raw file-system floor, in one run.

Measured, each in a fresh workspace on the bench folder's file system:

- durable single-file edits (``edit_file`` with ``expected_hash`` on 4 KiB text
  files, one file and one session per writer) with 1, 8 and 32 concurrent
  writers (anyio tasks), durability ``full``;
- the raw durable floor: a plain loop that writes a temp file, fsyncs it,
  renames it over the target and fsyncs the folder (same sizes), with one
  writer, and with 32 threads for reference;
- the same edits with durability ``normal`` against plain temp file + rename;
- ``read_file`` (content and hash) in MB/s against a raw read + blake3;
- one ``batch`` of 100 edits (files per second) against the floor;
- per-edit latency p50/p99, and the single writer's p99 over its own p50 (in
  a longer window of its own, at least 2 s);
- process CPU time (every thread's user + system time) per edit with 32
  writers, durability ``full``, with the bench folder on a tmpfs (``/dev/shm``):
  the same protocol with fsync and the disk taken out, so what is left is the
  engine's own CPU (skipped, and its figure missing, where no tmpfs exists);
- cost against file size (4 KiB, 64 KiB, 1 MiB, 16 MiB) against the floor at
  the same size.

Every configuration runs once per round, configurations alternating inside a
round, so drift of a noisy machine hits them alike; each figure is the median of
per-round ratios (engine / baseline of the same round), with its spread.

    python -m benchmarks.bench_engine [--quick] [--json FILE] [--dir DIR]
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import blake3

from ledgerfs.engine import Engine

from ._stats import figure_fields, machine, median, summary, write_json

KiB = 1024
MiB = 1024 * KiB
SIZES = (4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB)
WRITERS = (1, 8, 32)
FLOOR_THREADS = 32
TMPFS = Path("/dev/shm")
TAIL_WINDOW = 2.0
READ_SIZE = 1 * MiB
BATCH_FILES = 100
_COUNTER = "counter: {:012d}\n"


# -- where benchmarks run ------------------------------------------------------


def repo_root() -> Path:
    """The checkout this package lives in."""
    return Path(__file__).resolve().parent.parent


def filesystem_of(path: str | Path) -> dict[str, str]:
    """The mount point, device and type of the file system holding `path` (Linux).

    >>> filesystem_of("/")["mount"]
    '/'
    """
    real = os.path.realpath(path)
    best = {"mount": "/", "device": "?", "type": "?"}
    try:
        with open("/proc/self/mounts") as mounts:
            for line in mounts:
                device, mount, fstype = line.split()[:3]
                mount = mount.replace("\\040", " ")
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best["mount"]):
                    best = {"mount": mount, "device": device, "type": fstype}
    except OSError:
        pass
    return best


def bench_folder(requested: str | None) -> Path:
    """The folder benchmarks work in: `requested`, else `<repo>/.bench-cache/run`.

    The default sits on the repository's file system, never on a tmpfs `/tmp`,
    so fsync costs what it costs for the user's files.
    """
    folder = Path(requested) if requested else repo_root() / ".bench-cache" / "run"
    folder.mkdir(parents=True, exist_ok=True)
    private_state()
    return folder.resolve()


def private_state() -> None:
    """Keep the journals' loss marks in a state folder of this process's own.

    Workspaces get the same paths from run to run and their journals are
    deleted after each measurement; a mark left in the user's state folder
    would make the next run's journal at that path look lost, and refuse to
    open. An explicit `LEDGERFS_STATE_DIR` is left as it is; server
    subprocesses inherit the variable.
    """
    if os.environ.get("LEDGERFS_STATE_DIR"):
        return
    folder = tempfile.mkdtemp(prefix="ledgerfs-bench-state-")
    os.environ["LEDGERFS_STATE_DIR"] = folder
    atexit.register(shutil.rmtree, folder, True)


def tmpfs_folder() -> Path | None:
    """A folder for this process on a tmpfs, or None when the machine has none."""
    if not TMPFS.is_dir() or filesystem_of(TMPFS)["type"] != "tmpfs":
        return None
    folder = TMPFS / f"ledgerfs-bench-{os.getpid()}"
    folder.mkdir(exist_ok=True)
    return folder


def machine_info(folder: Path, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """`_stats.machine()` plus CPU model, date and the bench folder's file system."""
    model = "?"
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    fs = filesystem_of(folder)
    tmp_fs = filesystem_of(tempfile.gettempdir())
    return machine(
        {
            "cpu_count": os.cpu_count(),
            "cpu_model": model,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "bench_folder": str(folder),
            "filesystem": fs["type"],
            "filesystem_mount": fs["mount"],
            "tmp_filesystem": tmp_fs["type"],
            **(extra or {}),
        }
    )


# -- measurements ----------------------------------------------------------------


class Sample:
    """One configuration's run: operations, seconds, process CPU seconds, bytes,
    per-operation latencies."""

    def __init__(self) -> None:
        self.ops = 0
        self.elapsed = 0.0
        self.cpu = 0.0
        self.bytes = 0
        self.latencies: list[float] = []

    @property
    def cpu_us_per_op(self) -> float:
        return self.cpu / self.ops * 1e6 if self.ops else 0.0

    @property
    def rate(self) -> float:
        return self.ops / self.elapsed if self.elapsed else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MiB / self.elapsed if self.elapsed else 0.0


def _percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation.

    >>> _percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50)
    3.0
    """
    if not values:
        return 0.0
    if len(values) == 1:
        return float(values[0])
    return float(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1])


def content(size: int, n: int = 0) -> bytes:
    """`size` bytes of text: a counter line the edits change, then filler lines."""
    head = _COUNTER.format(n).encode()
    line = b"the quick brown fox jumps over the lazy dog 0123456789\n"
    body = line * ((size - len(head)) // len(line) + 1)
    return head + body[: size - len(head)]


def _prepare(folder: Path, count: int, size: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"f{i}.txt"
        path.write_bytes(content(size))
        paths.append(path)
    return paths


def _replace(dfd: int, name: str, data: bytes, sync: bool) -> None:
    """The floor: temp file, (fsync), rename over `name`, (fsync the folder)."""
    tmp = f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644, dir_fd=dfd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    if sync:
        os.fsync(dfd)


def raw_replace(
    folder: Path, size: int, window: float, *, sync: bool, threads: int = 1, min_ops: int = 3
) -> Sample:
    """Replace files in a plain loop for `window` seconds (one file per thread)."""
    paths = _prepare(folder, threads, size)
    data = [content(size, n) for n in range(2)]
    sample = Sample()
    lock = threading.Lock()
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:

        def loop(path: Path, deadline: float) -> None:
            lat = []
            n = 0
            while n < min_ops or time.perf_counter() < deadline:
                t0 = time.perf_counter()
                _replace(dfd, path.name, data[n % 2], sync)
                lat.append(time.perf_counter() - t0)
                n += 1
            with lock:
                sample.ops += n
                sample.latencies.extend(lat)

        start = time.perf_counter()
        if threads == 1:
            loop(paths[0], start + window)
        else:
            workers = [threading.Thread(target=loop, args=(p, start + window)) for p in paths]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        sample.elapsed = time.perf_counter() - start
    finally:
        os.close(dfd)
    sample.bytes = sample.ops * size
    return sample


def raw_read(folder: Path, size: int, window: float) -> Sample:
    """Read a file whole and blake3 it in a loop, for `window` seconds."""
    (path,) = _prepare(folder, 1, size)
    sample = Sample()
    start = time.perf_counter()
    deadline = start + window
    while sample.ops < 3 or time.perf_counter() < deadline:
        with open(path, "rb") as f:
            data = f.read()
        "blake3:" + blake3.blake3(data).hexdigest()
        sample.ops += 1
    sample.elapsed = time.perf_counter() - start
    sample.bytes = sample.ops * size
    return sample


def _config(folder: Path, durability: str) -> dict[str, Any]:
    return {"roots": [str(folder)], "durability": durability, "auto_occ": "off"}


async def engine_edits(
    folder: Path,
    durability: str,
    writers: int,
    size: int,
    window: float,
    *,
    min_ops: int = 3,
    on_start: Callable[[], None] | None = None,
    on_stop: Callable[[], None] | None = None,
) -> Sample:
    """`writers` tasks, one session and one file each, edit for `window` seconds.

    Every writer opens its session and reads its file first; the clocks (wall and
    the process's CPU, all threads) start when the last one is ready. `on_start`
    and `on_stop` run right after the clocks start and right after they stop,
    with the engine still open (a profiler takes its snapshots there).
    """
    paths = _prepare(folder, writers, size)
    sample = Sample()
    ready, go = anyio.Event(), anyio.Event()
    pending = [writers]
    deadline = [0.0]
    async with Engine.open(_config(folder, durability)) as engine:

        async def writer(path: Path) -> None:
            session = await engine.session()
            read = await session.call("read_file", {"path": path.name, "limit": 1})
            digest = read.content_hash  # type: ignore[attr-defined]
            pending[0] -= 1
            if not pending[0]:
                ready.set()
            await go.wait()
            n = 0
            lat = []
            while n < min_ops or time.perf_counter() < deadline[0]:
                t0 = time.perf_counter()
                result = await session.call(
                    "edit_file",
                    {
                        "path": path.name,
                        "edits": [
                            {"old_text": _COUNTER.format(n), "new_text": _COUNTER.format(n + 1)}
                        ],
                        "expected_hash": digest,
                    },
                )
                lat.append(time.perf_counter() - t0)
                digest = result.files[0].content_hash  # type: ignore[attr-defined]
                n += 1
            sample.ops += n
            sample.latencies.extend(lat)

        async with anyio.create_task_group() as group:
            for path in paths:
                group.start_soon(writer, path)
            await ready.wait()
            cpu = time.process_time()
            start = time.perf_counter()
            if on_start is not None:
                on_start()
            deadline[0] = start + window
            go.set()
        sample.elapsed = time.perf_counter() - start
        sample.cpu = time.process_time() - cpu
        if on_stop is not None:
            on_stop()
    sample.bytes = sample.ops * size
    return sample


async def engine_reads(folder: Path, size: int, window: float) -> Sample:
    """`read_file` of one whole file (content and hash) in a loop."""
    (path,) = _prepare(folder, 1, size)
    sample = Sample()
    async with Engine.open(_config(folder, "normal")) as engine:
        session = await engine.session()
        start = time.perf_counter()
        deadline = start + window
        while sample.ops < 3 or time.perf_counter() < deadline:
            await session.call("read_file", {"path": path.name})
            sample.ops += 1
        sample.elapsed = time.perf_counter() - start
    sample.bytes = sample.ops * size
    return sample


async def engine_batch(folder: Path, durability: str, files: int, window: float) -> Sample:
    """One `batch` of `files` edits at a time, repeated; ops count files, not batches."""
    paths = _prepare(folder, files, 4 * KiB)
    sample = Sample()
    async with Engine.open(_config(folder, durability)) as engine:
        session = await engine.session()
        digests = {}
        for path in paths:
            read = await session.call("read_file", {"path": path.name, "limit": 1})
            digests[path.name] = read.content_hash  # type: ignore[attr-defined]
        start = time.perf_counter()
        deadline = start + window
        n = 0
        while n < 2 or time.perf_counter() < deadline:
            t0 = time.perf_counter()
            ops = [
                {
                    "op": "edit",
                    "path": p.name,
                    "edits": [{"old_text": _COUNTER.format(n), "new_text": _COUNTER.format(n + 1)}],
                    "expected_hash": digests[p.name],
                }
                for p in paths
            ]
            result = await session.call("batch", {"operations": ops})
            sample.latencies.append(time.perf_counter() - t0)
            for change in result.files:  # type: ignore[attr-defined]
                digests[os.path.basename(change.path)] = change.content_hash
            n += 1
        sample.elapsed = time.perf_counter() - start
    sample.ops = n * files
    sample.bytes = sample.ops * 4 * KiB
    return sample


# -- the suite ---------------------------------------------------------------------


def size_label(size: int) -> str:
    """4096 -> '4k', 1048576 -> '1m'.

    >>> size_label(4096), size_label(16 * 1024 * 1024)
    ('4k', '16m')
    """
    return f"{size // MiB}m" if size >= MiB else f"{size // KiB}k"


def configurations(
    window: float, sizes: Sequence[int], tail_window: float | None = None
) -> dict[str, Callable[[Path], Sample]]:
    """Every measured configuration by name; each takes a fresh folder.

    `tail_window` (default: `TAIL_WINDOW`, or `window` if longer) is the window
    of the single writer whose p99 is compared with its p50: a p99 needs about
    a thousand edits, and a stall that comes once a second needs seconds.
    """
    small = 4 * KiB
    configs: dict[str, Callable[[Path], Sample]] = {}

    def edits(durability: str, writers: int, size: int, w: float) -> Callable[[Path], Sample]:
        return lambda f: anyio.run(engine_edits, f, durability, writers, size, w)

    def floor(size: int, threads: int, sync: bool, w: float) -> Callable[[Path], Sample]:
        return lambda f: raw_replace(f, size, w, sync=sync, threads=threads)

    # Baseline first, then what is compared with it: A, B, A, B inside a round.
    configs["floor_1w"] = floor(small, 1, True, window)
    for writers in WRITERS:
        configs[f"edit_full_{writers}w"] = edits("full", writers, small, window)
    configs[f"floor_{FLOOR_THREADS}t"] = floor(small, FLOOR_THREADS, True, window)
    configs["rename_1w"] = floor(small, 1, False, window)
    configs["edit_normal_1w"] = edits("normal", 1, small, window)
    configs["edit_normal_32w"] = edits("normal", 32, small, window)
    tail = tail_window if tail_window is not None else max(TAIL_WINDOW, window)
    configs["edit_full_1w_tail"] = edits("full", 1, small, tail)
    # Run on a tmpfs (see `run`): the protocol without the disk, for its CPU.
    configs["edit_full_32w_tmpfs"] = edits("full", 32, small, window)
    configs["read_raw"] = lambda f: raw_read(f, READ_SIZE, window)
    configs["read_engine"] = lambda f: anyio.run(engine_reads, f, READ_SIZE, window)
    configs[f"batch{BATCH_FILES}_full"] = lambda f: anyio.run(
        engine_batch, f, "full", BATCH_FILES, window
    )
    for size in sizes:
        if size == small:
            continue
        label = size_label(size)
        # Big files: fewer operations fit a window; give them a longer one.
        w = window * (2 if size >= 16 * MiB else 1)
        configs[f"floor_1w_{label}"] = floor(size, 1, True, w)
        configs[f"edit_full_1w_{label}"] = edits("full", 1, size, w)
    return configs


def run(
    rounds: int,
    window: float,
    folder: Path,
    sizes: Sequence[int] = SIZES,
    verbose: bool = True,
    only: Sequence[str] = (),
    tail_window: float | None = None,
) -> dict[str, list[Sample]]:
    """Run every configuration once per round, in order; return samples by name."""
    configs = configurations(window, sizes, tail_window)
    if only:
        configs = {k: v for k, v in configs.items() if any(k.startswith(o) for o in only)}
    tmpfs = tmpfs_folder() if any(name.endswith("_tmpfs") for name in configs) else None
    if tmpfs is None:
        skipped = [name for name in configs if name.endswith("_tmpfs")]
        if skipped and verbose:
            print(f"no tmpfs at {TMPFS}: skipping {', '.join(skipped)}", flush=True)
        configs = {k: v for k, v in configs.items() if k not in skipped}
    samples: dict[str, list[Sample]] = {name: [] for name in configs}
    try:
        for r in range(rounds):
            for name, measure in configs.items():
                base = tmpfs if tmpfs is not None and name.endswith("_tmpfs") else folder
                work = base / f"engine-r{r}-{name}"
                try:
                    sample = measure(work)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                samples[name].append(sample)
                if verbose:
                    _print_round(r, rounds, name, sample)
    finally:
        if tmpfs is not None:
            shutil.rmtree(tmpfs, ignore_errors=True)
    return samples


def _print_round(r: int, rounds: int, name: str, sample: Sample) -> None:
    unit = "MB/s" if name.startswith("read") else "ops/s"
    value = sample.mb_per_s if unit == "MB/s" else sample.rate
    cpu = f"  cpu {sample.cpu_us_per_op:6.0f} us/op" if sample.cpu else ""
    print(
        f"round {r + 1}/{rounds} {name:>22}: {value:10.1f} {unit}"
        f"  p50 {_percentile(sample.latencies, 50) * 1e3:7.2f} ms"
        f"  p99 {_percentile(sample.latencies, 99) * 1e3:7.2f} ms{cpu}",
        flush=True,
    )


def _ratio(
    samples: dict[str, list[Sample]], top: str, bottom: str, value: str = "rate"
) -> dict[str, Any]:
    pairs = zip(samples[top], samples[bottom], strict=True)
    return summary([getattr(a, value) / getattr(b, value) for a, b in pairs])


def figures(samples: dict[str, list[Sample]]) -> dict[str, dict[str, Any]]:
    """Every ratio, engine over its baseline of the same round."""
    figs = {
        "edit_full_1w_vs_floor": _ratio(samples, "edit_full_1w", "floor_1w"),
        "edit_full_8w_vs_floor1w": _ratio(samples, "edit_full_8w", "floor_1w"),
        "edit_full_32w_vs_floor1w": _ratio(samples, "edit_full_32w", "floor_1w"),
        "edit_full_32w_vs_floor32t": _ratio(samples, "edit_full_32w", f"floor_{FLOOR_THREADS}t"),
        "floor32t_vs_floor1w": _ratio(samples, f"floor_{FLOOR_THREADS}t", "floor_1w"),
        "edit_normal_1w_vs_rename": _ratio(samples, "edit_normal_1w", "rename_1w"),
        "edit_normal_32w_vs_rename": _ratio(samples, "edit_normal_32w", "rename_1w"),
        "read_hash_vs_raw": _ratio(samples, "read_engine", "read_raw", "mb_per_s"),
        f"batch{BATCH_FILES}_files_vs_floor1w": _ratio(
            samples, f"batch{BATCH_FILES}_full", "floor_1w"
        ),
    }
    # Latency: engine p50/p99 over the floor's (lower is better, unlike the rest).
    for q in (50, 99):
        figs[f"edit_full_1w_p{q}_latency_vs_floor"] = summary(
            [
                _percentile(a.latencies, q) / _percentile(b.latencies, q)
                for a, b in zip(samples["edit_full_1w"], samples["floor_1w"], strict=True)
            ]
        )
    # The single writer's tail against its own median: stalls, not speed.
    figs["edit_full_1w_p99_vs_p50"] = summary(
        [
            _percentile(s.latencies, 99) / _percentile(s.latencies, 50)
            for s in samples["edit_full_1w_tail"]
        ]
    )
    if "edit_full_32w_tmpfs" in samples:
        # Not a ratio: µs of process CPU per edit (lower is better).
        figs["edit_cpu_us_32w_tmpfs"] = summary(
            [s.cpu_us_per_op for s in samples["edit_full_32w_tmpfs"]]
        )
    for name in samples:
        if name.startswith("edit_full_1w_") and name[len("edit_full_1w_") :] in {
            size_label(s) for s in SIZES
        }:
            label = name[len("edit_full_1w_") :]
            figs[f"edit_full_1w_{label}_vs_floor"] = _ratio(samples, name, f"floor_1w_{label}")
    return figs


def raw(samples: dict[str, list[Sample]]) -> dict[str, Any]:
    """Per configuration: rates, MB/s and latency percentiles, per round and median."""
    out: dict[str, Any] = {}
    for name, runs in samples.items():
        out[name] = {
            "ops_per_s": summary([s.rate for s in runs]),
            "mb_per_s": summary([s.mb_per_s for s in runs]),
            "p50_ms": summary([_percentile(s.latencies, 50) * 1e3 for s in runs]),
            "p99_ms": summary([_percentile(s.latencies, 99) * 1e3 for s in runs]),
            "cpu_us_per_op": summary([s.cpu_us_per_op for s in runs]),
            "ops": [s.ops for s in runs],
        }
    return out


def report(samples: dict[str, list[Sample]], figs: dict[str, dict[str, Any]]) -> None:
    """Print medians and figures."""
    print()
    for name, runs in samples.items():
        print(
            f"{name:>22}: median {median([s.rate for s in runs]):9.1f} ops/s"
            f" {median([s.mb_per_s for s in runs]):9.1f} MB/s"
            f"  p50 {median([_percentile(s.latencies, 50) for s in runs]) * 1e3:7.2f} ms"
            f"  p99 {median([_percentile(s.latencies, 99) for s in runs]) * 1e3:7.2f} ms"
        )
    for name, fig in figs.items():
        lo, hi = min(fig["rounds"]), max(fig["rounds"])
        unit = " us" if name.startswith("edit_cpu_us") else "x"
        print(f"{name}: {fig['median']:.2f}{unit} (min {lo:.2f}, max {hi:.2f})")


def settings(quick: bool) -> tuple[int, float]:
    """(rounds, window seconds)."""
    return (3, 0.4) if quick else (5, 1.5)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse arguments, run, print the figures and optionally write JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 0.4 s windows")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--window", type=float, help="override the window in seconds")
    parser.add_argument(
        "--only", action="append", default=[], help="run configurations with this prefix"
    )
    args = parser.parse_args(argv)
    rounds, window = settings(args.quick)
    rounds, window = args.rounds or rounds, args.window or window
    folder = bench_folder(args.dir)
    samples = run(rounds, window, folder, only=args.only)
    if args.only:
        report(samples, {})
        return {"raw": raw(samples)}
    figs = figures(samples)
    report(samples, figs)
    payload = {
        "machine": machine_info(folder, {"rounds": rounds, "window_s": window}),
        **figure_fields(figs),
        "raw": {"engine": raw(samples), "engine_ratios": figs},
    }
    if args.json:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
