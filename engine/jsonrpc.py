"""What a line of the stdio wire is: a message for the MCP SDK, or the reply the server owes.

Every line is judged once, here, by JSON-RPC 2.0 as MCP uses it. The rules, in order:

- A blank line is framing, not a message: no reply.
- A line that is not UTF-8 is not JSON text (RFC 8259): `-32700`, always answered,
  the id echoed when the line's id is usable. A well-formed tools/call is the one
  exception: the server answers it with the VALIDATION envelope naming the field, as
  it does for a lone surrogate. Its bad bytes never reach the SDK, so no U+FFFD
  replacement can reach a file.
- A line that is not JSON: `-32700`, id null.
- A batch (an array): MCP has no batches, so it is refused whole, never run. Each
  request in it that carries a usable id gets its own `-32600` line with that id (a
  client waiting on the id is answered); an array with none gets one `-32600`, id null.
- A response (no `method`, a `result` or `error`) is never answered; a valid one goes
  to the SDK.
- An id that is neither a string of UTF-8 text nor an integer (`1.5`, `true`, an
  object, `null`: MCP forbids a null id): `-32600`, id null.
- `jsonrpc` other than `"2.0"`, a `method` that is not a string, `params` neither an
  object, an array nor null: `-32600`, with the id, or null without one (an invalid
  notification is answered, as in JSON-RPC's own examples).
- A valid notification (no `id`) is never answered, even when the SDK cannot take it.
- A request whose method name is not UTF-8 text: `-32601`; whose params are an array
  (by position; MCP names them) or hold text that is not UTF-8: `-32602` (for a
  tools/call, the VALIDATION envelope naming the field).
- Anything else goes to the SDK, which answers an unknown method with `-32601`.

A line over the stdio reader's cap is never parsed: `refuse_oversized` recovers the
id and method from its first and last bytes where they are plain members there.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import mcp_types as types
import msgspec

__all__ = ["Refusal", "classify", "refuse_oversized"]

#: Why a line was refused, for the server's reply: a tools/call refused for
#: `not_utf8` or `too_long` is answered with a VALIDATION envelope.
Fault = Literal["shape", "not_utf8", "too_long"]

_SURROGATE = re.compile("[\ud800-\udfff]")
_BATCH = "Invalid request: batch arrays are not supported; send one message per line."


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    """A line the server answers itself, with a JSON-RPC error (or a VALIDATION envelope)."""

    id: int | str | None
    code: int
    message: str
    fault: Fault = "shape"
    #: The request's method and params, when the fault is in the params' text or size.
    method: str | None = None
    params: dict[str, Any] | None = None


def _not_utf8(
    ident: int | str, code: int, message: str, method: str, params: dict[str, Any] | None
) -> Refusal:
    """A call whose line or params are not UTF-8: refused, its method and params kept
    so that a tools/call is answered as that tool's VALIDATION envelope."""
    return Refusal(
        id=ident, code=code, message=message, fault="not_utf8", method=method, params=params
    )


def classify(line: bytes | bytearray) -> types.JSONRPCMessage | list[Refusal]:
    """The message `line` holds, or what to answer in its place (nothing, when empty).

    >>> classify(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}')
    JSONRPCRequest(jsonrpc='2.0', id=1, method='ping', params=None)
    >>> [r.code for r in classify(b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}')]
    [-32600]
    >>> classify(b"  ")
    []
    """
    if not line or line.isspace():  # (strip() would copy a long line)
        return []
    try:
        # The SDK's own parser first: the one a valid request takes, in C.
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        pass
    else:
        # The SDK reads a request whose id it cannot type (1.5, true) as a
        # notification: a notification is judged again, with the id in view.
        if not isinstance(message, types.JSONRPCNotification):
            return message
    return _classify_value(line)


def refuse_oversized(head: bytes, tail: bytes, size: int, cap: int) -> Refusal:
    """The refusal of a line of `size` bytes over `cap`, of which `head` and `tail` were kept.

    The id and method are recovered where they are plain members at either end
    (the order SDKs write: `jsonrpc`, `id`, `method` first, or `id` last).

    >>> refuse_oversized(b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x', b'"}}',
    ...                  99, 10).id
    7
    >>> refuse_oversized(b'{"method":"ping","params":{"a":"', b'xx"},"jsonrpc":"2.0","id":"q"}',
    ...                  99, 10).id
    'q'
    """
    members = {**_trailing_members(tail.decode("utf-8", "ignore")), **_leading_members(head)}
    method = members.get("method")
    return Refusal(
        id=_usable_id(members.get("id")),
        code=types.INVALID_REQUEST,
        message=f"Invalid request: the line is {size} bytes, over the {cap}-byte line cap.",
        fault="too_long",
        method=method if isinstance(method, str) else None,
    )


