"""The `ledgerfs` command: serve the MCP tools, and inspect or repair the journal.

    ledgerfs serve ROOT... [policy flags] [--http HOST:PORT] [--roots-mode M] [--tools a,b]
    ledgerfs log [PATH] [--limit N] [--session ID] [--since WHEN] [--until WHEN]
                 [--format table|jsonl]
    ledgerfs sessions [--limit N]
    ledgerfs show TX    ledgerfs undo TX    ledgerfs recover
    ledgerfs verify [--full] [--export FILE]
    ledgerfs rewind (--session ID | --checkpoint ID | --after TX) [--all-sessions]
                    [--path P]... [--skip-conflicts] [--dry-run]
    ledgerfs gc [--keep-days D] [--keep-last N] [--dry-run] [--yes]
    ledgerfs ui [ROOT...] [--journal PATH] [--port N] [--open] [--readonly]

`serve` takes its roots as arguments. The journal commands find the workspace's
journal by walking up from the current folder, as git finds a repository (or take
`--root DIR` / `--journal PATH`), and never create one. Every command only calls
the library; this module only parses, renders and maps errors to exit codes. A
failure prints the envelope's message and a next step that names a `ledgerfs`
command (never an MCP tool) to stderr, or the envelope JSON with `--json`.
"""

from __future__ import annotations

import datetime
import errno
import logging
import os
import re
import sys
import time
import webbrowser
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn, TextIO, TypeVar, get_args

import anyio
import anyio.to_thread
import click
import msgspec
from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
from rich.table import Table
from rich.text import Text

from ..journal import Relocation
from . import (
    TOOLS,
    Code,
    Engine,
    ErrorBody,
    Inspection,
    LedgerError,
    Log,
    LogEntry,
    LogFilter,
    SessionList,
    TransactionView,
    check_export,
    escape_text,
    load_config,
    locate,
    reply_json,
)
from .config import Durability
from .maintenance import VerifyReport, gc

if TYPE_CHECKING:
    from ..journal import Relocation
    from .exposure import HttpExposure

__all__ = ["cli", "cli_suggestion", "main"]

T = TypeVar("T")

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# -- errors ----------------------------------------------------------------------

#: The next step a shell user can take, for codes whose table suggestion speaks to an
#: MCP client (it names a tool). The code table itself stays in engine/errors.py.
_CLI_NEXT_STEP: dict[Code, str] = {
    Code.NOT_ALLOWED: "give a path inside the workspace's roots (see --root)",
    Code.NOT_FOUND: "check the path (a relative one starts at the current folder)",
    Code.OCC_MISMATCH: (
        "the file changed since that transaction; look at it (`ledgerfs log PATH`), "
        "then undo a later transaction first or edit it by hand"
    ),
    Code.STALE_GIT: "look at `git status`, then run the command again",
}
# Tool names such as read_file; the one-word ones (undo, batch) are also plain English.
_TOOL_NAME = re.compile(r"\b(" + "|".join(t for t in TOOLS if "_" in t) + r")\b")


def cli_suggestion(body: ErrorBody) -> str:
    """The envelope's suggestion as a shell user can follow it.

    An unknown transaction points at `ledgerfs log`; a suggestion naming an MCP tool
    is replaced by the CLI's next step; any other suggestion is kept as it is.

    >>> from ledgerfs.engine import LedgerError, Code
    >>> cli_suggestion(LedgerError(Code.NOT_FOUND, details={"transaction": 9}).envelope.error)
    'list the transactions with `ledgerfs log`'
    """
    if body.code is Code.NOT_FOUND and "transaction" in body.details:
        return "list the transactions with `ledgerfs log`"
    if body.details.get("reason") == "rewind_conflict":
        return "pass --skip-conflicts to leave those files as they are, or --path for the others"
    if body.code in _CLI_NEXT_STEP and (
        _TOOL_NAME.search(body.suggestion) or body.code is Code.OCC_MISMATCH
    ):
        return _CLI_NEXT_STEP[body.code]
    if _TOOL_NAME.search(body.suggestion):
        return "see `ledgerfs --help` for the commands that inspect and repair the journal"
    return body.suggestion


def _for_cli(error: LedgerError) -> LedgerError:
    """`error` with its suggestion worded for the shell (retryable/recovery untouched)."""
    body = error.envelope.error
    wanted = cli_suggestion(body)
    if wanted != body.suggestion:
        error.envelope.error = msgspec.structs.replace(body, suggestion=wanted)
    return error


def _stderr() -> Console:
    return _unwrapped_when_piped(Console(stderr=True, highlight=False))


def _unwrapped_when_piped(console: Console) -> Console:
    # A pipe has no width: lines are kept whole for whatever reads them.
    if not console.is_terminal:
        console.width = 240
    return console


def _report(error: LedgerError, as_json: bool) -> None:
    """Print the envelope, its suggestion worded for the shell, to stderr."""
    error = _for_cli(error)
    if as_json:
        click.echo(error.envelope.to_json(), err=True)
        return
    body = error.envelope.error
    err = _stderr()
    err.print(Text.assemble(("error", "bold red"), f": {body.code}: {body.message}"))
    if body.path:
        err.print(Text(f"  path: {body.path}"))
    err.print(Text.assemble("  ", ("suggestion", "bold"), f": {body.suggestion}"))


