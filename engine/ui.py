"""`ledgerfs ui`: a local web page over the journal, served on loopback only.

The page reads the journal through a read-only `Inspection` (as `ledgerfs log` and
`show` do) and acts (undo, rewind) through an `Engine` session named `ui`, with the
same calls the tools make, so every policy and check applies. Each action is shown
first as the engine's dry run (what would change, and the conflicts), then done only
when that preview's form is sent.

Who may talk to it: the server listens on 127.0.0.1 only. Every request must come
from a loopback address, name a loopback host with this server's port in its Host
header (a DNS-rebound name is refused), carry no Origin but this server's own, and
hold the token printed at start: in the URL the first time (which sets a cookie and
redirects to the same page without it), in the cookie after. A change is a POST only,
whose Origin must be this server's and whose form carries the token too. The page
loads nothing from elsewhere (its Content-Security-Policy says so).
"""

from __future__ import annotations

import datetime
import hmac
import ipaddress
import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import msgspec
import uvicorn
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pygments.formatters import HtmlFormatter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..journal import Journal, TxRecord
from . import maintenance
from .core import Engine
from .errors import Code, LedgerError
from .history import entry_of, reading_journal
from .inspection import Inspection, LogEntry
from .uiviews import CSS_SCOPE, MAX_ROWS, diff_rows, image_type, transaction_files

__all__ = ["PAGE", "SESSION", "Guard", "build_app", "serve", "writable"]

#: Rows one page lists; older ones are a "next page" link away.
PAGE = 50
#: The session the page's undos and rewinds are made in.
SESSION = "ui"
_FILES = Path(__file__).resolve().parent / "ui_files"
_STATUS = {
    Code.NOT_FOUND: 404,
    Code.VALIDATION: 400,
    Code.NOT_ALLOWED: 403,
    Code.READONLY: 403,
    Code.OCC_MISMATCH: 409,
}
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    # Not "no-referrer": with it a browser sends `Origin: null` on a form's POST.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def writable(journal: str) -> bool:
    """Whether this user may write the journal file and its folder (where SQLite keeps
    its write-ahead log): a read-only journal shows no buttons."""
    return os.access(journal, os.W_OK) and os.access(os.path.dirname(journal), os.W_OK)


# -- who may talk to the page ------------------------------------------------------------