def _classify_value(line: bytes | bytearray) -> types.JSONRPCMessage | list[Refusal]:
    try:
        text, not_utf8 = line.decode("utf-8"), False
    except UnicodeDecodeError:
        # Bad bytes become lone surrogates (U+DC80-U+DCFF), which JSON's strings hold.
        text, not_utf8 = line.decode("utf-8", "surrogateescape"), True
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        what = "UTF-8" if not_utf8 else "JSON"
        return [
            Refusal(
                id=None, code=types.PARSE_ERROR, message=f"Parse error: the line is not {what}."
            )
        ]
    if isinstance(value, list):
        return _refuse_batch(value, not_utf8)
    judged = _judge(value, not_utf8)
    if judged is None:
        return []
    return [judged] if isinstance(judged, Refusal) else judged


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _judge(value: Any, not_utf8: bool) -> types.JSONRPCMessage | Refusal | None:
    """One JSON value of a line: the message, the refusal, or None (nothing to answer)."""
    if not isinstance(value, dict):
        return _refused(None, not_utf8, "Invalid request: a message is a JSON object.")
    if _is_response(value):
        # A reply to the server's own request: JSON-RPC never answers one.
        return None if not_utf8 else _message(value, answered=False)
    ident = _usable_id(value.get("id"))
    if not_utf8:
        method = value.get("method")
        if ident is not None and method == "tools/call" and _shape_fault(value) is None:
            params = value.get("params")
            return _not_utf8(
                ident,
                types.PARSE_ERROR,
                "Parse error: the line is not UTF-8.",
                method,
                params if isinstance(params, dict) else None,
            )
        return _refused(ident, not_utf8, "")
    if "id" in value and ident is None:
        return Refusal(
            id=None,
            code=types.INVALID_REQUEST,
            message="Invalid request: the id must be a string of UTF-8 text or an integer.",
        )
    if (fault := _shape_fault(value)) is not None:
        return Refusal(id=ident, code=types.INVALID_REQUEST, message=f"Invalid request: {fault}.")
    if ident is None:
        # A notification: never answered, even one the SDK cannot take.
        if isinstance(value.get("params"), list) or _holds_surrogate(value):
            return None
        return _message(value)
    method, params = value["method"], value.get("params")
    if _holds_surrogate(method):
        return Refusal(
            id=ident,
            code=types.METHOD_NOT_FOUND,
            message="Method not found: its name is not UTF-8 text.",
        )
    if isinstance(params, list):
        return Refusal(
            id=ident,
            code=types.INVALID_PARAMS,
            message="Invalid params: MCP takes params by name (an object), not by position.",
        )
    if _holds_surrogate(params):
        return _not_utf8(
            ident,
            types.INVALID_PARAMS,
            "Invalid params: text that is not UTF-8 (a lone surrogate).",
            method,
            params,
        )
    return _message(value)


def _refused(ident: int | str | None, not_utf8: bool, why: str) -> Refusal:
    if not_utf8:
        return Refusal(
            id=ident, code=types.PARSE_ERROR, message="Parse error: the line is not UTF-8."
        )
    return Refusal(id=ident, code=types.INVALID_REQUEST, message=why)


def _refuse_batch(items: list[Any], not_utf8: bool) -> list[Refusal]:
    code = types.PARSE_ERROR if not_utf8 else types.INVALID_REQUEST
    idents: list[int | str | None] = [
        ident
        for item in items
        if isinstance(item, dict)
        and not _is_response(item)
        and (ident := _usable_id(item.get("id"))) is not None
    ]
    return [Refusal(id=ident, code=code, message=_BATCH) for ident in idents or [None]]


def _is_response(value: dict[str, Any]) -> bool:
    return "method" not in value and ("result" in value or "error" in value)


