"""The MCP adapter: tool arguments in, `Session.call`, results or envelopes out.

The server adds no logic of its own. Each tool is registered on the SDK's
low-level `Server` with an explicit input schema, output schema and annotations,
and its arguments reach the engine unvalidated, so an unknown or mistyped argument
comes back as the engine's VALIDATION envelope rather than an SDK error. A result
is returned twice: as `structuredContent` and as the same JSON in a text block.
A failure is `isError: true` with the envelope JSON as its only text.

Sessions: one engine session per client session. On stdio that is the one client
of the process; over Streamable HTTP it is one per `mcp-session-id` the server
issued (the SDK's transport assigns it at the handshake; an id it did not issue,
or one that has ended, gets 404: from the SDK on the handshake protocol, from
`exposure.AccessGuard` on the sessionless one). Requests
without a session (the 2026-07-28 protocol over HTTP has none) share one engine
session, so a mutation budget cannot be escaped by dropping or inventing a
session id. A session's state is dropped when the session ends (DELETE, the
SDK's idle timeout, a crash); the budget it used stays in the journal under its
id, which is never issued again.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote, urlparse

import anyio
import anyio.abc
import mcp_types as types
import msgspec
from mcp.server.connection import Connection
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from . import (
    Code,
    Config,
    Engine,
    LedgerError,
    MediaFile,
    Session,
    Tool,
    load_config,
    reject_surrogates,
    reply_json,
    reporting,
    served_tools,
)
from .core import unexpected_failure
from .exposure import AccessGuard, HttpExposure
from .incidents import record_incident
from .jsonrpc import Refusal
from .stdio import line_cap, stdio_streams

__all__ = [
    "HubStatistics",
    "RootsMode",
    "build_server",
    "open_hub",
    "serve_http",
    "serve_stdio",
]

RootsMode = Literal["replace", "union", "ignore"]


def tool_annotations(tool: Tool) -> types.ToolAnnotations:
    """The registry's annotations in MCP's terms (destructive only for a mutating tool)."""
    hints = tool.annotations
    # No title here: the tool's own title says it, once.
    return types.ToolAnnotations(
        read_only_hint=hints.read_only,
        destructive_hint=hints.destructive,
        idempotent_hint=hints.idempotent,
        open_world_hint=hints.open_world,
    )


def tool_list(config: Config) -> list[types.Tool]:
    """The tools a client of this configuration can call, in the order of the surface.

    Every conversation carries this listing, so it says what a model needs and
    no more: each tool's brief, its arguments' briefs (`listed_schema`), no
    result schema (a result's is in docs/tools.md and `Tool.output_schema`; an
    MCP client needs none to take structuredContent).

    Tools left out by `--tools`, the issue tools without `--issue-tools`, and mutating
    ones under `--readonly`, are not listed (a call to one is still TOOL_UNAVAILABLE
    or READONLY).
    """
    return [
        types.Tool(
            name=tool.name,
            title=tool.title,
            description=tool.listed_description(),
            input_schema=tool.listed_schema(),
            annotations=tool_annotations(tool),
        )
        for tool in served_tools(config.tools, config.readonly, issue_tools=config.issue_tools)
    ]


#: A tools/call result in its wire form: what the SDK's serializer would make of a
#: `CallToolResult`, built directly (the engine's results are typed already).
WireResult = dict[str, Any]


def success(result: msgspec.Struct) -> WireResult:
    """A result as structuredContent plus the same JSON as text."""
    text = reply_json(result)
    return _wire({"type": "text", "text": text}, msgspec.json.decode(text), is_error=False)


def media(result: MediaFile) -> WireResult:
    """An image or audio block with the file's bytes; its description as structuredContent."""
    info = result.info
    block = {"type": info.kind, "data": result.data, "mimeType": info.mime_type}
    return _wire(block, msgspec.to_builtins(info), is_error=False)


def failure(error: LedgerError) -> WireResult:
    """An envelope: its exact JSON as the text, the same object as structuredContent."""
    text = reply_json(error.envelope)
    return _wire({"type": "text", "text": text}, msgspec.json.decode(text), is_error=True)