def _fail(error: LedgerError, as_json: bool) -> NoReturn:
    _report(error, as_json)
    raise SystemExit(1)


def _run(
    as_json: bool, job: Callable[[], Awaitable[T]], backend_options: dict[str, Any] | None = None
) -> T:
    """Run `job` on an event loop; every failure becomes an envelope and exit 1."""
    try:
        return anyio.run(job, backend_options=backend_options)
    except LedgerError as exc:
        _fail(exc, as_json)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except (OSError, ValueError) as exc:
        _fail(LedgerError(Code.TOOL_UNAVAILABLE, f"{type(exc).__name__}: {exc}"), as_json)


# -- rendering ---------------------------------------------------------------------


def _stdout() -> Console:
    """Colour on a terminal only (rich also honours NO_COLOR); unwrapped when piped."""
    return _unwrapped_when_piped(Console(highlight=False))


def _emit(value: object) -> None:
    # Names that are not UTF-8 print in the escaped form the tools accept back.
    click.echo(reply_json(value))


def _clock(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


_STATE_STYLE = {
    "committed": "green",
    "rolled_back": "red",
    "recovered": "yellow",
    "pending": "magenta",
}


def _state(entry: LogEntry) -> Text:
    label = entry.state if not entry.outcome else f"{entry.state}:{entry.outcome}"
    return Text(label, style=_STATE_STYLE.get(entry.state, ""))


def _diff_line(line: str) -> Text:
    if line.startswith(("+++", "---")):
        return Text(line, style="bold")
    if line.startswith("+"):
        return Text(line, style="green")
    if line.startswith("-"):
        return Text(line, style="red")
    if line.startswith("@@"):
        return Text(line, style="cyan")
    return Text(line)


@contextmanager
def _paged(console: Console, lines: int) -> Iterator[None]:
    """Send what is printed inside through a pager when it is longer than the terminal."""
    if not (console.is_terminal and lines > console.height):
        yield
        return
    # less: quit when it fits, keep colours, leave the text on screen afterwards.
    os.environ.setdefault("LESS", "-FRX")
    with console.pager(styles=True):
        yield


def _print_diff(console: Console, diff: str) -> None:
    for line in diff.splitlines():
        console.print(_diff_line(line), soft_wrap=True)


@contextmanager
def _progress(label: str) -> Iterator[Callable[[str, int, int | None], None]]:
    """A progress bar on stderr while work runs (nothing when stderr is not a terminal)."""
    err = _stderr()
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
    task = bar.add_task(label, total=None)

    def advance(what: str, done: int, total: int | None) -> None:
        bar.update(task, description=f"{label}: {what}", completed=done, total=total)

    with bar:
        yield advance


# -- options -----------------------------------------------------------------------


def _split(_ctx: click.Context, _param: click.Parameter, value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


def _host_port(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[str, int] | None:
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def age_seconds(text: str) -> float | None:
    """Seconds in an age such as `90m`, `12h`, `3d` or `2w`; None if `text` is not one.

    >>> age_seconds("90m"), age_seconds("2d"), age_seconds("2026-12-01")
    (5400.0, 172800.0, None)
    """
    match = _AGE.match(text.strip())
    return float(match.group(1)) * _UNIT[match.group(2)] if match else None


class When(click.ParamType[float, Any]):
    """A moment: an ISO date or date-time (local time), or an age before now."""

    name = "WHEN"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        age = age_seconds(str(value))
        if age is not None:
            return time.time() - age
        try:
            return datetime.datetime.fromisoformat(str(value)).timestamp()
        except ValueError:
            self.fail(
                f"{value!r} is neither an ISO date/time nor an age like 12h or 3d", param, ctx
            )


def _journal_options(command: Callable[..., T]) -> Callable[..., T]:
    """--root, --journal and --json: where the journal is, and how to answer."""
    command = click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print the result as JSON on stdout, and a failure as the envelope JSON on stderr.",
    )(command)
    command = click.option(
        "--journal",
        metavar="PATH",
        help="The journal file. Default: ROOT/.ledgerfs/journal.db of the workspace found.",
    )(command)
    command = click.option(
        "--root",
        "roots",
        multiple=True,
        metavar="DIR",
        help=(
            "The workspace's root (repeatable; the roots its journal recorded are added). "
            "Default: the nearest folder at or above the current one that holds "
            ".ledgerfs/journal.db or a pointer to its workspace's journal."
        ),
    )(command)
    return command


def _config(roots: Sequence[str], journal: str | None) -> dict[str, Any]:
    located = locate(list(roots) or None, journal, os.getcwd())
    return {"roots": located.roots, "journal": located.journal}


# -- the server's log ------------------------------------------------------------------

_log = logging.getLogger(__name__)

_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Log:
    """Where `ledgerfs serve` logs, set up once, here at the edge (the engine only names
    its loggers; an embedder's own configuration decides for them).

    Only the `ledgerfs` loggers go there: the MCP SDK's and uvicorn's keep Python's
    defaults, since their messages may quote a request's arguments.
    """

    def __init__(self, level: str, path: str | None) -> None:
        self.level = level
        self.path = path

    def configure(self) -> None:
        """Send the `ledgerfs` loggers to stderr or the file; VALIDATION when the file
        cannot be opened."""
        stream = sys.stderr if self.path is None else self._open()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter(_LOG_FORMAT))
        logger = logging.getLogger("ledgerfs")
        logger.handlers[:] = [handler]
        logger.setLevel(self.level.upper())
        logger.propagate = False

    def _open(self) -> TextIO:
        assert self.path is not None
        path = os.path.abspath(os.path.expanduser(self.path))
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            raise LedgerError(
                Code.VALIDATION,
                f"The log file {path} cannot be opened: {exc.strerror}.",
                path=path,
                details={"field": "log_file", "errno": errno.errorcode.get(exc.errno or 0)},
                suggestion="give --log-file a path in a folder this user can write",
            ) from exc
        # Line-buffered: an entry is on disk when it is logged, whatever happens next.
        return open(fd, "a", encoding="utf-8", errors="backslashreplace", buffering=1)


# -- the commands --------------------------------------------------------------------


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="ledgerfs", prog_name="ledgerfs", message="%(prog)s %(version)s")
def cli() -> None:
    """A journaled, undoable file-mutation engine and its MCP tool server.

    `ledgerfs serve` serves folders to an MCP client; the other commands inspect and
    repair the journal of the workspace you are in.
    """


