"""Edits that land: calls an agent following the envelopes needs, over the edit corpus.

Every case of ``tests/edit_corpus.py`` (edits as agents really send them: drifted
indentation, spaces for tabs, dropped trailing spaces, LF edits of CRLF files,
straight quotes for curly ones, chained edits, a block found in two places, a
misremembered line) is played by a scripted agent against a real server over
MCP stdio, each case on a fresh file:

- it sends its edits as they are (with the mode's arguments and the case's);
- on a VALIDATION that lists ``candidates`` it copies the one it means into
  ``old_text`` and makes ``new_text`` from it by the same fix, and calls again;
- on OCC_MISMATCH it reads the file and calls again with the new hash;
- on any other refusal it reads the file and sends the edits it meant,
  copied exactly (``fixed``);
- a successful call ends the case: the file is compared whole with the one
  meant, and a difference is a wrong write (the agent believes it landed).

Modes: ``ledgerfs_exact`` (``match`` left at ``exact``), ``ledgerfs_loose``
(``match: "loose"``), and ``reference`` (``@modelcontextprotocol/server-filesystem``,
started as ``benchmarks/bench_server.py`` starts it; its ``edit_file`` takes
``{oldText, newText}`` and its refusals are read as "read the file and resend").
Figures: ``calls_to_land`` (the mean calls per case, reads included, until the
case lands or the agent stops) and ``wrong_writes`` (cases whose file ended
other than meant), for each mode. The counts are exact: no timing is involved.

    python -m benchmarks.bench_landing [--json FILE] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.edit_corpus import CASES, Case

from ._stats import write_json
from .bench_server import ledgerfs_command, reference_command

#: The arguments each ledgerfs mode adds to every edit_file call.
MODES: dict[str, dict[str, Any]] = {
    "ledgerfs_exact": {},
    "ledgerfs_loose": {"match": "loose"},
}
#: An agent gives up after this many calls on one case.
MAX_CALLS = 6

Call = Callable[[str, dict[str, Any]], Awaitable[tuple[bool, dict[str, Any]]]]


class Outcome(msgspec.Struct, kw_only=True):
    """How one case went for one mode."""

    case: str
    mode: str
    calls: int = 0
    landed: bool = False
    wrong_write: bool = False
    #: Calls sent with a candidate's text copied into old_text.
    copied: int = 0
    #: Reads the agent made because an envelope gave it nothing to copy.
    reads: int = 0
    loose_matches: list[dict[str, Any]] = []
    codes: list[str] = []


def session_call(session: ClientSession) -> Call:
    """A call through an SDK session: (is_error, the structured or parsed result)."""

    async def call(tool: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        result = await session.call_tool(tool, arguments)
        error = bool(getattr(result, "isError", False) or getattr(result, "is_error", False))
        body = getattr(result, "structuredContent", None) or getattr(
            result, "structured_content", None
        )
        if body is None:
            text = "".join(getattr(block, "text", "") for block in result.content)
            try:
                body = msgspec.json.decode(text)
            except msgspec.DecodeError:
                body = {"text": text}
        return error, body if isinstance(body, dict) else {"value": body}

    return call


def _edits(pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"old_text": old, "new_text": new} for old, new in pairs]


def _chosen(candidates: list[dict[str, Any]], line: int | None) -> dict[str, Any]:
    if line is not None:
        for candidate in candidates:
            if candidate["line"] <= line <= candidate["end_line"]:
                return candidate
    return candidates[0]


async def land_ledgerfs(
    call: Call, root: Path, case: Case, mode: str, folder: str = "."
) -> Outcome:
    """Play `case` against ledgerfs as an agent following its envelopes would, on
    `case.path` in `folder` (relative to the served `root`, which must exist)."""
    relative = f"{folder}/{case.path}"
    path = root / relative
    path.write_bytes(case.before.encode("utf-8"))
    outcome = Outcome(case=case.name, mode=mode)
    arguments: dict[str, Any] = {
        "path": relative,
        "edits": _edits(case.edits),
        **MODES[mode],
        **case.options,
    }
    if case.expected_hash or case.other_change:
        _, read = await call("read_file", {"path": relative})
        arguments["expected_hash"] = read["content_hash"]
    if case.other_change:
        old, new = case.other_change
        path.write_bytes(case.before.replace(old, new, 1).encode("utf-8"))
    while outcome.calls < MAX_CALLS:
        before = path.read_bytes()
        outcome.calls += 1
        error, body = await call("edit_file", arguments)
        if not error:
            outcome.loose_matches = body.get("loose_matches", [])
            outcome.landed = path.read_bytes() == case.expected.encode("utf-8")
            outcome.wrong_write = not outcome.landed
            return outcome
        if path.read_bytes() != before:
            outcome.wrong_write = True  # a refusal must change nothing
        envelope = body["error"]
        outcome.codes.append(envelope["code"])
        details = envelope.get("details") or {}
        copied = _copy_candidate(arguments, details, case)
        if copied:
            outcome.copied += 1
            continue
        outcome.calls += 1
        outcome.reads += 1
        _, read = await call("read_file", {"path": relative})
        arguments["expected_hash"] = read["content_hash"]
        if envelope["code"] != "OCC_MISMATCH":
            arguments["edits"] = _edits(case.fixed)
    return outcome


def _copy_candidate(arguments: dict[str, Any], details: dict[str, Any], case: Case) -> bool:
    """Copy the candidate the agent means into the failing edit; False when there is none."""
    candidates = details.get("candidates")
    field = re.fullmatch(r"edits\[(\d+)\]\.old_text", str(details.get("field", "")))
    if not candidates or field is None:
        return False
    index = int(field.group(1))
    text = _chosen(candidates, case.pick_line)["text"]
    old, new = case.fixed[index]
    if old not in text:
        return False
    arguments["edits"][index] = {"old_text": text, "new_text": text.replace(old, new, 1)}
    return True


async def land_reference(call: Call, root: Path, case: Case) -> Outcome:
    """Play `case` against the reference server: refused edits are read and resent."""
    path = root / case.path
    path.write_bytes(case.before.encode("utf-8"))
    outcome = Outcome(case=case.name, mode="reference")
    if case.other_change:
        old, new = case.other_change
        path.write_bytes(case.before.replace(old, new, 1).encode("utf-8"))
    pairs = case.edits
    while outcome.calls < MAX_CALLS:
        before = path.read_bytes()
        outcome.calls += 1
        edits = [{"oldText": old, "newText": new} for old, new in pairs]
        error, _ = await call("edit_file", {"path": str(path), "edits": edits})
        if not error:
            outcome.landed = path.read_bytes() == case.expected.encode("utf-8")
            outcome.wrong_write = not outcome.landed
            return outcome
        if path.read_bytes() != before:
            outcome.wrong_write = True
        outcome.codes.append("error")
        outcome.calls += 1
        outcome.reads += 1
        read_error, _ = await call("read_text_file", {"path": str(path)})
        if read_error:
            await call("read_file", {"path": str(path)})
        pairs = case.fixed
    return outcome


async def run_mode(argv: list[str], mode: str, folder: Path) -> list[Outcome]:
    """Start a server on a fresh root under `folder` and play every case."""
    root, state = folder / mode / "root", folder / mode / "state"
    root.mkdir(parents=True)
    state.mkdir(parents=True)
    root = root.resolve()
    env = {**os.environ, "LEDGERFS_STATE_DIR": str(state)}
    extra = ["--auto-occ", "off"] if mode != "reference" else []
    params = StdioServerParameters(
        command=argv[0], args=[*argv[1:], *extra, str(root)], env=env, cwd=str(root)
    )
    outcomes: list[Outcome] = []
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            call = session_call(session)
            for case in CASES:
                if mode == "reference":
                    outcomes.append(await land_reference(call, root, case))
                else:
                    outcomes.append(await land_ledgerfs(call, root, case, mode))
    return outcomes


def figures(outcomes: list[Outcome]) -> dict[str, dict[str, float | int]]:
    """`calls_to_land` and `wrong_writes` for each mode played."""
    modes: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        modes.setdefault(outcome.mode, []).append(outcome)
    return {
        mode: {
            "calls_to_land": round(sum(o.calls for o in played) / len(played), 3),
            "wrong_writes": sum(o.wrong_write for o in played),
            "not_landed": sum(not o.landed for o in played),
            "cases": len(played),
        }
        for mode, played in modes.items()
    }


async def run(folder: Path, *, verbose: bool = True) -> tuple[list[Outcome], dict[str, str]]:
    """Every mode that can run here over the corpus, and why the others cannot."""
    ours, why_not_ours = ledgerfs_command()
    reference, why_not_reference = reference_command()
    skipped: dict[str, str] = {}
    outcomes: list[Outcome] = []
    if ours is None:
        skipped.update(dict.fromkeys(MODES, why_not_ours))
    else:
        for mode in MODES:
            outcomes += await run_mode(ours, mode, folder)
    if reference is None:
        skipped["reference"] = why_not_reference
    else:
        outcomes += await run_mode(reference, "reference", folder)
    if verbose:
        for outcome in outcomes:
            state = (
                "wrong write"
                if outcome.wrong_write
                else "landed"
                if outcome.landed
                else "not landed"
            )
            print(f"{outcome.mode:16} {outcome.case:40} {outcome.calls} calls  {state}")
        for mode, why in skipped.items():
            print(f"{mode}: skipped: {why}", file=sys.stderr)
    return outcomes, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures and every case here")
    parser.add_argument("--dir", type=Path, help="play the cases in this folder (kept)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = options.dir or Path(scratch)
        outcomes, skipped = anyio.run(run, folder)
    result = figures(outcomes)
    for mode, figure in result.items():
        print(
            f"{mode:16} calls_to_land {figure['calls_to_land']:.2f}  "
            f"wrong_writes {figure['wrong_writes']}  not_landed {figure['not_landed']} "
            f"of {figure['cases']}"
        )
    if options.json:
        write_json(
            options.json,
            {
                "figures": result,
                "skipped": skipped,
                "cases": [msgspec.to_builtins(o) for o in outcomes],
            },
        )


if __name__ == "__main__":
    main()
