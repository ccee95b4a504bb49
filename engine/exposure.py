"""Who may reach the HTTP server: the bind, the bearer token, Host and Origin.

`ledgerfs serve --http HOST:PORT` hands whoever can connect every tool on the
roots. Three rules keep that to the operator's clients:

- **A token off the local addresses.** Without a token the server binds only
  to `127.0.0.1`, `::1` or `localhost` (when that name resolves to loopback
  addresses only). Any other address, the rest of 127.0.0.0/8 included, needs a
  bearer token: such an address is a choice to let others in (a container's
  published port, a VM's or an ssh forward), and one flag costs less than
  guessing which. The token comes from a file (`--http-token-file`) or the
  `LEDGERFS_HTTP_TOKEN` variable and has at least `MIN_TOKEN_LENGTH` visible
  ASCII characters.
- **Every request carries it** once one is set, on any bind, loopback too:
  `Authorization: Bearer <token>`, compared in constant time; else 401 with
  `WWW-Authenticate`. The token is held by `BearerToken`, whose repr hides it,
  and is never written to a reply or a log.
- **Host and Origin name this server** (DNS rebinding): the SDK's transport
  security checks them on every request, against the bound address and port,
  the loopback names for a loopback or wildcard bind, and the names given with
  `--http-allow-host`. A browser page on another origin, a port of localhost
  included, is refused (403); a foreign Host gets 421.

`AccessGuard` also answers 404 to a request of the sessionless protocol
(2026-07-28) that names an `mcp-session-id`: that protocol has no sessions, and
the SDK's sessionless entry would ignore the id. On the handshake protocol the
SDK's session manager answers 404 to an id it did not issue, or that has ended.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import socket
import stat
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import Final

from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import Code, LedgerError

__all__ = [
    "LOCAL_BINDS",
    "MIN_TOKEN_LENGTH",
    "TOKEN_ENV",
    "AccessGuard",
    "BearerToken",
    "HttpExposure",
    "is_local_bind",
    "plan_exposure",
    "read_token",
]

#: The environment variable a token may come from (the file flag wins over it).
TOKEN_ENV: Final = "LEDGERFS_HTTP_TOKEN"

#: The fewest characters a token may have: 32 random URL-safe characters carry
#: 192 bits (`python -c 'import secrets; print(secrets.token_urlsafe(32))'` makes 43).
MIN_TOKEN_LENGTH: Final = 32

#: The addresses a server may bind to without a token.
LOCAL_BINDS: Final = ("127.0.0.1", "::1", "localhost")

_WILDCARDS: Final = ("0.0.0.0", "::", "")  # recognised, never bound here
_LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "::1")


class BearerToken:
    """A bearer token: checked in constant time, never shown by repr or str."""

    __slots__ = ("_secret",)

    def __init__(self, text: str) -> None:
        self._secret = text.encode("ascii")

    def admits(self, authorization: str | None) -> bool:
        """Whether an `Authorization` header value carries this token.

        >>> token = BearerToken("t" * 32)
        >>> token.admits("Bearer " + "t" * 32), token.admits("bearer " + "t" * 32)
        (True, True)
        >>> token.admits("Bearer " + "t" * 31), token.admits(None), token.admits("Basic x")
        (False, False, False)
        """
        if authorization is None:
            return False
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return False
        # Header values arrive decoded as latin-1: encoding back gives the bytes sent.
        return hmac.compare_digest(given.strip().encode("latin-1"), self._secret)

    def __repr__(self) -> str:
        return "BearerToken(<hidden>)"

    __str__ = __repr__


_SUGGESTION: Final = (
    "put a token of 32+ characters in a file only you can read and pass "
    "--http-token-file PATH (or set LEDGERFS_HTTP_TOKEN), or bind 127.0.0.1"
)


def _invalid(message: str, reason: str, **details: object) -> LedgerError:
    return LedgerError(
        Code.VALIDATION, message, details={"reason": reason, **details}, suggestion=_SUGGESTION
    )


def check_token_text(text: str, source: str) -> BearerToken:
    """A token from `text` (surrounding whitespace dropped), or VALIDATION.

    >>> check_token_text("  " + "a" * 32 + "\\n", "test")
    BearerToken(<hidden>)
    >>> check_token_text("short", "test").admits("Bearer short")
    Traceback (most recent call last):
    ...
    ledgerfs.engine.errors.LedgerError: VALIDATION: ... has 5 characters; it needs at least 32.
    """
    text = text.strip()
    if len(text) < MIN_TOKEN_LENGTH:
        raise _invalid(
            f"The HTTP token from {source} has {len(text)} characters; "
            f"it needs at least {MIN_TOKEN_LENGTH}.",
            "token_too_short",
            source=source,
            length=len(text),
            minimum=MIN_TOKEN_LENGTH,
        )
    if not all("!" <= ch <= "~" for ch in text):
        raise _invalid(
            f"The HTTP token from {source} must be visible ASCII characters only "
            "(it travels in an HTTP header).",
            "token_characters",
            source=source,
        )
    return BearerToken(text)


def read_token(token_file: str | None, environ: MutableMapping[str, str]) -> BearerToken | None:
    """The token from `token_file`, else from `TOKEN_ENV` in `environ`, else None.

    The variable is removed from `environ` either way, so programs the server
    starts (git, gh) do not inherit it. A file that others may read or write is
    refused, as ssh refuses such a key. Raises VALIDATION for an unreadable,
    exposed, short or non-ASCII token.
    """
    from_env = environ.pop(TOKEN_ENV, None)
    if token_file is not None:
        return _token_from_file(Path(token_file).expanduser())
    if from_env is not None:
        return check_token_text(from_env, TOKEN_ENV)
    return None


def _token_from_file(path: Path) -> BearerToken:
    source = str(path)
    try:
        with path.open("rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            raw = handle.read(64 * 1024)
    except OSError as exc:
        raise _invalid(
            f"Cannot read the HTTP token file {source}: {exc.strerror}.",
            "token_file",
            path=source,
        ) from None
    if not stat.S_ISREG(mode):
        raise _invalid(f"The HTTP token file {source} is not a file.", "token_file", path=source)
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise _invalid(
            f"The HTTP token file {source} can be read or written by others; "
            f"run `chmod 600 {source}`.",
            "token_file_mode",
            path=source,
            mode=oct(stat.S_IMODE(mode)),
        )
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise _invalid(
            f"The HTTP token from {source} must be visible ASCII characters only "
            "(it travels in an HTTP header).",
            "token_characters",
            source=source,
        ) from None
    return check_token_text(text, source)


def is_local_bind(host: str, resolve: Callable[[str], Iterable[str]] | None = None) -> bool:
    """Whether a server bound to `host` may run without a token.

    `localhost` counts only while every address it resolves to is loopback.

    >>> [is_local_bind(h) for h in ("127.0.0.1", "::1", "0.0.0.0", "::", "127.0.0.2")]
    [True, True, False, False, False]
    >>> is_local_bind("localhost", lambda _: ["127.0.0.1", "::1"])
    True
    >>> is_local_bind("localhost", lambda _: ["127.0.0.1", "192.168.1.9"])
    False
    """
    if host in ("127.0.0.1", "::1"):
        return True
    if host != "localhost":
        return False
    addresses = list((resolve or _addresses)(host))
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def _addresses(host: str) -> list[str]:
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return []
    return [str(info[4][0]).split("%")[0] for info in found]


class HttpExposure:
    """Where the server listens and who may call it: made by `plan_exposure`."""

    __slots__ = ("allowed_names", "host", "port", "token")

    def __init__(
        self, host: str, port: int, token: BearerToken | None, allowed_names: tuple[str, ...]
    ) -> None:
        self.host = host
        self.port = port
        self.token = token
        self.allowed_names = allowed_names

    def transport_security(self) -> TransportSecuritySettings:
        """The SDK's Host and Origin checks for this bind.

        >>> plan_exposure("127.0.0.1", 8765, None).transport_security().allowed_hosts
        ['127.0.0.1:8765', 'localhost:8765', '[::1]:8765']
        >>> plan_exposure("127.0.0.1", 80, None).transport_security().allowed_origins[:2]
        ['http://127.0.0.1', 'http://127.0.0.1:80']
        """
        hosts: list[str] = []
        origins: list[str] = []
        for name in self.allowed_names:
            spelled = f"[{name}]" if ":" in name else name
            with_port = f"{spelled}:{self.port}"
            # A client leaves the default port out of Host and Origin.
            default = {80: "http", 443: "https"}.get(self.port)
            hosts += [spelled, with_port] if default else [with_port]
            for scheme in ("http", "https"):
                if scheme == default:
                    origins.append(f"{scheme}://{spelled}")
                origins.append(f"{scheme}://{with_port}")
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(dict.fromkeys(hosts)),
            allowed_origins=list(dict.fromkeys(origins)),
        )


def plan_exposure(
    host: str,
    port: int,
    token: BearerToken | None,
    allow_hosts: Iterable[str] = (),
    resolve: Callable[[str], Iterable[str]] | None = None,
) -> HttpExposure:
    """Check that `host` may be served with `token`, and name the Hosts it answers to.

    Raises VALIDATION when `host` is not a local bind and there is no token.

    >>> plan_exposure("0.0.0.0", 8765, None)
    Traceback (most recent call last):
    ...
    ledgerfs.engine.errors.LedgerError: VALIDATION: Serving HTTP on 0.0.0.0 ... bearer token...
    >>> plan_exposure("0.0.0.0", 8765, BearerToken("t" * 32), ["box.lan"]).allowed_names
    ('127.0.0.1', 'localhost', '::1', 'box.lan')
    """
    if token is None and not is_local_bind(host, resolve):
        raise _invalid(
            f"Serving HTTP on {host} lets other machines or users call every tool; it needs "
            f"a bearer token: --http-token-file PATH, or the {TOKEN_ENV} variable "
            f"(at least {MIN_TOKEN_LENGTH} characters).",
            "token_required",
            host=host,
            local_binds=list(LOCAL_BINDS),
        )
    names: list[str] = []
    if host in _WILDCARDS or host in _LOOPBACK_NAMES:
        names += _LOOPBACK_NAMES
    if host not in _WILDCARDS:
        names.append(host)
    names += (name.strip().strip("[]") for name in allow_hosts if name.strip())
    return HttpExposure(host, port, token, tuple(dict.fromkeys(names)))


class AccessGuard:
    """ASGI middleware in front of the MCP app: the bearer token, then the session id.

    A request without the token (when one is set) gets 401 and reaches nothing
    behind; a sessionless-protocol request naming an `mcp-session-id` gets 404,
    as the Streamable HTTP transport specifies for a session the server does
    not know. Lifespan events pass through.
    """

    def __init__(self, app: ASGIApp, token: BearerToken | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            # Nothing here speaks WebSocket: refuse before any handshake.
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if self.token is not None:
            given = headers.get("authorization")
            if not self.token.admits(given):
                await _unauthorized(send, missing=given is None)
                return
        if "mcp-session-id" in headers and is_sessionless(headers.get("mcp-protocol-version")):
            await _send_json(send, 404, _session_not_found())
            return
        await self.app(scope, receive, send)


def is_sessionless(protocol_version: str | None) -> bool:
    """Whether the SDK serves a request of this `MCP-Protocol-Version` without a session.

    The SDK's session manager routes by this header: a version outside the
    handshake era (unknown ones included) goes to its sessionless entry.

    >>> is_sessionless("2026-07-28"), is_sessionless("2025-06-18"), is_sessionless(None)
    (True, False, False)
    """
    return protocol_version is not None and protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS


async def _unauthorized(send: Send, *, missing: bool) -> None:
    # RFC 6750: no error code when no credentials were sent, invalid_token otherwise.
    challenge = 'Bearer realm="ledgerfs"' + ("" if missing else ', error="invalid_token"')
    body = {
        "error": "invalid_token" if not missing else "unauthorized",
        "error_description": "This server needs Authorization: Bearer <token>.",
    }
    await _send_json(send, 401, body, [(b"www-authenticate", challenge.encode())])


def _session_not_found() -> dict[str, object]:
    # The body the SDK sends for an unknown session: a JSON-RPC error without an id.
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}}


async def _send_json(
    send: Send,
    status: int,
    body: Mapping[str, object],
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    data = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(data)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