@cli.command(context_settings=CONTEXT)
@click.argument("roots", nargs=-1, metavar="ROOT...")
@click.option("--readonly", is_flag=True, help="Refuse every mutating call (READONLY).")
@click.option(
    "--allow-secrets",
    is_flag=True,
    help="Allow .env*, private keys and credential stores (else SECRET_DENIED).",
)
@click.option(
    "--auto-occ",
    type=click.Choice(["off", "warn", "block"]),
    help=(
        "A change to an existing file without expected_hash: allowed (off), allowed with a "
        "warning (warn, the default) or refused with HASH_REQUIRED (block)."
    ),
)
@click.option(
    "--on-stale",
    type=click.Choice(["refuse", "merge"]),
    help=(
        "A change whose expected_hash names an older version the server knows, when the "
        "call gives no on_stale: refused with OCC_MISMATCH (refuse, the default) or merged "
        "onto the file as it is now unless both changed the same lines (merge)."
    ),
)
@click.option(
    "--mutation-budget",
    type=click.IntRange(min=0),
    metavar="N",
    help="Each client session may commit N operations; then BUDGET_EXCEEDED.",
)
@click.option(
    "--max-file-size",
    type=click.IntRange(min=1),
    metavar="BYTES",
    help="Refuse files larger than BYTES (default 50 MiB); stdin lines are capped at 6x this.",
)
@click.option(
    "--git-remote-allow",
    metavar="HOSTS",
    callback=_split,
    help="Comma-separated hosts the issue tools may use (else GH_HOST_DENIED).",
)
@click.option(
    "--durability",
    type=click.Choice(get_args(Durability)),
    help="full: every change survives power loss (default); normal: a killed process.",
)
@click.option(
    "--journal", metavar="PATH", help="The journal file (default ROOT/.ledgerfs/journal.db)."
)
@click.option(
    "--http",
    metavar="HOST:PORT",
    callback=_host_port,
    help="Serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio.",
)
@click.option(
    "--http-token-file",
    metavar="PATH",
    help=(
        "A file (mode 600) holding the bearer token HTTP clients must send; else "
        "$LEDGERFS_HTTP_TOKEN. Required to bind other than 127.0.0.1, ::1 or localhost."
    ),
)
@click.option(
    "--http-allow-host",
    metavar="HOSTS",
    callback=_split,
    help="Comma-separated names clients use to reach the HTTP server (Host and Origin).",
)
@click.option(
    "--roots-mode",
    type=click.Choice(["replace", "union", "ignore"]),
    default="ignore",
    show_default=True,
    help="How the client's MCP roots combine with ROOT...",
)
@click.option(
    "--tools",
    metavar="a,b,...",
    callback=_split,
    help=(
        f"Serve only these tools; others are TOOL_UNAVAILABLE (of: {', '.join(TOOLS)}; "
        "an issue tool also needs --issue-tools)."
    ),
)
@click.option(
    "--issue-tools",
    is_flag=True,
    help=(
        "Serve the issue tools (read and write the repository's GitHub or GitLab issues "
        "with your credentials); off by default (TOOL_UNAVAILABLE, not listed)."
    ),
)
@click.option(
    "--log-file",
    metavar="PATH",
    help="Append the server's log to PATH (created 0600) instead of stderr.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="The least severe log entries kept (info: start, stop, failed checkpoints, "
    "unexpected failures).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print a failure to start as the envelope JSON."
)
def serve(
    roots: tuple[str, ...],
    readonly: bool,
    allow_secrets: bool,
    auto_occ: str | None,
    on_stale: str | None,
    mutation_budget: int | None,
    max_file_size: int | None,
    git_remote_allow: list[str] | None,
    durability: str | None,
    journal: str | None,
    http: tuple[str, int] | None,
    http_token_file: str | None,
    http_allow_host: list[str] | None,
    roots_mode: str,
    tools: list[str] | None,
    issue_tools: bool,
    log_file: str | None,
    log_level: str,
    as_json: bool,
) -> None:
    """Serve the MCP tools on ROOT... over stdio (or Streamable HTTP with --http).

    A server that cannot start (no root, a missing folder, an unreadable journal)
    prints the envelope to stderr and, over stdio, answers the client's handshake
    with it, so the client's error says what is wrong; then it exits 1.
    """
    given = {
        "journal": journal,
        "durability": durability,
        "readonly": readonly or None,
        "allow_secrets": allow_secrets or None,
        "auto_occ": auto_occ,
        "on_stale": on_stale,
        "mutation_budget": mutation_budget,
        "max_file_size": max_file_size,
        "git_remote_allow": git_remote_allow,
        "tools": tools,
        "issue_tools": issue_tools or None,
    }
    raw: dict[str, Any] = {"roots": [os.path.abspath(os.path.expanduser(r)) for r in roots]}
    raw.update({k: v for k, v in given.items() if v is not None})
    from .stdio import loop_options

    exposure = None
    if http is not None:
        from .exposure import plan_exposure, read_token

        # Before anything opens: a bind that needs a token refuses to start without it.
        try:
            token = read_token(http_token_file, os.environ)
            exposure = plan_exposure(*http, token, http_allow_host or ())
        except LedgerError as exc:
            _fail(exc, as_json)
    log = _Log(log_level, log_file)
    _run(as_json, lambda: _serve(raw, roots_mode, exposure, as_json, log), loop_options())


async def _serve(
    raw: dict[str, Any],
    roots_mode: Any,
    http: HttpExposure | None,
    as_json: bool,
    log: _Log,
) -> None:
    from .server import open_hub, serve_http, serve_stdio

    err = _stderr()
    started = False
    try:
        load_config(raw)  # ROOTS_EMPTY and bad flags before anything opens
        log.configure()
        async with open_hub(raw, roots_mode) as hub:
            started = True
            for outcome in hub.engine.recovered:
                err.print(f"recovered transaction {outcome.transaction}: {outcome.outcome}")
            config = hub.engine.config
            transport = "stdio" if http is None else f"http://{http.host}:{http.port}/mcp"
            # Never the whole config: it can hold a GitLab token.
            _log.info(
                "serving roots=%s journal=%s durability=%s transport=%s readonly=%s issue_tools=%s",
                [escape_text(r) for r in hub.engine.workspace.roots],
                escape_text(str(config.journal_path())),
                config.durability,
                transport,
                config.readonly,
                config.issue_tools,
            )
            try:
                if http is None:
                    await serve_stdio(hub)
                else:
                    # The operator sees whether callers need the token (never the token).
                    guarded = " (bearer token required)" if http.token is not None else ""
                    await serve_http(
                        hub, http, on_ready=lambda url: err.print(Text(f"serving {url}{guarded}"))
                    )
            finally:
                _log.info("stopped serving (transport=%s)", transport)
    except LedgerError as exc:
        if started or http is not None or sys.stdin.isatty():
            raise
        # Tell both the operator (stderr) and the stdio client why there is no server.
        from .failedstart import refuse_stdio

        _report(exc, as_json)
        await anyio.to_thread.run_sync(refuse_stdio, exc, abandon_on_cancel=True)
        raise SystemExit(1) from None


@cli.command(context_settings=CONTEXT)
@click.argument("path", required=False)
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(1, 1000),
    default=20,
    show_default=True,
    metavar="N",
    help="Show at most N transactions (the table and --json; jsonl exports them all).",
)
@click.option("--session", metavar="ID", help="Only transactions of this client session.")
@click.option(
    "--since",
    type=When(),
    help="Only transactions made at or after WHEN: an ISO date or time, or an age (90m, 3d).",
)
@click.option("--until", type=When(), help="Only transactions made before WHEN (same forms).")
@click.option(
    "--format",
    "form",
    type=click.Choice(["table", "jsonl"]),
    default="table",
    show_default=True,
    help=(
        "jsonl: export every transaction, one JSON object a line, in the audit chain's"
        " order, with its chain link (`ledgerfs verify --export FILE` checks it)."
    ),
)
@_journal_options
def log(
    path: str | None,
    limit: int,
    session: str | None,
    since: float | None,
    until: float | None,
    form: str,
    roots: tuple[str, ...],
    journal: str | None,
    as_json: bool,
) -> None:
    """List the journal's transactions, newest first (PATH: only those touching it).

    UNDONE BY names the transaction that undid a row; UNDOES, the one a row undid.
    """
    which = LogFilter(
        path=None if path is None else os.path.abspath(path),
        session=session,
        since=since,
        until=until,
        limit=limit,
    )
    if form == "jsonl":
        _export(as_json, roots, journal, which)
        return

    async def job() -> Log:
        async with Inspection.open(_config(roots, journal)) as view:
            if not as_json:
                _note_relocation(view.journal.relocation)
            return await view.log(which)

    found = _run(as_json, job)
    _print_listing(
        as_json, found, len(found.entries), "no transactions", lambda: [_log_table(found)]
    )


