"""A cheap call's latency on one session while another session runs hostile calls.

One ``ledgerfs serve --http`` process on loopback, two handshake-era MCP sessions
(the official client's ``mcp.Client``). Session A times ``get_file_info`` of a
small file, one call after another; in each round it does so once with the server
idle and once while session B repeats the hostile calls of every selected class
(the table below, each at the caps the tools allow). B is a process of its own, as
another agent's client is: in A's process its replies would be parsed on the loop
that times A's calls, and A would be timing its own client. The figure
``hostile_unrelated_p99_vs_idle`` is the median over rounds of A's p99 under
attack over its p99 idle, in the same run (goal <= 3);
``hostile_peak_rss_mib`` is the server's peak resident memory (VmHWM) after the
run.

    python -m benchmarks.bench_hostile [--quick] [--json FILE] [--dir DIR]
        [--classes regex,glob_pattern,...]

The default is every class; ``--classes`` measures some alone (a class not named
runs nothing, and the JSON lists it under ``left_out``).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from ledgerfs.engine.bounds import MAX_TREE_DEPTH

from ._stats import figure_fields, summary, write_json
from .bench_engine import bench_folder, machine_info

#: Files of a folder the glob bombs walk: names of 200 characters that end
#: where no bomb can match them, so each bomb is tried to its end.
GLOB_FILES = 300
NAME = "a" * 196
GLOB_BOMB = "*a*a*a*a*a*a*a*a*a*a*zz"
REGEX_BOMBS = [r"^(a+)+$", r"^(a|a)+$", r"^(.*a){12}X", r"(x+x+)+y", r"^(\w+\s?)+$"]
#: Levels of the deep folder (a tree reply that deep broke clients; deeper ones
#: also overflow the recursion of Python's own tree removal).
DEEP = 300
#: Lines of 200 characters that make each regex bomb backtrack in Python's re.
REGEX_LINES = 20_000


def _regex(root: Path) -> list[tuple[str, dict[str, Any]]]:
    folder = root / "regex"
    folder.mkdir(exist_ok=True)
    (folder / "hostile.txt").write_text(("a" * 199 + "!\n") * REGEX_LINES)
    return [
        (
            "search_files",
            {"path": str(folder), "content": p, "regex": True, "max_results": 10_000},
        )
        for p in REGEX_BOMBS
    ]


def _glob_folder(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(exist_ok=True)
    for i in range(GLOB_FILES):
        (folder / f"{NAME}{i:03d}").write_text("x\n")
    return folder


def _glob_pattern(root: Path) -> list[tuple[str, dict[str, Any]]]:
    folder = _glob_folder(root, "glob-pattern")
    return [("search_files", {"path": str(folder), "pattern": GLOB_BOMB})]


def _glob_exclude(root: Path) -> list[tuple[str, dict[str, Any]]]:
    folder = _glob_folder(root, "glob-exclude")
    excludes = [GLOB_BOMB.replace("zz", f"z{i}") for i in range(100)]  # the cap: 100
    return [
        ("search_files", {"path": str(folder), "exclude": excludes}),
        ("directory_tree", {"path": str(folder), "exclude": excludes}),
    ]


def _glob_gitignore(root: Path) -> list[tuple[str, dict[str, Any]]]:
    folder = _glob_folder(root, "glob-gitignore")
    lines = [GLOB_BOMB.replace("zz", f"z{i}") for i in range(100)]
    (folder / ".gitignore").write_text("\n".join(lines) + "\n")
    return [
        ("directory_tree", {"path": str(folder)}),
        ("search_files", {"path": str(folder), "content": "x"}),
    ]


def _edit_many(root: Path) -> list[tuple[str, dict[str, Any]]]:
    path = root / "big-edit.txt"
    path.write_text("".join(f"line {i:07d} of a big file\n" for i in range(400_000)))
    edits = [
        {"old_text": f"line {i:07d} of", "new_text": f"LINE {i:07d} of"}
        for i in range(0, 400_000, 400)
    ]
    return [("edit_file", {"path": str(path), "edits": edits, "dry_run": True})]


def _patch_bomb(root: Path) -> list[tuple[str, dict[str, Any]]]:
    # A git binary `literal` hunk whose stated size is small and whose data
    # inflates to 256 MiB: a server that inflates before checking pays for it.
    data = zlib.compress(b"\0" * (256 << 20), 9)
    body = "\n".join(_b85_row(data[i : i + 52]) for i in range(0, len(data), 52))
    patch = (
        "diff --git a/bomb.bin b/bomb.bin\nnew file mode 100644\nindex 0000000..1111111\n"
        f"GIT binary patch\nliteral 10\n{body}\n\nliteral 0\nHcmV?d00001\n\n"
    )
    return [("apply_patch", {"patch": patch, "dry_run": True})]


def _b85_row(chunk: bytes) -> str:
    """One line of a git binary hunk: its byte count as a letter, then base85."""
    size = len(chunk)
    letter = chr(ord("A") + size - 1) if size <= 26 else chr(ord("a") + size - 27)
    return letter + base64.b85encode(chunk, pad=True).decode()


def _deep_tree(root: Path) -> list[tuple[str, dict[str, Any]]]:
    deep = root / "deep"
    path = deep
    for _ in range(DEEP + 1):  # one level at a time: pathlib recurses per level
        path.mkdir(exist_ok=True)
        path = path / "d"
    # The deepest tree a call may ask for (a deeper max_depth is VALIDATION).
    return [("directory_tree", {"path": str(deep), "max_depth": MAX_TREE_DEPTH})]


def _big_history(root: Path) -> list[tuple[str, dict[str, Any]]]:
    # The journal is filled first (HISTORY_SETUP), then read at its largest pages.
    return [
        ("history", {"limit": 1_000}),
        ("history", {"path": str(root / "history" / "f0000.txt"), "limit": 1_000}),
    ]


def _history_batches(root: Path) -> list[tuple[str, dict[str, Any]]]:
    """Five batches of 2,000 writes: 10,000 mutations for the history to page through."""
    folder = root / "history"
    folder.mkdir(exist_ok=True)
    return [
        (
            "batch",
            {
                "operations": [
                    {"op": "write", "path": str(folder / f"f{i:04d}.txt"), "content": f"{n} {i}\n"}
                    for i in range(2_000)
                ]
            },
        )
        for n in range(5)
    ]


#: Every hostile class, what it sets up, and the calls session B repeats.
CLASSES: dict[str, Callable[[Path], list[tuple[str, dict[str, Any]]]]] = {
    "regex": _regex,
    "glob_pattern": _glob_pattern,
    "glob_exclude": _glob_exclude,
    "glob_gitignore": _glob_gitignore,
    "edit_many": _edit_many,
    "patch_bomb": _patch_bomb,
    "deep_tree": _deep_tree,
    "big_history": _big_history,
}


def _busy(root: Path) -> list[tuple[str, dict[str, Any]]]:
    """Not hostile: B repeats A's own cheap call. What any busy peer costs A, the
    floor the hostile classes are judged against (run it with --classes busy)."""
    return [("get_file_info", {"path": str(root / "small.txt")})]


#: Classes a run may name that are not hostile, left out of the default.
CONTROLS: dict[str, Callable[[Path], list[tuple[str, dict[str, Any]]]]] = {"busy": _busy}

#: What a class needs made through the server before the rounds (untimed).
SETUP: dict[str, Callable[[Path], list[tuple[str, dict[str, Any]]]]] = {
    "big_history": _history_batches,
}


SERVE = [sys.executable, "-m", "ledgerfs", "serve"]


def start_server(root: Path, state: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`ledgerfs serve ROOT --http 127.0.0.1:PORT`, waited for until it accepts."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    proc = subprocess.Popen(
        [*SERVE, str(root), "--auto-occ", "off", "--http", f"127.0.0.1:{port}"],
        env={**os.environ, "LEDGERFS_STATE_DIR": str(state)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited at start")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the server did not start")


def peak_rss_mib(pid: int) -> float | None:
    """The process's peak resident memory (Linux /proc VmHWM), in MiB."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


