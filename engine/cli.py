"""The `ledgerfs` command: serve the MCP tools, and inspect or repair the journal.

    ledgerfs serve ROOT... [policy flags] [--http HOST:PORT] [--roots-mode M] [--tools a,b]
    ledgerfs log [PATH] [--limit N]      ledgerfs show TX      ledgerfs undo TX
    ledgerfs recover    ledgerfs verify    ledgerfs gc [--keep-days D] [--keep-last N]

`serve` takes its roots as positional arguments; the other commands take
`--root DIR` (repeatable, default: the current folder) and `--journal PATH`.
Every command only calls the library. A failure prints the envelope's message and
suggestion to stderr (the envelope JSON itself with `--json`) and exits 1.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn

import anyio
import msgspec

from . import TOOLS, Code, Engine, LedgerError, load_config
from .maintenance import gc, show, verify

__all__ = ["main"]


def _hosts(value: str) -> list[str]:
    return [h.strip() for h in value.split(",") if h.strip()]


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def _add_engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--journal", metavar="PATH", help="journal file (default ROOT/.ledgerfs/journal.db)"
    )
    p.add_argument(
        "--durability", choices=["full", "normal"], default=None, help="fsync policy (default full)"
    )
    p.add_argument("--json", action="store_true", help="print results and envelopes as JSON")


def _add_root_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--root",
        dest="roots",
        action="append",
        metavar="DIR",
        help="an allowed root (repeatable; default: the current folder)",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="ledgerfs",
        description="A journaled, undoable file-mutation engine and its MCP tool server.",
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve the MCP tools over stdio or Streamable HTTP")
    serve.add_argument("roots", nargs="*", metavar="ROOT", help="folders the tools may use")
    serve.add_argument("--readonly", action="store_true", help="refuse every mutating call")
    serve.add_argument("--allow-secrets", action="store_true", help="allow .env, keys, ...")
    serve.add_argument("--auto-occ", choices=["off", "warn", "block"], default=None)
    serve.add_argument("--mutation-budget", type=int, metavar="N", default=None)
    serve.add_argument("--git-remote-allow", type=_hosts, metavar="HOSTS", default=None)
    serve.add_argument("--http", type=_host_port, metavar="HOST:PORT", default=None)
    serve.add_argument(
        "--roots-mode",
        choices=["replace", "union", "ignore"],
        default="ignore",
        help="how the client's MCP roots combine with ROOT... (default ignore)",
    )
    serve.add_argument(
        "--tools",
        type=_hosts,
        metavar="a,b,...",
        default=None,
        help=f"serve only these tools (of: {', '.join(TOOLS)})",
    )
    _add_engine_options(serve)

    log = sub.add_parser("log", help="show the journal's transactions, newest first")
    log.add_argument("path", nargs="?", help="only transactions touching this path")
    log.add_argument("--limit", type=int, default=20, metavar="N")
    show_p = sub.add_parser("show", help="show a transaction's diff")
    show_p.add_argument("transaction", type=int, metavar="TX")
    undo = sub.add_parser("undo", help="undo a transaction as a new one")
    undo.add_argument("transaction", type=int, metavar="TX")
    sub.add_parser("recover", help="recover what a killed process left; report it")
    sub.add_parser("verify", help="check the journal and every journaled file")
    gc_p = sub.add_parser("gc", help="drop old finished transactions and unused images")
    gc_p.add_argument("--keep-days", type=float, default=None, metavar="D")
    gc_p.add_argument("--keep-last", type=int, default=None, metavar="N")
    for p in (log, show_p, undo, sub.choices["recover"], sub.choices["verify"], gc_p):
        _add_root_option(p)
        _add_engine_options(p)
    return top


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    """The engine configuration the flags describe (only the flags given)."""
    roots = args.roots if args.command == "serve" else (args.roots or [os.getcwd()])
    raw: dict[str, Any] = {"roots": [os.path.abspath(os.path.expanduser(r)) for r in roots]}
    pairs = {
        "journal": args.journal,
        "durability": args.durability,
        "readonly": getattr(args, "readonly", False) or None,
        "allow_secrets": getattr(args, "allow_secrets", False) or None,
        "auto_occ": getattr(args, "auto_occ", None),
        "mutation_budget": getattr(args, "mutation_budget", None),
        "git_remote_allow": getattr(args, "git_remote_allow", None),
        "tools": getattr(args, "tools", None),
    }
    raw.update({k: v for k, v in pairs.items() if v is not None})
    return raw


def _err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _fail(error: LedgerError, as_json: bool) -> NoReturn:
    if as_json:
        print(error.envelope.to_json(), file=sys.stderr, flush=True)
    else:
        body = error.envelope.error
        _err(f"error: {body.code}: {body.message}")
        if body.path:
            _err(f"  path: {body.path}")
        _err(f"  suggestion: {body.suggestion}")
    raise SystemExit(1)


def _emit(value: msgspec.Struct | dict[str, Any] | list[Any]) -> None:
    print(msgspec.json.encode(value).decode(), flush=True)


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


# Commands ---------------------------------------------------------------------


async def _serve(args: argparse.Namespace) -> None:
    from .server import open_hub, serve_http, serve_stdio

    load_config(config_of(args))  # ROOTS_EMPTY and bad flags before anything opens
    async with open_hub(config_of(args), args.roots_mode) as hub:
        for outcome in hub.engine.recovered:
            _err(f"recovered transaction {outcome.transaction}: {outcome.outcome}")
        if args.http is None:
            await serve_stdio(hub)
        else:
            host, port = args.http
            await serve_http(hub, host, port, on_ready=lambda url: _err(f"serving {url}"))


async def _log(engine: Engine, args: argparse.Namespace) -> None:
    arguments: dict[str, Any] = {"limit": args.limit}
    if args.path:
        arguments["path"] = args.path
    session = await engine.session("cli")
    result = await session.call("history", arguments)
    if args.json:
        _emit(result)
        return
    entries = msgspec.to_builtins(result)["entries"]
    if not entries:
        print("no transactions")
        return
    print(f"{'TX':>6}  {'WHEN':19}  {'STATE':11}  {'FILES':>5}  SUMMARY")
    for e in entries:
        state = e["state"] if not e["outcome"] else f"{e['state']}:{e['outcome']}"
        summary = e["summary"] + (f" (undo of {e['undo_of']})" if e["undo_of"] else "")
        print(
            f"{e['transaction']:>6}  {_when(e['created_at']):19}  {state:11}  "
            f"{len(e['mutations']):>5}  {summary}"
        )


async def _show(engine: Engine, args: argparse.Namespace) -> None:
    diff = await show(engine, args.transaction)
    if args.json:
        _emit({"transaction": args.transaction, "diff": diff})
    else:
        sys.stdout.write(diff)


async def _undo(engine: Engine, args: argparse.Namespace) -> None:
    session = await engine.session("cli")
    result = await session.call("undo", {"transaction": args.transaction})
    if args.json:
        _emit(result)
        return
    data = msgspec.to_builtins(result)
    print(f"undid transaction {args.transaction} as transaction {data['transaction']}")
    sys.stdout.write(data["diff"])


async def _recover(engine: Engine, args: argparse.Namespace) -> None:
    outcomes = engine.recovered
    if args.json:
        _emit({"recovered": msgspec.to_builtins(outcomes)})
        return
    if not outcomes:
        print("nothing to recover: every transaction had finished")
        return
    for o in outcomes:
        verb = "rolled back" if o.action == "roll_back" else "rolled forward"
        print(
            f"transaction {o.transaction}: {verb} ({o.outcome}), {len(o.restored)} files restored"
        )
        for item in o.not_restored:
            print(f"  not restored: {item.get('path', '?')}: {item.get('reason', '')}")


async def _verify(engine: Engine, args: argparse.Namespace) -> None:
    report = await verify(engine, progress=lambda line: _err(f"verify: {line}"))
    if args.json:
        _emit(report)
    else:
        print(
            f"journal: {'ok' if report.journal_ok else 'DAMAGED'} "
            f"({report.blobs_checked} blobs checked)"
        )
        for line in (
            report.problems
            + [f"missing blob {h}" for h in report.missing_blobs]
            + [f"corrupt blob {h}" for h in report.corrupt_blobs]
        ):
            print(f"  {line}")
        print(
            f"files: {report.files_checked} checked, {len(report.drifted)} changed outside ledgerfs"
        )
        for d in report.drifted:
            print(f"  {d.path}: {d.reason} (last transaction {d.transaction})")
    if not report.ok:
        raise SystemExit(2)


async def _gc(engine: Engine, args: argparse.Namespace) -> None:
    result = await gc(
        engine, args.keep_days, args.keep_last, progress=lambda line: _err(f"gc: {line}")
    )
    if args.json:
        _emit(result)
    else:
        print(
            f"dropped {result.transactions_dropped} transactions and {result.blobs_dropped} "
            f"images ({result.bytes_freed} bytes)"
        )


_COMMANDS: dict[str, Callable[[Engine, argparse.Namespace], Awaitable[None]]] = {
    "log": _log,
    "show": _show,
    "undo": _undo,
    "recover": _recover,
    "verify": _verify,
    "gc": _gc,
}


async def _run(args: argparse.Namespace) -> None:
    if args.command == "serve":
        await _serve(args)
        return
    # Raised outside the engine's context: an exception leaving `Engine.open`'s
    # body comes out of its task group wrapped in an ExceptionGroup.
    failed: LedgerError | None = None
    async with Engine.open(config_of(args)) as engine:
        try:
            await _COMMANDS[args.command](engine, args)
        except LedgerError as exc:
            failed = exc
    if failed is not None:
        raise failed


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `ledgerfs` console script."""
    args = parser().parse_args(argv)
    try:
        anyio.run(_run, args)
    except LedgerError as exc:
        _fail(exc, args.json)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except (OSError, ValueError) as exc:
        _fail(LedgerError(Code.TOOL_UNAVAILABLE, f"{type(exc).__name__}: {exc}"), args.json)
