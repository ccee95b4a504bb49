"""Edits over MCP stdio: `ledgerfs serve` against the reference filesystem server.

One client (the official Python MCP SDK, ``mcp.ClientSession`` over
``stdio_client``) starts each server as a subprocess on a fresh folder of 4 KiB
text files, initializes, then times N sequential ``edit_file`` calls, each
changing one line of one file (files taken in turn). Servers:

- ``reference``: ``@modelcontextprotocol/server-filesystem`` from npm (installed
  into ``.bench-cache/npm`` on first use; skipped with a message when npm or
  node is missing), edits ``[{oldText, newText}]``;
- ``ledgerfs_normal`` / ``ledgerfs_full``: ``ledgerfs serve ROOT --auto-occ off
  --durability normal|full``, edits ``[{old_text, new_text}]``.

Same files, same edits, same client, same run; servers alternate inside each
round and figures are medians of per-round ratios (ledgerfs edits/s over the
reference's). Startup is not timed.

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


async def run_server(server: str, argv: list[str], folder: Path, edits: int) -> dict[str, Any]:
    """Start `argv` on `folder`, time `edits` sequential edit_file calls; return the sample."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(FILES):
        path = folder / f"f{i}.txt"
        path.write_bytes(content(FILE_SIZE))
        paths.append(str(path))
    params = StdioServerParameters(
        command=argv[0], args=[*argv[1:], str(folder)], env=dict(os.environ), cwd=str(folder)
    )
    latencies: list[float] = []
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            counters = [0] * FILES
            start = time.perf_counter()
            for k in range(edits):
                i = k % FILES
                t0 = time.perf_counter()
                result = await session.call_tool(
                    "edit_file", _edit_args(server, paths[i], counters[i])
                )
                latencies.append(time.perf_counter() - t0)
                if getattr(result, "isError", False) or getattr(result, "is_error", False):
                    raise RuntimeError(f"{server}: edit_file failed: {result}")
                counters[i] += 1
            elapsed = time.perf_counter() - start
    for i, path in enumerate(paths):
        expected = _COUNTER.format(counters[i]).encode()
        if not Path(path).read_bytes().startswith(expected):
            raise RuntimeError(f"{server}: {path} does not hold the last edit")
    return {"rate": edits / elapsed, "latencies": latencies}


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


def run(rounds: int, edits: int, folder: Path, verbose: bool = True) -> dict[str, Any]:
    """Every available server once per round, alternating; rates and latencies by name."""
    found, skipped = servers(verbose)
    rates: dict[str, list[float]] = {name: [] for name in found}
    p50: dict[str, list[float]] = {name: [] for name in found}
    for r in range(rounds):
        for name, argv in found.items():
            work = folder / f"server-r{r}-{name}"
            try:
                sample = anyio.run(run_server, name, argv, work, edits)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            rates[name].append(sample["rate"])
            p50[name].append(median(sample["latencies"]) * 1e3)
            if verbose:
                print(
                    f"round {r + 1}/{rounds} {name:>16}: {sample['rate']:8.1f} edits/s"
                    f"  p50 {p50[name][-1]:6.2f} ms",
                    flush=True,
                )
    return {"rates": rates, "p50_ms": p50, "skipped": skipped}


def figures(rates: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    figs: dict[str, dict[str, Any]] = {}
    if "reference" not in rates:
        return figs
    for durability in ("normal", "full"):
        name = f"ledgerfs_{durability}"
        if name in rates:
            pairs = zip(rates[name], rates["reference"], strict=True)
            figs[f"mcp_edits_{durability}_vs_reference"] = summary([a / b for a, b in pairs])
    return figs


def settings(quick: bool) -> tuple[int, int]:
    """(rounds, edits per measurement)."""
    return (3, 40) if quick else (5, 200)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse arguments, run, print the figures and optionally write JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 40 edits")
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
        print(f"{name:>16}: median {median(values):8.1f} edits/s")
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
