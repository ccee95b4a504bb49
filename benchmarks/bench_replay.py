"""Replaying a repository's history through `apply_patch`, with `git apply` as the oracle.

For each of the last N first-parent, non-merge commits C of REPO (parent P), and
each diff variant (`plain`: `git diff --binary --no-renames P C`, `U1`: the same
with `-U1`, `M`: `-M` with renames), the diff goes

- through `apply_patch` over MCP stdio (the SDK's client and `ledgerfs serve WORK
  --durability full --auto-occ off`) onto a checkout of P in WORK, as text, or as
  `patch_base64` when it is not UTF-8;
- through `git apply` (a subprocess) onto a checkout of P in ORACLE.

Both trees are then compared, entry by entry (type, git mode, bytes, link
target, empty folders included), with each other and with C. Agreement means:
both applied and both trees equal C, or both refused and WORK still equals P.
Times are per patch: the MCP call alone, and the `git apply` subprocess alone.

`--profile` then replays the same patches through the engine in this process
(no MCP), and reports where the time of one `apply_patch` goes: wall time, CPU
time per thread (each thread's own CPU clock, `pthread_getcpuclockid`, read
before and after every call; the event loop's is `time.thread_time`), and the
functions the loop thread spends it in (cProfile).

    python -m benchmarks.bench_replay REPO --commits N [--variants plain,U1,M]
        [--profile] [--json FILE] [--dir DIR]
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import io
import os
import pstats
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from ._stats import median, write_json
from .bench_engine import bench_folder, machine_info

__all__ = [
    "VARIANTS",
    "Replayer",
    "Tree",
    "commits_of",
    "diff_of",
    "git",
    "main",
    "snapshot",
]

#: Diff flags of each variant; every one carries binary changes as data.
VARIANTS: dict[str, tuple[str, ...]] = {
    "plain": ("--binary", "--no-renames"),
    "U1": ("--binary", "--no-renames", "-U1"),
    "M": ("--binary", "-M"),
}

#: path -> ("file", git mode, bytes) | ("link", "120000", target) | ("dir", "", b"")
Tree = dict[str, tuple[str, str, bytes]]

GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_AUTHOR_NAME": "replay",
    "GIT_AUTHOR_EMAIL": "replay@example.com",
    "GIT_COMMITTER_NAME": "replay",
    "GIT_COMMITTER_EMAIL": "replay@example.com",
    # The user's config (noprefix, autocrlf, colour) must not shape diffs or checkouts.
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "LC_ALL": "C",
}


def git(repo: Path, *args: str, stdin: bytes | None = None, check: bool = True) -> bytes:
    """Run git in `repo` without the user's config; its stdout."""
    result = subprocess.run(
        ["git", "-c", "core.autocrlf=false", "-c", "core.symlinks=true", *args],
        cwd=repo,
        env=GIT_ENV,
        input=stdin,
        capture_output=True,
        check=False,
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {result.stderr.decode(errors='replace')}")
    return result.stdout


def commits_of(repo: Path, count: int) -> list[tuple[str, str]]:
    """(parent, commit) of the last `count` first-parent, non-merge commits, oldest first."""
    out = git(repo, "rev-list", "--first-parent", "--no-merges", "--parents", f"-n{count}", "HEAD")
    pairs = []
    for line in out.decode().splitlines():
        ids = line.split()
        if len(ids) == 2:  # a root commit has no parent to diff against
            pairs.append((ids[1], ids[0]))
    return pairs[::-1]


def diff_of(repo: Path, parent: str, commit: str, flags: Sequence[str]) -> bytes:
    """The diff from `parent` to `commit` as git prints it (bytes: it may not be UTF-8)."""
    return git(repo, "diff", "--no-color", "--no-ext-diff", *flags, parent, commit)


def snapshot(root: Path) -> Tree:
    """Every entry under `root` but `.git`: type, git mode, bytes (empty folders too)."""
    tree: Tree = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not (folder == str(root) and d == ".git"))
        rel = os.path.relpath(folder, root)
        for name in [*dirs, *files]:
            path = os.path.join(folder, name)
            key = name if rel == "." else os.path.join(rel, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                tree[key] = ("link", "120000", os.fsencode(os.readlink(path)))
            elif stat.S_ISDIR(st.st_mode):
                # Only an empty folder is an entry of its own; git has no others.
                if not os.listdir(path):
                    tree[key] = ("dir", "", b"")
                # A link to a folder is listed with dirs but never walked into.
            else:
                mode = "100755" if st.st_mode & stat.S_IXUSR else "100644"
                tree[key] = ("file", mode, Path(path).read_bytes())
    return tree


def _describe(entry: tuple[str, str, bytes] | None) -> str:
    return "absent" if entry is None else f"{entry[0]} {entry[1]} {len(entry[2])}B"


def tree_difference(got: Tree, wanted: Tree) -> list[str]:
    """The paths where two trees differ, each with what differs (for reports)."""
    lines = []
    for path in sorted(got.keys() | wanted.keys()):
        a, b = got.get(path), wanted.get(path)
        if a != b:
            lines.append(f"{path}: {_describe(a)} != {_describe(b)}")
    return lines


def checkout(clone: Path, commit: str) -> None:
    """Make `clone`'s tree exactly `commit`: tracked files reset, everything else removed."""
    git(clone, "reset", "-q", "--hard", commit)
    git(clone, "clean", "-q", "-ffdx")


def patch_arguments(diff: bytes) -> dict[str, str]:
    """`patch` when the diff is UTF-8 text, else `patch_base64`."""
    try:
        return {"patch": diff.decode("utf-8")}
    except UnicodeDecodeError:
        return {"patch_base64": base64.b64encode(diff).decode("ascii")}


class Outcome:
    """One replayed (commit, variant): whether each side applied, agreement, times."""

    def __init__(self, commit: str, variant: str) -> None:
        self.commit, self.variant = commit, variant
        self.ledgerfs_applied = self.git_applied = False
        self.agree = False
        self.ledgerfs_seconds = self.git_seconds = 0.0
        self.detail: list[str] = []
        self.error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


class Replayer:
    """A `ledgerfs serve` over WORK (a clone of REPO) and an ORACLE clone for `git apply`."""

    def __init__(self, repo: Path, scratch: Path, client: Client) -> None:
        self.repo, self.client = repo, client
        self.work, self.oracle = scratch / "work", scratch / "oracle"

    @staticmethod
    def prepare(repo: Path, scratch: Path) -> None:
        """Clone REPO twice (sharing its objects) into `scratch`."""
        for name in ("work", "oracle"):
            subprocess.run(
                ["git", "clone", "-q", "--shared", "--no-checkout", str(repo), str(scratch / name)],
                env=GIT_ENV,
                check=True,
                capture_output=True,
            )

    @staticmethod
    def server(scratch: Path) -> StdioServerParameters:
        """`ledgerfs serve WORK` at full durability, its journal outside WORK."""
        args = [
            "-m",
            "ledgerfs",
            "serve",
            str(scratch / "work"),
            "--journal",
            str(scratch / "journal.db"),
            "--durability",
            "full",
            "--auto-occ",
            "off",
        ]
        env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
        env["GIT_CONFIG_NOSYSTEM"] = "1"
        return StdioServerParameters(command=sys.executable, args=args, env=env)

    async def replay(self, parent: str, commit: str, variant: str, diff: bytes) -> Outcome:
        """Apply `diff` both ways onto checkouts of `parent` and judge the trees."""
        outcome = Outcome(commit, variant)
        checkout(self.work, parent)
        checkout(self.oracle, parent)
        before = snapshot(self.work)
        started = time.perf_counter()
        result = await self.client.call_tool("apply_patch", patch_arguments(diff))
        outcome.ledgerfs_seconds = time.perf_counter() - started
        outcome.ledgerfs_applied = not result.is_error
        if result.is_error:
            block = result.content[0]
            outcome.error = getattr(block, "text", "")[:500]
        started = time.perf_counter()
        applied = subprocess.run(
            ["git", "apply", "--binary", "-"],
            cwd=self.oracle,
            env=GIT_ENV,
            input=diff,
            capture_output=True,
            check=False,
        )
        outcome.git_seconds = time.perf_counter() - started
        outcome.git_applied = applied.returncode == 0
        got, oracle = snapshot(self.work), snapshot(self.oracle)
        if outcome.ledgerfs_applied != outcome.git_applied:
            outcome.detail = [f"git apply: {applied.stderr.decode(errors='replace')[:300]}"]
        elif outcome.git_applied:
            checkout(self.oracle, commit)
            wanted = snapshot(self.oracle)
            outcome.detail = tree_difference(got, wanted) + [
                "oracle: " + line for line in tree_difference(oracle, wanted)
            ]
            outcome.agree = got == wanted == oracle
        else:
            outcome.detail = tree_difference(got, before)
            outcome.agree = got == before
        return outcome


@asynccontextmanager
async def replayer(repo: Path, scratch: Path) -> AsyncIterator[Replayer]:
    """A Replayer with its clones made and its server running, stopped on exit."""
    Replayer.prepare(repo, scratch)
    async with Client(Replayer.server(scratch)) as client:
        yield Replayer(repo, scratch, client)


async def replay_history(
    repo: Path, scratch: Path, pairs: Iterable[tuple[str, str]], variants: Sequence[str]
) -> list[Outcome]:
    """Replay every (parent, commit) in every variant; empty diffs are skipped."""
    outcomes = []
    async with replayer(repo, scratch) as r:
        for parent, commit in pairs:
            for variant in variants:
                diff = diff_of(repo, parent, commit, VARIANTS[variant])
                if diff:
                    outcomes.append(await r.replay(parent, commit, variant, diff))
    return outcomes


def _thread_clocks() -> dict[str, float]:
    """CPU seconds each live thread has used, summed by name (numbers stripped)."""
    clocks: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            used = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, ProcessLookupError):
            continue  # it ended between enumerate and the read
        name = re.sub(r"[-_ ]?\d+$", "", thread.name)
        clocks[name] = clocks.get(name, 0.0) + used
    return clocks