async def measure(
    url: str,
    small: Path,
    setup: list[tuple[str, dict[str, Any]]],
    calls_file: Path,
    rounds: int,
    cheap: int,
) -> dict[str, Any]:
    """Per round: A's cheap-call latencies idle, then beside B's hostile calls."""
    idle: list[list[float]] = []
    hostile: list[list[float]] = []
    made = 0  # hostile calls answered
    async with Client(url, mode="legacy") as a:
        await a.call_tool("get_file_info", {"path": str(small)})  # untimed: schemas
        async with Client(url, mode="legacy") as b:
            for name, arguments in setup:
                await b.call_tool(name, arguments)
        for _ in range(rounds):
            idle.append(await _cheap_calls(a, small, cheap))
            async with await anyio.open_process(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.bench_hostile",
                    "--attack",
                    url,
                    str(calls_file),
                ],
                cwd=Path(__file__).resolve().parents[1],
                stderr=None,
            ) as attacker:
                assert attacker.stdout is not None
                lines = _lines(attacker.stdout)
                if await anext(lines) != "ready":
                    raise RuntimeError("the attacking client did not start")
                await anyio.sleep(0.2)  # the attack under way before timing starts
                hostile.append(await _cheap_calls(a, small, cheap))
                attacker.terminate()
                made += sum([1 async for _ in lines])
    return {"idle": idle, "hostile": hostile, "hostile_calls": made}