def _note_relocation(moved: Relocation | None) -> None:
    """Say on stderr that the journal is read from another place than it recorded."""
    if moved is not None:
        _stderr().print(
            Text(
                f"note: this journal was at {escape_text(moved.previous)} (since"
                f" {_clock(moved.previous_since)}); it is read here, with its paths inside"
                " the roots where the roots are now",
                style="yellow",
            )
        )


@cli.command(context_settings=CONTEXT)
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(1, 1000),
    default=20,
    show_default=True,
    metavar="N",
    help="Show at most N sessions.",
)
@_journal_options
def sessions(limit: int, roots: tuple[str, ...], journal: str | None, as_json: bool) -> None:
    """List the journal's sessions (client connections, hosts' sessions, these
    commands' own), newest first, of every process that used the journal.

    FILES sums the paths each transaction changed. `ledgerfs log --session ID`
    lists a session's transactions.
    """

    async def job() -> SessionList:
        async with Inspection.open(_config(roots, journal)) as view:
            return await view.sessions(limit)

    def shown() -> list[RenderableType]:
        left_out = Text(f"(older sessions left out: --limit {limit})", style="dim")
        return [_sessions_table(found), *([left_out] if found.truncated else [])]

    found = _run(as_json, job)
    _print_listing(as_json, found, len(found.sessions), "no sessions", shown)


