"""Files at the size limit (50 MiB): paged reads and the server's peak memory.

Paging: one ``read_file`` of a 50 MiB text file (76-byte lines) against reading
it page by page, following ``next_offset`` until the last page, through the
embedding API (``Engine``; the MCP transport's cost of moving 50 MiB of JSON is
not the engine's). The file is settled first (its timestamps set back beyond
the racy window, as any file not written in the last seconds is), so pages come
from its line index. Each round starts with no index: the whole read and the
paging each pay for reading, hashing and indexing the file once. Figure
``paging_50mib_vs_whole_read``: the time to page through it all over the time
of one whole read, a median over rounds (lower is better; the bound is 3).

Memory: ``ledgerfs serve`` on a folder holding the 50 MiB file, driven by the
official MCP client. Its resident set is read from ``/proc/PID/status``: the
idle server's (``VmRSS`` after start-up and a small read) and the peak of each
call (``VmHWM``, reset before it through ``/proc/PID/clear_refs``): a one-line
``edit_file``, the ``undo`` of that edit, a one-line ``apply_patch``. Figures
``peak_over_size_{edit,undo,patch}``: (peak - idle) / file size, the memory a
call of a file at the limit adds to the server; the idle RSS is reported
beside them. Linux only (the memory half is skipped elsewhere).

    python -m benchmarks.bench_bigfiles [--quick] [--json FILE] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from ledgerfs.engine import Engine
from ledgerfs.engine.pages import LineIndexes

from ._stats import figure_fields, machine, summary, write_json
from .bench_server import ledgerfs_command

#: Just under the limit (50 MiB), so that an edit may grow the file a little.
SIZE = 50 * 1024 * 1024 - 64 * 1024
LINE = b"x" * 60 + b" 0123456789abc\n"  # 76 bytes
MIB = 1024 * 1024


def big_text(size: int = SIZE) -> bytes:
    """Lines of text, about `size` bytes, the last one `needle`."""
    return LINE * (size // len(LINE) - 1) + b"needle\n"


def last_lines_patch(size: int, old: str, new: str) -> str:
    """A unified diff of big_text(size) changing its last line from `old` to `new`."""
    lines = size // len(LINE)
    return (
        f"--- a/big.txt\n+++ b/big.txt\n@@ -{lines - 1},2 +{lines - 1},2 @@\n"
        f" {LINE.decode()}-{old}\n+{new}\n"
    )


def settle(path: Path) -> None:
    """Set a file's times well into the past: a file not written lately."""
    past = time.time_ns() - 3600 * 10**9
    os.utime(path, ns=(past, past))


async def paging(folder: Path, rounds: int, size: int = SIZE) -> dict[str, Any]:
    """Seconds for one whole read and for paging through, `rounds` times each."""
    folder.mkdir(parents=True)
    path = folder / "big.txt"
    path.write_bytes(big_text(size))
    settle(path)
    whole: list[float] = []
    paged: list[float] = []
    pages = 0
    config = {"roots": [str(folder)], "durability": "normal", "auto_occ": "off"}
    async with Engine.open(config) as engine:
        session = await engine.session()
        # One untimed read first: the file's pages into the page cache.
        await session.call("read_file", {"path": path.name})
        for _ in range(rounds):
            # Each from no index: the whole read, then the paging, pays the one split.
            engine.line_indexes = LineIndexes()
            start = time.perf_counter()
            await session.call("read_file", {"path": path.name})
            whole.append(time.perf_counter() - start)
            engine.line_indexes = LineIndexes()
            start = time.perf_counter()
            offset: int | None = 0
            pages = 0
            while offset is not None:
                page = await session.call("read_file", {"path": path.name, "offset": offset})
                offset = page.next_offset
                pages += 1
            paged.append(time.perf_counter() - start)
        stats = engine.line_indexes.statistics()
    return {
        "whole": whole,
        "paged": paged,
        "pages": pages,
        "ratios": [p / w for p, w in zip(paged, whole, strict=True)],
        "index_bytes": stats.bytes,
    }


