"""Edits over MCP stdio: `ledgerfs serve` against the reference filesystem server.

One client (the official Python MCP SDK, ``mcp.ClientSession`` over
``stdio_client``) starts each server as a subprocess on a fresh folder of 4 KiB
text files, initializes, then times N ``edit_file`` calls, each changing one
line of one file: sequential (files taken in turn), and 8 at a time on the one
session (8 tasks, each editing its own file). Servers:

- ``reference``: ``@modelcontextprotocol/server-filesystem`` from npm (installed
  into ``.bench-cache/npm`` on first use; skipped with a message when npm or
  node is missing), edits ``[{oldText, newText}]``;
- ``ledgerfs_normal`` / ``ledgerfs_full``: ``ledgerfs serve ROOT --auto-occ off
  --durability normal|full``, edits ``[{old_text, new_text}]``.

Same files, same edits, same client, same run; servers alternate inside each
round and figures are medians of per-round ratios (ledgerfs edits/s over the
reference's): ``mcp_edits_{normal,full}_vs_reference`` sequential,
``mcp_edits_normal_conc8_vs_reference`` 8 at a time. Startup is not timed, nor
one edit of a file of its own made first: the client's first call lists the
tools and compiles the result's output schema (once per call in flight when 8
start at once), 40 ms or more against the 64 timed calls of a `--quick` round.
On Linux the server process's CPU time over the timed calls is read from /proc
and reported per call (``cpu_us_per_call``, every thread of the process).

    python -m benchmarks.bench_server [--quick] [--json FILE] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from ._stats import figure_fields, median, summary, write_json
from .bench_engine import _COUNTER, bench_folder, content, machine_info, repo_root

REFERENCE_PACKAGE = "@modelcontextprotocol/server-filesystem"
FILES = 8
FILE_SIZE = 4096
#: Calls in flight on the one session for the concurrent figure (one file each).
CONCURRENT = 8


def npm_prefix() -> Path:
    return repo_root() / ".bench-cache" / "npm"


def reference_command(install: bool = True) -> tuple[list[str] | None, str]:
    """(argv prefix to start the reference server, or None; why not)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None:
        return None, "node is not installed: the reference server cannot run"
    entry = npm_prefix() / "node_modules" / REFERENCE_PACKAGE / "dist" / "index.js"
    if not entry.exists() and install:
        if npm is None:
            return None, "npm is not installed: cannot install the reference server"
        done = subprocess.run(
            [npm, "install", "--prefix", str(npm_prefix()), REFERENCE_PACKAGE],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            return None, f"npm install {REFERENCE_PACKAGE} failed: {done.stderr.strip()[-300:]}"
    if not entry.exists():
        return None, f"{entry} is missing"
    return [node, str(entry)], ""


def ledgerfs_command() -> tuple[list[str] | None, str]:
    """(argv prefix to start `ledgerfs serve`, or None; why not)."""
    script = Path(sys.executable).parent / "ledgerfs"
    try:
        import ledgerfs.engine.cli  # noqa: F401
    except ImportError as exc:
        return None, f"ledgerfs serve is not available yet: {exc}"
    if script.exists():
        return [str(script), "serve"], ""
    return [sys.executable, "-m", "ledgerfs", "serve"], ""


def _edit_args(server: str, path: str, n: int) -> dict[str, Any]:
    old, new = _COUNTER.format(n), _COUNTER.format(n + 1)
    if server == "reference":
        return {"path": path, "edits": [{"oldText": old, "newText": new}]}
    return {"path": path, "edits": [{"old_text": old, "new_text": new}]}


async def run_server(
    server: str, argv: list[str], folder: Path, edits: int, concurrency: int = 1
) -> dict[str, Any]:
    """Start `argv` on `folder`, time `edits` edit_file calls, `concurrency` at a time.

    Call k edits file k % FILES; with concurrency c, task w makes the calls k with
    k % c == w, so tasks in flight together edit distinct files (c <= FILES).
    Returns the rate, every call's latency and the server's CPU seconds per call
    (None where /proc cannot tell).
    """
    assert 1 <= concurrency <= FILES
    # The served root, and ledgerfs's state folder beside it: a journal's marks
    # stay with the run (a later run reusing the folder name starts afresh).
    root, state = folder / "root", folder / "state"
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(FILES):
        path = root / f"f{i}.txt"
        path.write_bytes(content(FILE_SIZE))
        paths.append(str(path))
    warm = root / "warm.txt"
    warm.write_bytes(content(FILE_SIZE))
    env = {**os.environ, "LEDGERFS_STATE_DIR": str(state)}
    params = StdioServerParameters(
        command=argv[0], args=[*argv[1:], str(root)], env=env, cwd=str(root)
    )
    latencies: list[float] = []
    counters = [0] * FILES

    async def edit(session: ClientSession, k: int) -> None:
        i = k % FILES
        t0 = time.perf_counter()
        result = await session.call_tool("edit_file", _edit_args(server, paths[i], counters[i]))
        latencies.append(time.perf_counter() - t0)
        if getattr(result, "isError", False) or getattr(result, "is_error", False):
            raise RuntimeError(f"{server}: edit_file failed: {result}")
        counters[i] += 1

    async def calls(session: ClientSession, first: int) -> None:
        for k in range(first, edits, concurrency):
            await edit(session, k)

    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            # Untimed, like startup: the client's first call lists the tools and
            # compiles the result's schema (once per call in flight, when 8 start at once).
            await session.call_tool("edit_file", _edit_args(server, str(warm), 0))
            cpu = _ServerCpu()
            start = time.perf_counter()
            async with anyio.create_task_group() as group:
                for first in range(concurrency):
                    group.start_soon(calls, session, first)
            elapsed = time.perf_counter() - start
            cpu_seconds = cpu.used()
    for i, edited in enumerate(paths):
        expected = _COUNTER.format(counters[i]).encode()
        if not Path(edited).read_bytes().startswith(expected):
            raise RuntimeError(f"{server}: {edited} does not hold the last edit")
    per_call = None if cpu_seconds is None else cpu_seconds / edits
    return {"rate": edits / elapsed, "latencies": latencies, "cpu_per_call": per_call}


class _ServerCpu:
    """CPU seconds used by this process's children (the server) since construction.

    Read from /proc (Linux); elsewhere `used()` is None.
    """

    def __init__(self) -> None:
        self._start = self._read()

    @staticmethod
    def _read() -> dict[int, float] | None:
        try:
            tasks = os.listdir(f"/proc/{os.getpid()}/task")
            children: set[int] = set()
            for task in tasks:
                with open(f"/proc/{os.getpid()}/task/{task}/children") as listed:
                    children.update(int(pid) for pid in listed.read().split())
            ticks = os.sysconf("SC_CLK_TCK")
            used = {}
            for pid in children:
                with open(f"/proc/{pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                used[pid] = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
            return used
        except (OSError, ValueError):
            return None

    def used(self) -> float | None:
        end = self._read()
        if self._start is None or end is None:
            return None
        return sum(end[pid] - self._start.get(pid, 0.0) for pid in end)


def servers(verbose: bool = True) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The servers that can run here, and why the others cannot."""
    found: dict[str, list[str]] = {}
    skipped: dict[str, str] = {}
    ref, why = reference_command()
    if ref is None:
        skipped["reference"] = why
    else:
        found["reference"] = ref
    led, why = ledgerfs_command()
    if led is None:
        skipped["ledgerfs_normal"] = skipped["ledgerfs_full"] = why
    else:
        for durability in ("normal", "full"):
            found[f"ledgerfs_{durability}"] = [
                *led,
                "--auto-occ",
                "off",
                "--durability",
                durability,
            ]
    if verbose:
        for name, reason in skipped.items():
            print(f"skipping {name}: {reason}", flush=True)
    return found, skipped


#: (figure suffix, servers measured, calls in flight).
MODES: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("", ("reference", "ledgerfs_normal", "ledgerfs_full"), 1),
    ("_conc8", ("reference", "ledgerfs_normal"), CONCURRENT),
)


def run(rounds: int, edits: int, folder: Path, verbose: bool = True) -> dict[str, Any]:
    """Every available server once per round and mode, alternating; rates, latencies, CPU."""
    found, skipped = servers(verbose)
    keys = [
        (name + suffix, name, argv, conc)
        for suffix, names, conc in MODES
        for name, argv in found.items()
        if name in names
    ]
    rates: dict[str, list[float]] = {key: [] for key, *_ in keys}
    p50: dict[str, list[float]] = {key: [] for key, *_ in keys}
    cpu_us: dict[str, list[float]] = {key: [] for key, *_ in keys}
    for r in range(rounds):
        for key, name, argv, conc in keys:
            work = folder / f"server-r{r}-{key}"
            try:
                sample = anyio.run(run_server, name, argv, work, edits, conc)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            rates[key].append(sample["rate"])
            p50[key].append(median(sample["latencies"]) * 1e3)
            if sample["cpu_per_call"] is not None:
                cpu_us[key].append(sample["cpu_per_call"] * 1e6)
            if verbose:
                cpu = f"  cpu {cpu_us[key][-1]:6.0f} us/call" if cpu_us[key] else ""
                print(
                    f"round {r + 1}/{rounds} {key:>22}: {sample['rate']:8.1f} edits/s"
                    f"  p50 {p50[key][-1]:6.2f} ms{cpu}",
                    flush=True,
                )
    return {"rates": rates, "p50_ms": p50, "cpu_us_per_call": cpu_us, "skipped": skipped}


def figures(rates: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    figs: dict[str, dict[str, Any]] = {}
    for suffix, names, _ in MODES:
        reference = rates.get("reference" + suffix)
        if not reference:
            continue
        for name in names:
            durability = name.removeprefix("ledgerfs_")
            ours = rates.get(name + suffix)
            if name != "reference" and ours:
                pairs = zip(ours, reference, strict=True)
                ratios = [a / b for a, b in pairs]
                figs[f"mcp_edits_{durability}{suffix}_vs_reference"] = summary(ratios)
    return figs


def settings(quick: bool) -> tuple[int, int]:
    """(rounds, edits per measurement)."""
    return (3, 64) if quick else (5, 200)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse arguments, run, print the figures and optionally write JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 64 edits")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    parser.add_argument("--edits", type=int, help="edits per measurement")
    parser.add_argument("--rounds", type=int, help="rounds")
    args = parser.parse_args(argv)
    rounds, edits = settings(args.quick)
    rounds, edits = args.rounds or rounds, args.edits or edits
    folder = bench_folder(args.dir)
    result = run(rounds, edits, folder)
    figs = figures(result["rates"])
    print()
    for name, values in result["rates"].items():
        cpu = result["cpu_us_per_call"].get(name)
        cpu_text = f"  cpu {median(cpu):6.0f} us/call" if cpu else ""
        print(f"{name:>22}: median {median(values):8.1f} edits/s{cpu_text}")
    for name, fig in figs.items():
        print(
            f"{name}: {fig['median']:.2f}x"
            f" (min {min(fig['rounds']):.2f}, max {max(fig['rounds']):.2f})"
        )
    payload = {
        "machine": machine_info(folder, {"rounds": rounds, "edits": edits}),
        **figure_fields(figs),
        "raw": {
            "server": {
                "edits_per_s": {k: summary(v) for k, v in result["rates"].items() if v},
                "p50_ms": {k: summary(v) for k, v in result["p50_ms"].items() if v},
                "cpu_us_per_call": {
                    k: summary(v) for k, v in result["cpu_us_per_call"].items() if v
                },
                "concurrent_calls": CONCURRENT,
                "skipped": result["skipped"],
                "edits_per_measurement": edits,
                "files": FILES,
                "file_bytes": FILE_SIZE,
                "ratios": figs,
            }
        },
    }
    if args.json:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