def _print_listing(
    as_json: bool,
    found: msgspec.Struct,
    rows: int,
    empty: str,
    shown: Callable[[], list[RenderableType]],
) -> None:
    """A listing as JSON with --json; else what `shown` makes of it, through the
    pager when it is long, or `empty` when it has no rows."""
    if as_json:
        _emit(found)
        return
    console = _stdout()
    if not rows:
        console.print(empty)
        return
    with _paged(console, rows + 4):
        for part in shown():
            console.print(part)


def _sessions_table(found: SessionList) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("SESSION", no_wrap=True, style="bold")
    table.add_column("CLIENT")
    table.add_column("STARTED", no_wrap=True)
    table.add_column("LAST ACTIVITY", no_wrap=True)
    table.add_column("TX", justify="right")
    table.add_column("FILES", justify="right")
    for s in found.sessions:
        client = " ".join(filter(None, (s.client_name, s.client_version)))
        table.add_row(
            Text(s.id),
            Text(client or "-"),
            _clock(s.started),
            _clock(s.last_activity),
            str(s.transactions),
            str(s.files_changed),
        )
    return table


def _log_table(found: Log) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("TX", justify="right", style="bold")
    table.add_column("WHEN", no_wrap=True)
    table.add_column("STATE", no_wrap=True)
    table.add_column("UNDONE BY", justify="right")
    table.add_column("UNDOES", justify="right")
    table.add_column("FILES", justify="right")
    table.add_column("SESSION", no_wrap=True, max_width=12, overflow="ellipsis")
    table.add_column("SUMMARY")
    for e in found.entries:
        table.add_row(
            str(e.transaction),
            _clock(e.created_at),
            _state(e),
            Text(str(e.undone_by), style="yellow") if e.undone_by else "",
            str(e.undo_of) if e.undo_of else "",
            str(len(e.mutations)),
            e.session,
            Text(e.summary),
        )
    return table


@cli.command(context_settings=CONTEXT)
@click.argument("transaction", type=int, metavar="TX")
@_journal_options
def show(transaction: int, roots: tuple[str, ...], journal: str | None, as_json: bool) -> None:
    """Show transaction TX: who made it and when, and its diff from the stored images."""

    async def job() -> TransactionView:
        async with Inspection.open(_config(roots, journal)) as view:
            return await view.show(transaction)

    shown = _run(as_json, job)
    if as_json:
        _emit(shown)
        return
    console = _stdout()
    with _paged(console, shown.diff.count("\n") + 8):
        _print_header(console, shown.transaction)
        _print_diff(console, shown.diff)


def _print_header(console: Console, e: LogEntry) -> None:
    rows: list[tuple[str, Text]] = [
        ("transaction", Text.assemble((str(e.transaction), "bold"), "  ", _state(e))),
        ("time", Text(f"{_clock(e.created_at)} (finished {_clock(e.finished_at)})")),
        ("session", Text(e.session)),
        ("summary", Text(e.summary)),
    ]
    if e.undo_of:
        rows.append(("undoes", Text(str(e.undo_of))))
    if e.undone_by:
        rows.append(("undone by", Text(str(e.undone_by), style="yellow")))
    for name, value in rows:
        console.print(Text.assemble((f"{name:<12}", "dim"), value))
    console.print()


@cli.command(context_settings=CONTEXT)
@click.argument("transaction", type=int, metavar="TX")
@_journal_options
def undo(transaction: int, roots: tuple[str, ...], journal: str | None, as_json: bool) -> None:
    """Undo transaction TX as a new transaction (checked against TX's after images)."""

    async def job() -> Any:
        async with Engine.open(_config(roots, journal)) as engine:
            session = await engine.session("cli")
            return await session.call("undo", {"transaction": transaction})

    result = _run(as_json, job)
    if as_json:
        _emit(result)
        return
    data = msgspec.to_builtins(result)
    console = _stdout()
    console.print(f"undid transaction {transaction} as transaction {data['transaction']}")
    _print_diff(console, data["diff"])