def _usable_id(ident: Any) -> int | str | None:
    """The id to echo: an integer or a string of UTF-8 text, else None.

    >>> [_usable_id(x) for x in (3, "a", 1.5, True, None, [1], "\\udce9")]
    [3, 'a', None, None, None, None, None]
    """
    if isinstance(ident, int) and not isinstance(ident, bool):
        return ident
    if isinstance(ident, str) and not _is_broken(ident):
        return ident
    return None


def _shape_fault(value: dict[str, Any]) -> str | None:
    """What makes `value` no JSON-RPC 2.0 request or notification, or None."""
    if value.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if not isinstance(value.get("method"), str):
        return "method must be a string"
    if not isinstance(value.get("params"), dict | list | None):
        return "params must be an object"
    return None


def _holds_surrogate(value: Any) -> bool:
    """Whether any string in `value` (keys too) holds a lone surrogate, which UTF-8 cannot.

    Iterative: a value as deeply nested as the JSON parser allows must not overflow the stack.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _is_broken(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _is_broken(text: str) -> bool:
    """Whether `text` holds a lone surrogate: a bad byte of the line, or a `\\ud800` escape."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def _message(
    value: dict[str, Any], *, answered: bool = True
) -> types.JSONRPCMessage | Refusal | None:
    """The SDK's message for `value`; should the SDK refuse it, `-32600` or, unanswered, None."""
    try:
        return types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValueError:
        ident = _usable_id(value.get("id"))
        if not answered or ident is None:
            return None
        return Refusal(id=ident, code=types.INVALID_REQUEST, message="Invalid request.")


# ---------------------------------------------------------------- an oversized line's ends

_DECODER = json.JSONDecoder()
_SPACE = " \t\r\n"


def _leading_members(text_bytes: bytes) -> dict[str, Any]:
    """The scalar members that start the object `text_bytes` starts, up to the first that is not."""
    text = text_bytes.decode("utf-8", "ignore")
    found: dict[str, Any] = {}
    pos = _skip(text, 0)
    if not text.startswith("{", pos):
        return found
    pos += 1
    try:
        while True:
            key, pos = _DECODER.raw_decode(text, _skip(text, pos))
            pos = _skip(text, pos)
            if not isinstance(key, str) or not text.startswith(":", pos):
                return found
            pos = _skip(text, pos + 1)
            if text[pos] in "{[":
                return found
            found[key], pos = _DECODER.raw_decode(text, pos)
            pos = _skip(text, pos)
            if not text.startswith(",", pos):
                return found
            pos += 1
    except (ValueError, IndexError):
        return found


def _trailing_members(text: str) -> dict[str, Any]:
    """The scalar members that end the object `text` ends, back to the first that is not."""
    found: dict[str, Any] = {}
    end = len(text.rstrip(_SPACE))
    if not text.endswith("}", 0, end):
        return found
    end = len(text[: end - 1].rstrip(_SPACE))
    while True:
        value_start = _scalar_start(text, end)
        if value_start is None:
            return found
        colon = len(text[:value_start].rstrip(_SPACE))
        if not text.endswith(":", 0, colon):
            return found
        key_end = len(text[: colon - 1].rstrip(_SPACE))
        key_start = _scalar_start(text, key_end)
        if key_start is None:
            return found
        try:
            key = json.loads(text[key_start:key_end])
            value = json.loads(text[value_start:end], parse_constant=_no_constant)
        except ValueError:
            return found
        if not isinstance(key, str):
            return found
        found.setdefault(key, value)
        end = len(text[:key_start].rstrip(_SPACE))
        if not text.endswith(",", 0, end):
            return found
        end = len(text[: end - 1].rstrip(_SPACE))


def _scalar_start(text: str, end: int) -> int | None:
    """Where the JSON scalar ending at `end` starts, or None when none ends there.

    A `"` inside a string is always escaped, so the opening quote of a string is
    the first `"` before its close that an even number of backslashes precede.
    """
    if end <= 0:
        return None
    if text[end - 1] == '"':
        quote = end - 1
        while (quote := text.rfind('"', 0, quote)) >= 0:
            slashes = quote - len(text[:quote].rstrip("\\"))
            if slashes % 2 == 0:
                return quote
        return None
    start = end
    while start > 0 and text[start - 1] not in _SPACE + ",:{[":
        start -= 1
    return start if start < end else None


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _SPACE:
        pos += 1
    return pos