class Guard:
    """ASGI middleware that refuses every request but this user's, on this machine.

    Refused (403, with the reason as text): a peer that is not loopback, a Host that
    is not a loopback name with this port, an Origin other than this server's, a
    request without the token, a POST without this server's Origin; any method but
    GET, HEAD and POST is 405.
    """

    def __init__(self, app: ASGIApp, *, token: str, port: int) -> None:
        self.app = app
        self.token = token
        self.cookie = f"ledgerfs_ui_{port}"
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
        self.origins = {f"http://{host}" for host in self.hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        status, reason = self.refusal(request)
        if reason:
            await Response(f"refused: {reason}\n", status, media_type="text/plain")(
                scope, receive, send
            )
            return
        if request.method == "GET" and "token" in request.query_params:
            # The token leaves the address bar (and history) for a cookie.
            rest = [(k, v) for k, v in parse_qsl(request.url.query) if k != "token"]
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            response = RedirectResponse(target, 303)
            response.set_cookie(self.cookie, self.token, httponly=True, samesite="strict")
            await response(scope, receive, send)
            return
        await self.app(scope, receive, self._with_headers(send))

    def refusal(self, request: Request) -> tuple[int, str]:
        """(status, why) for a request to refuse, else (200, "")."""
        peer = request.client.host if request.client else ""
        try:
            loopback = ipaddress.ip_address(peer).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            return 403, "not a loopback address"
        if request.headers.get("host", "").lower() not in self.hosts:
            return 403, "the Host header is not this server's loopback address"
        origin = request.headers.get("origin")
        if origin is not None and origin not in self.origins:
            return 403, "a request from another origin"
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return 403, "a request from another site"
        if request.method not in ("GET", "HEAD", "POST"):
            return 405, f"method {request.method}"
        if request.method == "POST" and origin is None:
            return 403, "a change without its Origin header"
        given = request.query_params.get("token") or request.cookies.get(self.cookie) or ""
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return 403, "no token (open the address `ledgerfs ui` printed)"
        return 200, ""

    def _with_headers(self, send: Send) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in _HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        return sending


# -- the page ---------------------------------------------------------------------------


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _size(n: int | None) -> str:
    """A size as a person reads it.

    >>> _size(99), _size(2048), _size(5 * 1024 * 1024), _size(None)
    ('99 B', '2.0 KiB', '5.0 MiB', '-')
    """
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


class Page:
    """The routes: each reads through the inspection, or acts through an engine."""

    def __init__(self, view: Inspection, *, token: str, readonly: bool) -> None:
        self.view = view
        self.token = token
        self.readonly = readonly
        self.env = Environment(
            loader=FileSystemLoader(_FILES / "templates"),
            autoescape=select_autoescape(default=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(when=_when, size=_size, label=view.label)
        self.css = HtmlFormatter().get_style_defs(CSS_SCOPE)

    @property
    def journal(self) -> Journal:
        return self.view.journal

    async def version(self) -> str:
        """What changes whenever the journal gains a transaction, session or checkpoint."""
        with reading_journal():
            newest = await self.journal.history(limit=1)
            sessions = await self.journal.sessions(limit=1)
            checkpoints = await self.journal.checkpoints(limit=1)
        parts = [
            newest[0].id if newest else 0,
            newest[0].state if newest else "",
            sessions[0].id if sessions else "",
            checkpoints[0].id if checkpoints else 0,
        ]
        return ":".join(map(str, parts))

    async def render(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        template = self.env.get_template(name)
        text = template.render(
            version=await self.version(),
            token=self.token,
            readonly=self.readonly,
            journal_path=str(self.view.config.journal_path()),
            **values,
        )
        return HTMLResponse(text, status)

    async def failed(self, error: LedgerError) -> HTMLResponse:
        body = error.envelope.error
        return await self.render(
            "error.html", _STATUS.get(error.code, 500), title=body.code, error=body
        )

    async def _entries(self, records: list[TxRecord]) -> list[LogEntry]:
        with reading_journal():
            undone = await self.journal.undone_by(r.id for r in records)
        return [entry_of(r, LogEntry, bounded=False, undone_by=undone.get(r.id)) for r in records]

    async def _transactions(self, request: Request, **which: Any) -> tuple[list[LogEntry], Any]:
        """A page of transactions matching `which`, and the `before` of the next page."""
        before = _int(request.query_params.get("before"))
        with reading_journal():
            records = await self.journal.history(limit=PAGE + 1, before=before, **which)
        more = records[PAGE - 1].id if len(records) > PAGE else None
        return await self._entries(records[:PAGE]), more

    # -- reading -----------------------------------------------------------------------

    async def sessions(self, request: Request) -> Response:
        before = _float(request.query_params.get("before"))
        with reading_journal():
            records = await self.journal.sessions(limit=PAGE + 1, started_before=before)
        listed = records[:PAGE]
        span = (
            (min(s.started for s in listed), max(s.last_activity for s in listed))
            if listed
            else (0.0, 0.0)
        )
        more = listed[-1].started if len(records) > PAGE else None
        return await self.render(
            "sessions.html", title="Sessions", sessions=listed, span=span, more=more, live=True
        )

    async def transactions(self, request: Request) -> Response:
        entries, more = await self._transactions(request)
        return await self.render(
            "transactions.html", title="Transactions", entries=entries, more=more, live=True
        )

    async def session(self, request: Request) -> Response:
        sid = request.query_params.get("id", "")
        with reading_journal():
            record = await self.journal.session_record(sid)
            checkpoints = await self.journal.checkpoints(session=sid, limit=PAGE)
        if record is None:
            return await self.failed(
                LedgerError(Code.NOT_FOUND, f"The journal knows no session {sid!r}.")
            )
        entries, more = await self._transactions(request, session=sid)
        return await self.render(
            "session.html",
            title=f"Session {sid}",
            record=record,
            checkpoints=checkpoints,
            entries=entries,
            more=more,
            live=True,
        )

    async def transaction(self, request: Request) -> Response:
        tx = int(request.path_params["tx"])
        try:
            record = await maintenance.transaction(self.view, tx)
        except LedgerError as exc:
            return await self.failed(exc)
        [entry] = await self._entries([record])
        with reading_journal():
            maker = await self.journal.session_record(record.session)
        files = await transaction_files(self.journal, record, self.view.label)
        split = request.query_params.get("view") == "split"
        return await self.render(
            "transaction.html",
            title=f"Transaction {tx}",
            entry=entry,
            maker=maker,
            files=files,
            split=split,
            max_rows=MAX_ROWS,
            undoable=record.state == "committed" and entry.undone_by is None,
        )

    async def file(self, request: Request) -> Response:
        path = request.query_params.get("path", "")
        entries, more = await self._transactions(request, path=path)
        return await self.render(
            "file.html",
            title=self.view.label(path),
            path=path,
            entries=entries,
            more=more,
            live=True,
        )

    async def search(self, request: Request) -> Response:
        text = request.query_params.get("q", "").strip()
        with reading_journal():
            found = await self.journal.paths_containing(text, limit=PAGE * 4) if text else []
        return await self.render("search.html", title="Search", q=text, found=found)

    async def outside(self, request: Request) -> Response:
        report = await maintenance.verify(self.view)
        return await self.render("outside.html", title="Changes outside ledgerfs", report=report)

    async def latest(self, request: Request) -> Response:
        return JSONResponse({"version": await self.version()})

    async def stylesheet(self, request: Request) -> Response:
        return Response(self.css, media_type="text/css")

    async def blob(self, request: Request) -> Response:
        """A stored picture, for a thumbnail; nothing else is served."""
        with reading_journal():
            data = await self.journal.blob(request.path_params["hash"])
        kind = image_type(data) if data is not None else None
        if data is None or kind is None:
            return Response("no such picture\n", 404, media_type="text/plain")
        return Response(data, media_type=kind)

    # -- acting ------------------------------------------------------------------------

    async def _call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The tool's result, called in the `ui` session of an engine opened for it."""
        async with Engine.open(self.view.config) as engine:
            session = await engine.session(SESSION, client_name="ledgerfs ui")
            result = await session.call(tool, arguments)
        built: dict[str, Any] = msgspec.to_builtins(result)
        return built

    async def _form(self, request: Request) -> dict[str, str] | Response:
        """The sent form when it may change anything, else the refusal to answer."""
        form = {k: str(v) for k, v in (await request.form()).items()}
        if not hmac.compare_digest(form.get("token", "").encode(), self.token.encode()):
            return Response("refused: the form lacks the token\n", 403, media_type="text/plain")
        if self.readonly:
            return await self.failed(
                LedgerError(Code.READONLY, "This page was opened read-only: it changes nothing.")
            )
        return form

    async def undo_preview(self, request: Request) -> Response:
        tx = int(request.path_params["tx"])
        try:
            preview = await self._call("undo", {"transaction": tx, "dry_run": True})
        except LedgerError as exc:
            return await self.failed(exc)
        return await self.render(
            "preview.html",
            title=f"Undo transaction {tx}",
            action=f"/undo/{tx}",
            back=f"/tx/{tx}",
            preview=preview,
            preview_rows=diff_rows(preview["diff"], files=True),
            fields={},
            conflicts=[],
            what=f"undo transaction {tx}",
        )

    async def undo(self, request: Request) -> Response:
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        try:
            done = await self._call("undo", {"transaction": int(request.path_params["tx"])})
        except LedgerError as exc:
            return await self.failed(exc)
        return RedirectResponse(f"/tx/{done['transaction']}", 303)

    @staticmethod
    def _scope(values: Any) -> dict[str, Any] | None:
        """The rewind's scope from a query or form: a session, or a checkpoint."""
        if values.get("session"):
            return {"session": str(values["session"])}
        checkpoint = _int(values.get("checkpoint"))
        return None if checkpoint is None else {"checkpoint": checkpoint}

    async def rewind_preview(self, request: Request) -> Response:
        scope = self._scope(request.query_params)
        if scope is None:
            return await self.failed(
                LedgerError(Code.VALIDATION, "Rewind a session or to a checkpoint.")
            )
        what = (
            f"rewind session {scope['session']}"
            if "session" in scope
            else f"rewind to checkpoint {scope['checkpoint']}"
        )
        back = f"/session?{urlencode({'id': scope['session']})}" if "session" in scope else "/"
        conflicts: list[dict[str, Any]] = []
        on_conflict = "refuse"
        try:
            preview = await self._call("rewind", {**scope, "dry_run": True})
        except LedgerError as exc:
            conflicts = list(exc.details.get("conflicts") or [])
            if exc.code is not Code.OCC_MISMATCH or not conflicts:
                return await self.failed(exc)
            # What would go if the conflicting files were left as they are.
            on_conflict = "skip"
            try:
                preview = await self._call(
                    "rewind", {**scope, "on_conflict": on_conflict, "dry_run": True}
                )
            except LedgerError as again:
                return await self.failed(again)
        return await self.render(
            "preview.html",
            title=what.capitalize(),
            action="/rewind",
            back=back,
            preview=preview,
            preview_rows=diff_rows(preview["diff"], files=True),
            fields={**scope, "on_conflict": on_conflict},
            conflicts=conflicts,
            what=what,
        )

    async def rewind(self, request: Request) -> Response:
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        scope = self._scope(form)
        on_conflict = form.get("on_conflict", "refuse")
        if scope is None or on_conflict not in ("refuse", "skip"):
            return await self.failed(
                LedgerError(Code.VALIDATION, "Rewind a session or to a checkpoint.")
            )
        try:
            done = await self._call("rewind", {**scope, "on_conflict": on_conflict})
        except LedgerError as exc:
            return await self.failed(exc)
        if done["transaction"] is None:
            return RedirectResponse("/transactions", 303)
        return RedirectResponse(f"/tx/{done['transaction']}", 303)


def _int(text: Any) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


def _float(text: Any) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def build_app(view: Inspection, *, token: str, port: int, readonly: bool) -> ASGIApp:
    """The page's application, behind its `Guard`."""
    page = Page(view, token=token, readonly=readonly)
    routes = [
        Route("/", page.sessions),
        Route("/transactions", page.transactions),
        Route("/session", page.session),
        Route("/tx/{tx:int}", page.transaction),
        Route("/file", page.file),
        Route("/search", page.search),
        Route("/outside", page.outside),
        Route("/latest", page.latest),
        Route("/pygments.css", page.stylesheet),
        Route("/blob/{hash:str}", page.blob),
        Route("/undo/{tx:int}", page.undo_preview, methods=["GET"]),
        Route("/undo/{tx:int}", page.undo, methods=["POST"]),
        Route("/rewind", page.rewind_preview, methods=["GET"]),
        Route("/rewind", page.rewind, methods=["POST"]),
        Mount("/static", StaticFiles(directory=_FILES / "static"), name="static"),
    ]

    async def envelope(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, LedgerError)
        return await page.failed(exc)

    app = Starlette(routes=routes, exception_handlers={LedgerError: envelope})
    return Guard(app, token=token, port=port)


def _listening(port: int) -> socket.socket:
    """A socket on 127.0.0.1:`port` (0: any free port); VALIDATION when it is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise LedgerError(
            Code.VALIDATION,
            f"Port {port} on 127.0.0.1 cannot be used: {exc.strerror}.",
            details={"field": "port"},
            suggestion="pass --port another number, or 0 for any free one",
        ) from exc
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


async def serve(
    view: Inspection, *, port: int, readonly: bool, ready: Callable[[str], None]
) -> None:
    """Serve the page until interrupted; `ready` gets its address (with the token) once
    it accepts connections. Runs on asyncio (uvicorn's loop)."""
    sock = _listening(port)
    bound = int(sock.getsockname()[1])
    token = secrets.token_urlsafe(24)
    shown_readonly = (
        readonly or view.config.readonly or not writable(str(view.config.journal_path()))
    )
    app = build_app(view, token=token, port=bound, readonly=shown_readonly)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    ready(f"http://127.0.0.1:{bound}/?token={token}")
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