@cli.command(context_settings=CONTEXT)
@click.option("--session", "session_id", metavar="ID", help="Rewind everything session ID did.")
@click.option(
    "--checkpoint",
    type=int,
    metavar="ID",
    help="Rewind what came after checkpoint ID (the session that took it; see --all-sessions).",
)
@click.option(
    "--after",
    type=int,
    metavar="TX",
    help="Rewind what came after transaction TX (TX's session's; see --all-sessions).",
)
@click.option(
    "--all-sessions",
    is_flag=True,
    help="With --checkpoint or --after: every session's transactions, not one session's.",
)
@click.option(
    "--path",
    "paths",
    multiple=True,
    metavar="P",
    help="Only the changes to this file or folder (repeatable).",
)
@click.option(
    "--skip-conflicts",
    is_flag=True,
    help="Leave the files that conflict as they are and rewind the rest.",
)
@click.option("--dry-run", is_flag=True, help="Show what would change and the conflicts only.")
@_journal_options
def rewind(
    session_id: str | None,
    checkpoint: int | None,
    after: int | None,
    all_sessions: bool,
    paths: tuple[str, ...],
    skip_conflicts: bool,
    dry_run: bool,
    roots: tuple[str, ...],
    journal: str | None,
    as_json: bool,
) -> None:
    """Revert a session's changes, or what came after a point, as one new transaction.

    Later changes by other sessions and by people to the same files are kept (each
    file is merged by lines); changes that overlap them are conflicts, listed with who
    made them. The changes are shown first and, on a terminal, confirmed.
    `ledgerfs undo` of the new transaction puts everything back.
    """
    arguments: dict[str, Any] = {
        "checkpoint": checkpoint,
        "after_transaction": after,
        "session": session_id,
        "sessions": "all" if all_sessions else "mine",
        # As the other commands read them: a relative path starts at the current folder.
        "paths": [os.path.abspath(p) for p in paths] or None,
        "on_conflict": "skip" if skip_conflicts else "refuse",
    }
    arguments = {name: value for name, value in arguments.items() if value is not None}

    def job(dry: bool) -> Callable[[], Awaitable[Any]]:
        async def run() -> Any:
            async with Engine.open(_config(roots, journal)) as engine:
                session = await engine.session(
                    await _rewinding_session(engine, after, all_sessions)
                )
                try:
                    return await session.call("rewind", {**arguments, "dry_run": dry})
                except LedgerError as exc:
                    if not as_json:
                        _print_conflicts(_stdout(), exc)
                    raise

        return run

    if as_json:
        _emit(_run(as_json, job(dry_run)))
        return
    console = _stdout()
    preview = msgspec.to_builtins(_run(as_json, job(True)))
    if not preview["rewound"]:
        console.print("nothing to rewind: no transaction in effect matches")
        return
    _print_rewind(console, preview)
    if dry_run:
        return
    if sys.stdin.isatty() and not click.confirm(
        f"Rewind these {preview['rewound_total']} transactions?", err=True
    ):
        _stderr().print("nothing changed")
        raise SystemExit(1)
    done = msgspec.to_builtins(_run(as_json, job(False)))
    console.print(
        f"rewound {done['rewound_total']} transactions as transaction {done['transaction']}"
        f" (undo it with `ledgerfs undo {done['transaction']}`)"
    )


async def _rewinding_session(engine: Engine, after: int | None, all_sessions: bool) -> str:
    """The session a rewind acts as: with --after alone, the session of that transaction
    (its later transactions are the ones rewound); otherwise the command's own."""
    if after is not None and not all_sessions:
        record = await engine.journal.transaction(after)
        if record is not None:
            return record.session
    return "cli"


def _print_rewind(console: Console, result: dict[str, Any]) -> None:
    ids = ", ".join(map(str, result["rewound"]))
    left = result["rewound_total"] - len(result["rewound"])
    more = f" and {left} more" if left else ""
    console.print(
        Text(
            f"rewind would revert {result['rewound_total']} transactions ({ids}{more}), "
            f"changing {result['files_total']} files:",
            style="bold",
        )
    )
    _print_diff(console, result["diff"])
    for skipped in result["skipped"]:
        console.print(
            Text(
                f"left as it is: {skipped['path']} ({skipped['reason']}; by {skipped['by']})",
                style="yellow",
            )
        )


def _print_conflicts(console: Console, error: LedgerError) -> None:
    """The files a refused rewind meets, who changed them, and the hunks that overlap."""
    conflicts = error.details.get("conflicts") if error.code is Code.OCC_MISMATCH else None
    if not conflicts:
        return
    console.print(
        Text(f"the rewind meets later changes in {len(conflicts)} file(s):", style="bold")
    )
    for conflict in conflicts:
        console.print(
            Text.assemble(
                ("conflict ", "bold red"),
                (conflict["label"], "bold"),
                f": {conflict['reason']} (by {conflict['by']})",
            )
        )
        for hunk in conflict["hunks"]:
            console.print(Text(f"  lines {hunk['start']}-{hunk['end']}:", style="cyan"))
            for name, style in (("rewound", "red"), ("now", "yellow"), ("restored", "green")):
                for line in hunk[name].splitlines() or [""]:
                    console.print(Text(f"    {name:<9} {line}", style=style), soft_wrap=True)