async def _lines(stream: Any) -> Any:
    """The lines a process writes, as they come."""
    buffer = b""
    async for chunk in stream:
        buffer += chunk
        *done, buffer = buffer.split(b"\n")
        for line in done:
            yield line.decode()


async def attack(url: str, calls_file: Path) -> None:
    """Session B: repeat the hostile calls until killed, a line for each answered."""
    calls = [(name, arguments) for name, arguments in json.loads(calls_file.read_text())]
    async with Client(url, mode="legacy") as client:
        print("ready", flush=True)
        while True:
            for name, arguments in calls:
                await client.call_tool(name, arguments)
                print(".", flush=True)


async def _cheap_calls(client: Client, small: Path, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        start = time.perf_counter()
        result = await client.call_tool("get_file_info", {"path": str(small)})
        latencies.append(time.perf_counter() - start)
        if result.is_error:
            raise RuntimeError(f"get_file_info failed: {result.content}")
    return latencies


def run(
    classes: list[str], rounds: int, cheap: int, folder: Path, verbose: bool = True
) -> dict[str, Any]:
    root, state = folder / "hostile-root", folder / "hostile-state"
    root.mkdir(parents=True, exist_ok=True)
    small = root / "small.txt"
    small.write_text("small\n")
    calls = [call for name in classes for call in {**CLASSES, **CONTROLS}[name](root)]
    setup = [call for name in classes if name in SETUP for call in SETUP[name](root)]
    calls_file = folder / "hostile-calls.json"
    calls_file.write_text(json.dumps(calls))
    proc, url = start_server(root, state)
    try:
        result = anyio.run(measure, url, small, setup, calls_file, rounds, cheap)
        result["peak_rss_mib"] = peak_rss_mib(proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if verbose:
        for i, (idle, hostile) in enumerate(zip(result["idle"], result["hostile"], strict=True)):
            print(
                f"round {i}: p99 idle {p99(idle) * 1000:.2f} ms,"
                f" beside hostile calls {p99(hostile) * 1000:.2f} ms"
            )
    return result


def figures(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    ratios = [
        p99(hostile) / p99(idle)
        for idle, hostile in zip(result["idle"], result["hostile"], strict=True)
    ]
    figs = {"hostile_unrelated_p99_vs_idle": summary(ratios)}
    if result.get("peak_rss_mib") is not None:
        figs["hostile_peak_rss_mib"] = summary([result["peak_rss_mib"]])
    return figs


def settings(quick: bool) -> tuple[int, int]:
    """(rounds, cheap calls per window)."""
    return (3, 100) if quick else (5, 400)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--attack"]:  # session B's process: --attack URL CALLS_FILE
        with contextlib.suppress(KeyboardInterrupt):
            anyio.run(attack, argv[1], Path(argv[2]))
        return {"attacked": True}
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 100 cheap calls")
    parser.add_argument("--rounds", type=int, help="rounds")
    parser.add_argument("--calls", type=int, help="cheap calls per window")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    parser.add_argument(
        "--classes",
        default=",".join(CLASSES),
        help=f"comma-separated hostile classes, of: {', '.join(CLASSES)}; "
        f"or a control: {', '.join(CONTROLS)}",
    )
    args = parser.parse_args(argv)
    classes = [name for name in args.classes.split(",") if name]
    unknown = sorted(set(classes) - set(CLASSES) - set(CONTROLS))
    if unknown:
        parser.error(f"unknown classes: {', '.join(unknown)}")
    rounds, cheap = settings(args.quick)
    rounds, cheap = args.rounds or rounds, args.calls or cheap
    folder = bench_folder(args.dir)
    result = run(classes, rounds, cheap, folder)
    figs = figures(result)
    for name, fig in figs.items():
        print(f"{name}: {fig['median']:.2f}")
    left_out = [name for name in CLASSES if name not in classes]
    payload = {
        "machine": machine_info(folder, {"rounds": rounds, "cheap_calls": cheap}),
        **figure_fields(figs),
        "raw": {
            "hostile": {
                "classes": classes,
                "left_out": left_out,
                "hostile_calls": result["hostile_calls"],
                "idle_p99_ms": [p99(v) * 1000 for v in result["idle"]],
                "hostile_p99_ms": [p99(v) * 1000 for v in result["hostile"]],
                "peak_rss_mib": result["peak_rss_mib"],
            }
        },
    }
    if args.json:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