def _wire(block: dict[str, Any], structured: Any, *, is_error: bool) -> WireResult:
    return {"content": [block], "structuredContent": structured, "isError": is_error}


def unexpected(exc: Exception, tool: str) -> LedgerError:
    """Translate an exception the engine did not map: never a traceback to the client,
    always one in the log (under the incident id the envelope names).

    A decode error met here is not the client's: arguments are decoded (and refused
    with VALIDATION) by the engine, so it comes from something else (a damaged journal
    row, say) and is an incident like any other.
    """
    return unexpected_failure(exc, tool)


# ---------------------------------------------------------------------------
# Engines per root set and sessions per client.


@dataclass
class _Client:
    """One client session: its engine session per root set and its MCP roots."""

    session_id: str
    roots: tuple[str, ...] | None = None
    roots_stale: bool = True
    sessions: dict[tuple[str, ...], Session] = field(default_factory=dict)
    # Held while a session is opened, so concurrent first calls share one
    # session (and one mutation budget) instead of each opening its own.
    opening: anyio.Lock = field(default_factory=anyio.Lock)


class HubStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What the hub holds for its clients: a count of each, for introspection."""

    #: HTTP sessions the server issued and that have not ended.
    clients: int
    #: Engine sessions held for them and for the shared sessionless client.
    engine_sessions: int


class Hub:
    """The base engine, engines for client root sets, and the client sessions."""

    def __init__(
        self,
        engine: Engine,
        group: anyio.abc.TaskGroup,
        roots_mode: RootsMode,
    ) -> None:
        self.engine = engine
        self.roots_mode: RootsMode = roots_mode
        self._group = group
        self._engines: dict[tuple[str, ...], Engine] = {tuple(engine.workspace.roots): engine}
        self._opening: dict[tuple[str, ...], anyio.Event] = {}
        self._errors: dict[tuple[str, ...], LedgerError] = {}
        #: stdio's one client, and every HTTP request without a session.
        self.shared = _Client(session_id=uuid.uuid4().hex)
        #: HTTP sessions by the id the transport issued, while they last.
        self._clients: dict[str, _Client] = {}

    def open_client(self, session_id: str) -> _Client:
        """The state of the issued session `session_id`, made at its first message."""
        client = self._clients.get(session_id)
        if client is None:
            client = self._clients[session_id] = _Client(session_id=session_id)
        return client

    def close_client(self, session_id: str) -> None:
        """Forget an ended session: its roots and engine sessions (its budget stays journaled)."""
        self._clients.pop(session_id, None)

    def statistics(self) -> HubStatistics:
        clients = [self.shared, *self._clients.values()]
        return HubStatistics(
            clients=len(self._clients),
            engine_sessions=sum(len(client.sessions) for client in clients),
        )

    async def session_for(
        self,
        client: _Client,
        roots: tuple[str, ...],
        client_info: tuple[str, str] | None = None,
    ) -> Session:
        """The engine session of `client` for `roots`, opened (and journaled with
        `client_info`, the client's (name, version)) at its first call."""
        session = client.sessions.get(roots)
        if session is not None:
            return session
        async with client.opening:
            session = client.sessions.get(roots)
            if session is None:
                engine = await self._engine_for(roots)
                name, version = client_info or (None, None)
                session = client.sessions[roots] = await engine.session(
                    client.session_id, client_name=name, client_version=version
                )
        return session

    async def _engine_for(self, roots: tuple[str, ...]) -> Engine:
        if roots in self._engines:
            return self._engines[roots]
        if roots in self._errors:
            raise self._errors[roots]
        event = self._opening.get(roots)
        if event is None:
            event = self._opening[roots] = anyio.Event()
            self._group.start_soon(self._run_engine, roots, event)
        await event.wait()
        if roots in self._errors:
            raise self._errors[roots]
        return self._engines[roots]

    async def _run_engine(self, roots: tuple[str, ...], ready: anyio.Event) -> None:
        # Each extra engine lives in its own task so its task group is entered and
        # left by the same task; it shares the base engine's journal.
        raw = msgspec.to_builtins(self.engine.config)
        raw["roots"] = list(roots)
        raw["journal"] = str(self.engine.config.journal_path())
        try:
            async with Engine.open(load_config(raw)) as engine:
                self._engines[roots] = engine
                ready.set()
                await anyio.sleep_forever()
        except LedgerError as exc:
            self._errors[roots] = exc
        finally:
            self._engines.pop(roots, None)
            ready.set()


#: Where a connection keeps its client state (the SDK's per-connection scratch space).
_CLIENT_STATE = "ledgerfs.client"


def _client_of(hub: Hub, ctx: ServerRequestContext[Any, Any]) -> _Client:
    """The client a message belongs to: its issued HTTP session, else the shared one.

    The session id is the transport's own (set by the SDK's session manager on
    the connection), never read from a header, so an id the client makes up
    cannot buy a fresh budget. A session's state is made at its first message
    (the handshake) and dropped when its connection closes.
    """
    connection = _connection_of(ctx)
    session_id = connection.session_id if connection is not None else None
    if connection is None or session_id is None:
        return hub.shared
    client: _Client | None = connection.state.get(_CLIENT_STATE)
    if client is None:
        client = connection.state[_CLIENT_STATE] = hub.open_client(session_id)
        connection.exit_stack.callback(hub.close_client, session_id)
    return client


def _connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection | None:
    # The low-level request context does not expose its connection (the SDK's
    # `Context` does, but the runner builds none); the SDK documents
    # `connection.exit_stack` as the place for per-connection cleanup. If a later
    # SDK drops the attribute, every call falls to the shared client: one budget
    # for all (never one per made-up id), and the test of freed sessions fails.
    connection = getattr(ctx.session, "_connection", None)
    return connection if isinstance(connection, Connection) else None


def _client_info(ctx: ServerRequestContext[Any, Any]) -> tuple[str, str] | None:
    """The (name, version) the client gave in initialize's clientInfo, if it did."""
    params = ctx.session.client_params
    info = None if params is None else params.client_info
    return None if info is None else (info.name, info.version)


def _uri_path(uri: str) -> str | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    path = os.path.realpath(unquote(parsed.path))
    return path if os.path.isdir(path) else None


async def _client_roots(ctx: ServerRequestContext[Any, Any]) -> tuple[str, ...] | None:
    """The client's roots as folders, or None when the client cannot be asked."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.roots is None or not ctx.session.can_send_request:
        return None
    listed = await ctx.session.list_roots()
    paths = (_uri_path(str(root.uri)) for root in listed.roots)
    return tuple(dict.fromkeys(p for p in paths if p is not None))


async def _roots_for(
    hub: Hub, client: _Client, ctx: ServerRequestContext[Any, Any]
) -> tuple[str, ...]:
    configured = tuple(hub.engine.workspace.roots)
    if hub.roots_mode == "ignore":
        return configured
    if client.roots_stale:
        client.roots = await _client_roots(ctx)
        client.roots_stale = False
    if client.roots is None:
        return configured
    if hub.roots_mode == "replace":
        if not client.roots:
            raise LedgerError(Code.ROOTS_EMPTY, "The client's roots list is empty.")
        return client.roots
    return tuple(dict.fromkeys(configured + client.roots))


def build_server(hub: Hub) -> Server[Any]:
    """The low-level MCP server over `hub`: tools/list and tools/call only."""
    tools = tool_list(hub.engine.config)

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def run_tool(
        ctx: ServerRequestContext[Any, Any], name: str, arguments: dict[str, Any]
    ) -> WireResult:
        try:
            client = _client_of(hub, ctx)
            roots = await _roots_for(hub, client, ctx)
            session = await hub.session_for(client, roots, _client_info(ctx))
            # A client that sent a progress token hears how a long call goes.
            with reporting(ctx.session.report_progress):
                result = await session.call(name, arguments)
        except LedgerError as exc:
            return failure(exc)
        except Exception as exc:
            return failure(unexpected(exc, name))
        if isinstance(result, MediaFile):
            return media(result)
        return success(result)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # The SDK's own path (see _DirectToolCalls): its result model, validated.
        wire = await run_tool(ctx, params.name, params.arguments or {})
        return types.CallToolResult.model_validate(wire, by_name=False)

    async def roots_changed(
        ctx: ServerRequestContext[Any, Any], params: types.NotificationParams
    ) -> None:
        _client_of(hub, ctx).roots_stale = True

    server: Server[Any] = Server(
        "ledgerfs",
        version=_version(),
        instructions=(
            "ledgerfs: read files, then change them with expected_hash set to the "
            "content_hash you read. Every change is journaled and can be undone. Failures "
            "are a JSON envelope {error: {code, message, retryable, recovery, ...}}: "
            "follow its recovery field."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    # The SDK's tracing middleware (a span per message) is dropped: nothing here
    # exports spans, and it costs on every call.
    server.middleware = [_SessionTracking(hub), _DirectToolCalls(run_tool)]
    # Registered directly: the constructor argument is deprecated for 2026-07-28,
    # but handshake-era clients still send this notification.
    server.add_notification_handler(
        "notifications/roots/list_changed", types.NotificationParams, roots_changed
    )
    return server


class _SessionTracking:
    """Registers each HTTP session with the hub at its first message (the handshake),
    so that every open session is counted and freed, whether it calls a tool or not.
    """

    def __init__(self, hub: Hub) -> None:
        self._hub = hub

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        _client_of(self._hub, ctx)
        return await call_next(ctx)


class _DirectToolCalls:
    """A tools/call of the usual shape goes straight to the tool, its result straight out;
    a repeated tools/list gets the listing's wire form made the first time.

    For a call, the SDK would validate the request's params against the
    protocol's models, build them into a model, and validate and re-dump the
    result against the protocol's result model: the engine's arguments are
    validated by the engine, and its results are typed Structs made into the
    wire form by `success`, `failure` and `media` (a test checks that form
    against the SDK's serializer and each tool's output schema). The listing
    never changes while the server runs, but the SDK dumps, validates and
    re-dumps its every schema on each tools/list (several milliseconds; a
    client may list once per concurrent first call): the first listing of each
    protocol version takes the SDK's path and its result is kept. Any other
    message, a call of another shape (extra params, `_meta` beyond a progress
    token), a listing with params, before the handshake or on the 2026-07-28
    protocol, takes the SDK's whole path.
    """

    def __init__(
        self,
        run: Callable[[ServerRequestContext[Any, Any], str, dict[str, Any]], Awaitable[WireResult]],
    ) -> None:
        self._run = run
        self._listings: dict[str, WireResult] = {}

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        if (
            ctx.session.client_params is None
            or ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS
        ):
            return await call_next(ctx)
        params = ctx.params
        if ctx.method == "tools/list" and not params:
            return await self._listing(ctx, call_next)
        if ctx.method != "tools/call" or not _plain_call(params):
            return await call_next(ctx)
        assert params is not None  # _plain_call
        return await self._run(ctx, params["name"], params.get("arguments") or {})

    async def _listing(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        kept = self._listings.get(ctx.protocol_version)
        if kept is not None:
            return kept
        listing = await call_next(ctx)
        if isinstance(listing, dict):
            self._listings[ctx.protocol_version] = listing
        return listing


def _plain_call(params: Mapping[str, Any] | None) -> bool:
    """Whether tools/call params are of the shape the protocol's model accepts as they are.

    >>> _plain_call({"name": "read_file", "arguments": {"path": "a"}})
    True
    >>> _plain_call({"name": "read_file", "_meta": {"progressToken": True}})
    False
    """
    if not isinstance(params, dict) or not isinstance(params.get("name"), str):
        return False
    if not isinstance(params.get("arguments", {}), dict | None):
        return False
    meta = params.get("_meta", {})
    if not isinstance(meta, dict) or set(meta) - {"progressToken"}:
        return False
    token = meta.get("progressToken", "")
    return (
        isinstance(token, str | int)
        and not isinstance(token, bool)
        and set(params)
        <= {
            "name",
            "arguments",
            "_meta",
        }
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ledgerfs")
    except PackageNotFoundError:  # pragma: no cover - source checkout without install
        return "0"


@asynccontextmanager
async def open_hub(
    config: Config | Mapping[str, Any], roots_mode: RootsMode = "ignore"
) -> AsyncIterator[Hub]:
    """Open the base engine (recovering its journal) and the hub around it."""
    raw = dict(config) if isinstance(config, Mapping) else config
    async with Engine.open(raw) as engine, anyio.create_task_group() as group:
        try:
            yield Hub(engine, group, roots_mode)
        finally:
            group.cancel_scope.cancel()


async def serve_stdio(hub: Hub) -> None:
    """Serve one client over stdin/stdout until it closes its end."""
    server = build_server(hub)
    cap = line_cap(hub.engine.config.max_file_size)
    async with stdio_streams(answer_refused, cap=cap) as (incoming, outgoing):
        await server.run(incoming, outgoing, server.create_initialization_options())


def answer_refused(refusal: Refusal) -> types.JSONRPCMessage:
    """The one reply to a line that is no message for the SDK (`engine/jsonrpc.py` says which).

    A tools/call refused for its text (not UTF-8: a bad byte or a lone surrogate)
    or its size gets the VALIDATION envelope, naming the field where there is one;
    anything else the JSON-RPC error the line was refused with.
    """
    try:
        error = _tool_call_error(refusal)
    except Exception as exc:  # whatever the line held, the connection must live on
        record_incident(exc, "answering a line the parser refused")
        error = None
    if error is not None and refusal.id is not None:
        return types.JSONRPCResponse(jsonrpc="2.0", id=refusal.id, result=failure(error))
    return _rpc_error(refusal.id, refusal.code, refusal.message)


def _tool_call_error(refusal: Refusal) -> LedgerError | None:
    if refusal.method != "tools/call":
        return None
    if refusal.fault == "too_long":
        return LedgerError(
            Code.VALIDATION,
            refusal.message.removeprefix("Invalid request: "),
            details={"field": "the request line", "reason": "too_long"},
            suggestion="Send at most max_file_size bytes of content per file.",
        )
    if refusal.fault == "not_utf8" and refusal.params is not None:
        try:
            reject_surrogates(refusal.params.get("arguments"))
            reject_surrogates(refusal.params.get("name"), "name")
        except LedgerError as error:
            return error
    return None


def _rpc_error(ident: int | str | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=ident, error=types.ErrorData(code=code, message=message)
    )


async def serve_http(
    hub: Hub, exposure: HttpExposure, *, on_ready: Callable[[str], None] | None = None
) -> None:
    """Serve Streamable HTTP at http://host:port/mcp until cancelled.

    `exposure` (from `plan_exposure`, which refuses a non-local bind without a
    token) says who may call: the bearer token and unissued session ids are
    checked by `AccessGuard` in front of the app, Host and Origin by the SDK.
    """
    import uvicorn

    server = build_server(hub)
    # A request carries whole files (base64 inflates them by a third), so the
    # SDK's 4 MiB body cap would refuse files the engine accepts.
    limit = 2 * hub.engine.config.max_file_size + 1024 * 1024
    app = server.streamable_http_app(
        host=exposure.host,
        max_request_body_size=limit,
        transport_security=exposure.transport_security(),
    )
    guarded = AccessGuard(app, exposure.token)
    uv_config = uvicorn.Config(
        guarded,
        host=exposure.host,
        port=exposure.port,
        log_level="warning",
        lifespan="on",
        # Headers (the token among them) are never logged: no access log at all.
        access_log=False,
    )
    uv_server = uvicorn.Server(uv_config)
    if on_ready is not None:
        host = f"[{exposure.host}]" if ":" in exposure.host else exposure.host
        on_ready(f"http://{host}:{exposure.port}/mcp")
    try:
        await uv_server.serve()
    except anyio.get_cancelled_exc_class():
        # Cancelled by the caller rather than stopped by a signal: uvicorn skips its
        # shutdown then, leaving the port listening and the app's lifespan (the
        # sessions) running. Run it, bounded, before the cancellation goes on.
        if uv_server.started:
            with anyio.move_on_after(_SHUTDOWN_GRACE, shield=True):
                await uv_server.shutdown()
        raise


#: Seconds a cancelled HTTP server waits for its connections and sessions to close.
_SHUTDOWN_GRACE = 5.0