@cli.command(context_settings=CONTEXT)
@_journal_options
def recover(roots: tuple[str, ...], journal: str | None, as_json: bool) -> None:
    """Recover what a killed process left unfinished, and report what was done."""

    async def job() -> tuple[list[Any], Any]:
        with _progress("recovering") as advance:
            advance("journal", 0, None)
            # recover also goes on with a journal that lost transactions, and says so.
            async with Engine.open(_config(roots, journal), accept_journal_loss=True) as engine:
                return list(engine.recovered), engine.journal_loss

    outcomes, loss = _run(as_json, job)
    if as_json:
        _emit({"recovered": outcomes, "journal_loss": loss})
        return
    console = _stdout()
    if loss is not None:
        console.print(
            Text(
                f"journal lost transactions {loss.holds + 1} to {loss.had}: going on with it as"
                " it is (their history and undo are gone; no file was changed)",
                style="bold red",
            )
        )
    if not outcomes:
        console.print("nothing to recover: every transaction had finished")
        return
    for o in outcomes:
        verb = "rolled back" if o.action == "roll_back" else "rolled forward"
        console.print(
            Text(
                f"transaction {o.transaction}: {verb} ({o.outcome}), "
                f"{len(o.restored)} files restored"
            )
        )
        for item in o.not_restored:
            reason = f"{item.get('path', '?')}: {item.get('reason', '')}"
            console.print(Text(f"  not restored: {reason}", style="red"))


def _export(as_json: bool, roots: tuple[str, ...], journal: str | None, which: LogFilter) -> None:
    """Write every transaction `which` selects to stdout, one JSON object a line."""

    async def job() -> None:
        async with Inspection.open(_config(roots, journal)) as view:
            out = sys.stdout.buffer
            try:
                async for record in view.audit(which):
                    out.write(_AUDIT_LINE.encode(record) + b"\n")
                out.flush()
            except BrokenPipeError:
                # The reader stopped early (`| head`): what it read is what it wanted.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    _run(as_json, job)


_AUDIT_LINE = msgspec.json.Encoder()


@cli.command(context_settings=CONTEXT)
@click.option(
    "--full",
    is_flag=True,
    help="Check everything, not only what changed since the last verify that found nothing.",
)
@click.option(
    "--export",
    "export",
    metavar="FILE",
    type=click.File("rb"),
    help="Check the audit chain of an export (`ledgerfs log --format jsonl`) alone.",
)
@_journal_options
def verify(
    full: bool, export: BinaryIO | None, roots: tuple[str, ...], journal: str | None, as_json: bool
) -> None:
    """Check the journal's integrity, its audit chain and the journaled files against
    the disk: what changed since the last clean verify (--full: everything).

    Prints the chain's head link: kept elsewhere, it shows later that the records up
    to it were not rewritten. Exits 2 when the journal is damaged, its chain broken
    or a file was changed outside ledgerfs.
    """
    if export is not None:
        _verify_export(export, as_json)
        return

    async def job() -> VerifyReport:
        async with Inspection.open(_config(roots, journal)) as view:
            with _progress("verifying") as advance:
                return await view.verify(advance, full=full)

    report = _run(as_json, job)
    if as_json:
        _emit(report)
    else:
        _print_report(_stdout(), report)
    if not report.ok:
        raise SystemExit(2)


def _verify_export(export: BinaryIO, as_json: bool) -> None:
    """Check an export's chain from its lines; exit 2 when a line does not hold."""
    found = check_export(export)
    if as_json:
        _emit(found)
    else:
        console = _stdout()
        verdict = Text("ok", style="green") if found.ok else Text("BROKEN", style="bold red")
        console.print(
            Text.assemble(
                "export: ",
                verdict,
                f" ({found.lines} lines, {found.links_checked} links checked,"
                f" {found.unchained} not chained yet)",
            )
        )
        for line in found.problems:
            console.print(Text(f"  {line}", style="red"))
        console.print(f"chain head: {found.head or '-'}")
    if not found.ok:
        raise SystemExit(2)


def _print_report(console: Console, report: VerifyReport) -> None:
    verdict = Text("ok", style="green") if report.journal_ok else Text("DAMAGED", style="bold red")
    scope = f"since chain position {report.since_position}" if report.incremental else "everything"
    console.print(
        Text.assemble(
            "journal: ",
            verdict,
            f" ({scope}: {report.links_checked} links, {report.blobs_checked} images checked)",
        )
    )
    for line in (
        report.problems
        + [f"missing image {h}" for h in report.missing_blobs]
        + [f"corrupt image {h}" for h in report.corrupt_blobs]
    ):
        console.print(Text(f"  {line}", style="red"))
    drift = len(report.drifted)
    console.print(
        Text.assemble(
            f"files: {report.files_checked} checked, ",
            (f"{drift} changed outside ledgerfs", "red" if drift else "green"),
        )
    )
    for d in report.drifted:
        console.print(Text(f"  {d.path}: {d.reason} (last transaction {d.transaction})"))
    console.print(f"chain head: {report.chain_head or '-'} (position {report.chain_position})")
    if report.acknowledged:
        console.print(
            Text(
                f"recovery: {_transactions(report.acknowledged)} acknowledged and waiting for"
                " their files (their process stopped before a checkpoint made the files"
                " durable, e.g. on a full disk); `ledgerfs recover` rolls them forward",
                style="yellow",
            )
        )
    if report.interrupted:
        console.print(
            Text(
                f"recovery: {_transactions(report.interrupted)} left unfinished by a process"
                " that died before their commit mark (maybe before acknowledging them);"
                " `ledgerfs recover` rolls them forward from the journal, or back where a"
                " file changed since",
                style="red",
            )
        )


def _transactions(ids: list[int]) -> str:
    """Transaction ids as the subject of a sentence, with its verb.

    >>> _transactions([3]), _transactions([3, 4])
    ('transaction 3 was', 'transactions 3, 4 were')
    """
    if len(ids) == 1:
        return f"transaction {ids[0]} was"
    return f"transactions {', '.join(map(str, ids))} were"