def _status(pid: int) -> dict[str, int]:
    """The kB fields of /proc/PID/status (VmRSS, VmHWM, ...), in bytes."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                fields[name] = int(value.split()[0]) * 1024
    return fields


def _server_pid() -> int:
    """The one child of this process: the server stdio_client started."""
    children: set[int] = set()
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{task}/children") as listed:
            children.update(int(pid) for pid in listed.read().split())
    (pid,) = children
    return pid


def _reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as refs:
        refs.write("5")  # resets VmHWM to the current RSS


async def memory(folder: Path, size: int = SIZE) -> dict[str, Any]:
    """The idle server's RSS and each call's peak RSS, in bytes."""
    argv, why = ledgerfs_command()
    if argv is None:
        raise RuntimeError(why)
    root, state = folder / "root", folder / "state"
    root.mkdir(parents=True)
    path = root / "big.txt"
    path.write_bytes(big_text(size))
    (root / "small.txt").write_bytes(b"small\n")
    params = StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "--auto-occ", "off", str(root)],
        env={**os.environ, "LEDGERFS_STATE_DIR": str(state)},
        cwd=str(root),
    )
    out: dict[str, Any] = {"size": len(big_text(size))}
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await _call(session, "read_file", {"path": "small.txt"})
            pid = _server_pid()
            out["idle_rss"] = _status(pid)["VmRSS"]

            async def peak(tool: str, arguments: dict[str, Any]) -> Any:
                _reset_peak(pid)
                result = await _call(session, tool, arguments)
                out[f"{tool}_peak_rss"] = _status(pid)["VmHWM"]
                return result

            await peak(
                "edit_file",
                {
                    "path": "big.txt",
                    "edits": [{"old_text": "needle\n", "new_text": "needle twice\n"}],
                },
            )
            patched = await peak(
                "apply_patch", {"patch": last_lines_patch(size, "needle twice", "needle thrice")}
            )
            await peak("undo", {"transaction": patched["transaction"]})
    return out


async def _call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> Any:
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content}")
    return result.structured_content


def figures(paged: dict[str, Any], mem: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    figs = {"paging_50mib_vs_whole_read": summary(paged["ratios"])}
    if mem is not None:
        for name, tool in (("edit", "edit_file"), ("patch", "apply_patch"), ("undo", "undo")):
            ratio = (mem[f"{tool}_peak_rss"] - mem["idle_rss"]) / mem["size"]
            figs[f"peak_over_size_{name}"] = summary([ratio])
    return figs


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of paging, not 7")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--dir", help="work in this folder (default: a temp folder)")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="bench-bigfiles-", dir=args.dir))
    try:
        paged = anyio.run(paging, base / "paging", 3 if args.quick else 7)
        mem = anyio.run(memory, base / "memory") if sys.platform == "linux" else None
    finally:
        shutil.rmtree(base, ignore_errors=True)
    figs = figures(paged, mem)
    print(f"paging: {paged['pages']} pages, index {paged['index_bytes'] / MIB:.1f} MiB")
    print(
        f"  whole read {min(paged['whole']) * 1000:.0f} ms, "
        f"paged {min(paged['paged']) * 1000:.0f} ms"
    )
    if mem is not None:
        print(f"server idle RSS {mem['idle_rss'] / MIB:.0f} MiB; file {mem['size'] / MIB:.1f} MiB")
        for tool in ("edit_file", "apply_patch", "undo"):
            print(f"  {tool:12} peak RSS {mem[f'{tool}_peak_rss'] / MIB:.0f} MiB")
    for name, fig in figs.items():
        print(f"{name:32} {fig['median']:.2f}")
    payload = {"machine": machine(), "paging": paged, "memory": mem, **figure_fields(figs)}
    if args.json:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