async def profile_history(
    repo: Path, scratch: Path, pairs: Iterable[tuple[str, str]], variants: Sequence[str]
) -> dict[str, Any]:
    """The same patches through an in-process engine, twice: wall time and CPU per
    thread first, then the loop thread's hot functions under cProfile (which slows
    what it measures, so the first pass's figures are the ones to quote)."""
    from ledgerfs.engine import Engine, LedgerError

    Replayer.prepare(repo, scratch)
    work = scratch / "work"
    diffs = [
        (parent, diff)
        for parent, commit in pairs
        for variant in variants
        if (diff := diff_of(repo, parent, commit, VARIANTS[variant]))
    ]
    walls: list[float] = []
    loop_cpu = 0.0
    threads: dict[str, float] = {}
    profiler = cProfile.Profile()
    for profiled in (False, True):
        config = {
            "roots": [str(work)],
            "journal": str(scratch / f"profile-{profiled}.db"),
            "durability": "full",
            "auto_occ": "off",
        }
        async with Engine.open(config) as engine:
            session = await engine.session()
            for parent, diff in diffs:
                checkout(work, parent)
                before, cpu0, wall0 = _thread_clocks(), time.thread_time(), time.perf_counter()
                if profiled:
                    profiler.enable()
                with suppress(LedgerError):
                    await session.call("apply_patch", patch_arguments(diff))
                if profiled:
                    profiler.disable()
                    continue
                walls.append(time.perf_counter() - wall0)
                loop_cpu += time.thread_time() - cpu0
                for name, used in _thread_clocks().items():
                    threads[name] = threads.get(name, 0.0) + used - before.get(name, used)
    count = max(1, len(walls))
    threads.pop(threading.current_thread().name, None)  # the loop: time.thread_time above
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
    return {
        "patches": len(walls),
        "wall_ms": {
            "median": round(median(walls) * 1e3, 3) if walls else None,
            "mean": round(sum(walls) / count * 1e3, 3),
        },
        "cpu_ms_per_patch": {
            "event loop": round(loop_cpu / count * 1e3, 3),
            **{
                re.sub(r" /.*", "", name): round(used / count * 1e3, 3)
                for name, used in sorted(threads.items())
            },
        },
        "hot_functions": out.getvalue(),
    }


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Agreement counts and per-patch times (ms) of both sides."""
    applied = [o for o in outcomes if o.ledgerfs_applied and o.git_applied]
    figures: dict[str, Any] = {
        "patches": len(outcomes),
        "agree": sum(o.agree for o in outcomes),
        "both_applied": len(applied),
        "both_refused": sum(not o.ledgerfs_applied and not o.git_applied for o in outcomes),
        "disagree": [
            {"commit": o.commit, "variant": o.variant, "detail": o.detail[:5], "error": o.error}
            for o in outcomes
            if not o.agree
        ],
    }
    for side in ("ledgerfs", "git"):
        times = [getattr(o, f"{side}_seconds") * 1e3 for o in applied]
        if times:
            figures[f"{side}_ms"] = {
                "median": round(median(times), 3),
                "p90": round(_percentile(times, 0.9), 3),
                "mean": round(sum(times) / len(times), 3),
            }
    if applied:
        ratios = [o.ledgerfs_seconds / o.git_seconds for o in applied if o.git_seconds]
        figures["ledgerfs_vs_git_median_ratio"] = round(median(ratios), 3)
    return figures


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse arguments, replay, print the figures and optionally write JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("repo", type=Path, help="a local git repository")
    parser.add_argument("--commits", type=int, default=300, help="how many recent commits")
    parser.add_argument("--variants", default="plain,U1,M", help="comma-separated: plain,U1,M")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    parser.add_argument(
        "--profile", action="store_true", help="then profile the same patches in-process"
    )
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - VARIANTS.keys()
    if unknown:
        parser.error(f"unknown variants: {sorted(unknown)}")
    repo = args.repo.resolve()
    pairs = commits_of(repo, args.commits)
    # On the repository's file system, not a tmpfs: fsync costs what it costs there.
    folder = bench_folder(args.dir)
    scratch = Path(tempfile.mkdtemp(prefix="replay-", dir=folder))
    try:
        outcomes = anyio.run(replay_history, repo, scratch / "mcp", pairs, variants)
        profile = None
        if args.profile:
            profile = anyio.run(profile_history, repo, scratch / "profile", pairs, variants)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    figures = report(outcomes)
    if profile is not None:
        figures["profile"] = profile
    summary = {k: v for k, v in figures.items() if k not in ("disagree", "profile")}
    print(f"{len(pairs)} commits of {repo.name}, variants {','.join(variants)}")
    for key, value in summary.items():
        print(f"  {key}: {value}")
    for item in figures["disagree"][:20]:
        print(
            f"  disagree {item['commit'][:10]} {item['variant']}: {item['detail']} {item['error']}"
        )
    if profile is not None:
        print(f"in-process: {profile['patches']} patches, wall ms {profile['wall_ms']}")
        print(f"  CPU ms per patch by thread: {profile['cpu_ms_per_patch']}")
        print(profile["hot_functions"])
    if args.json:
        write_json(args.json, {"machine": machine_info(folder), "figures": figures})
    return figures


if __name__ == "__main__":
    main()