@cli.command("gc", context_settings=CONTEXT)
@click.option(
    "--keep-days",
    type=click.FloatRange(min=0),
    metavar="D",
    help="Keep every transaction younger than D days.",
)
@click.option(
    "--keep-last",
    type=click.IntRange(min=0),
    metavar="N",
    help="Keep the N newest transactions.",
)
@click.option("--dry-run", is_flag=True, help="Only list what would be dropped.")
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Drop without asking (required when there is no terminal to ask on).",
)
@_journal_options
def gc_command(
    keep_days: float | None,
    keep_last: int | None,
    dry_run: bool,
    yes: bool,
    roots: tuple[str, ...],
    journal: str | None,
    as_json: bool,
) -> None:
    """Drop old finished transactions (and images only they used): they can no longer be undone.

    A transaction is kept if it is among the --keep-last newest or younger than
    --keep-days; unfinished ones and the newest are always kept. The transactions to
    drop are listed first and dropped only after a confirmation (or --yes).
    """
    try:
        config = _config(roots, journal)
    except LedgerError as exc:
        _fail(exc, as_json)

    async def preview() -> Log:
        async with Inspection.open(config) as view:
            return await view.gc_preview(keep_days, keep_last)

    doomed = _run(as_json, preview)
    if dry_run or not doomed.entries:
        if as_json:
            _emit({"dry_run": dry_run, "entries": doomed.entries})
        else:
            _print_doomed(_stdout(), doomed, keep_days, keep_last, dry_run)
        return
    if not as_json:
        _print_doomed(_stdout(), doomed, keep_days, keep_last, dry_run)
    if not yes:
        _confirm(len(doomed.entries), as_json)
    ids = [e.transaction for e in doomed.entries]

    async def drop() -> Any:
        with _progress("collecting") as advance:
            async with Engine.open(config) as engine:
                return await gc(engine, keep_days, keep_last, advance, only=ids)

    result = _run(as_json, drop)
    if as_json:
        _emit({"dry_run": False, **msgspec.to_builtins(result)})
        return
    _stdout().print(
        f"dropped {result.transactions_dropped} transactions and {result.blobs_dropped} "
        f"images ({result.bytes_freed} bytes); the journal is {result.bytes_returned} bytes"
        " smaller on disk"
    )


def _print_doomed(
    console: Console, doomed: Log, keep_days: float | None, keep_last: int | None, dry: bool
) -> None:
    if keep_days is None and keep_last is None:
        console.print("nothing to drop: give --keep-days or --keep-last")
        return
    if not doomed.entries:
        console.print("nothing to drop: every transaction is kept")
        return
    verb = "would drop" if dry else "will drop"
    console.print(Text(f"gc {verb} {len(doomed.entries)} transactions:", style="bold"))
    console.print(_log_table(doomed))


def _confirm(count: int, as_json: bool) -> None:
    """Ask before dropping undo history; refuse, naming --yes, when nobody can answer."""
    if not sys.stdin.isatty():
        _fail(
            LedgerError(
                Code.VALIDATION,
                f"gc would drop {count} transactions, and there is no terminal to confirm on.",
                details={"field": "yes", "transactions": count},
                suggestion="pass --yes to drop them, or --dry-run to only list them",
            ),
            as_json,
        )
    if not click.confirm(
        f"Drop these {count} transactions? They can no longer be undone.", err=True
    ):
        _stderr().print("nothing dropped")
        raise SystemExit(1)


@cli.command(context_settings=CONTEXT)
@click.argument("roots", nargs=-1, metavar="ROOT...")
@click.option(
    "--journal", metavar="PATH", help="The journal file (default: found as log finds it)."
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    metavar="N",
    help="The port on 127.0.0.1 (0: any free one).",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a web browser.")
@click.option("--readonly", is_flag=True, help="Show no undo or rewind buttons; change nothing.")
def ui(
    roots: tuple[str, ...], journal: str | None, port: int, open_browser: bool, readonly: bool
) -> None:
    """Serve a web page over the journal on 127.0.0.1, until interrupted.

    It prints the page's address, with the token every request needs. The page
    lists sessions, transactions and their diffs, and undoes or rewinds (with a
    preview first) through the same calls as the tools.
    """
    from . import ui as web  # starlette and uvicorn load only for this command

    async def job() -> None:
        async with Inspection.open({**_config(roots, journal), "readonly": readonly}) as view:

            def ready(url: str) -> None:
                click.echo(f"ledgerfs ui: serving {view.config.journal_path()} at {url}")
                sys.stdout.flush()
                if open_browser:
                    webbrowser.open(url)

            await web.serve(view, port=port, readonly=readonly, ready=ready)

    _run(False, job)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `ledgerfs` console script and `python -m ledgerfs`."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = cli.main(args=args, prog_name="ledgerfs", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        raise SystemExit(1) from None
    except click.ClickException as exc:
        if "--json" in args:
            reason = exc.format_message()
            message = f"Invalid command line: {reason}"
            _report(LedgerError(Code.VALIDATION, message, details={"reason": reason}), True)
        else:
            exc.show()
        raise SystemExit(exc.exit_code) from None
    if isinstance(code, int) and code:
        raise SystemExit(code)
