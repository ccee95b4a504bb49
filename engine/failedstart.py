"""A stdio server that cannot start tells its client why, in the protocol's own terms.

Without this, a client whose server exits on a bad root or an unreadable journal sees
only "Connection closed". Instead the process answers the client's requests (the
`initialize` handshake, or a newer client's `server/discover` probe) with a JSON-RPC
error: its message is the envelope's code and message, its `data` the envelope
itself, so the SDK raises an error that says what is wrong. The envelope is also
written to stderr by the caller, which MCP hosts keep in their server logs.
"""

from __future__ import annotations

import sys
from typing import TextIO

import mcp_types as types

from .errors import LedgerError

__all__ = ["refusal", "refuse_stdio"]

#: The handshake request; once it is refused the client gives up, and so do we.
_HANDSHAKE = "initialize"


def refusal(error: LedgerError, request_id: types.RequestId) -> types.JSONRPCError:
    """The JSON-RPC error answering request `request_id` of a server that could not start."""
    body = error.envelope.error
    return types.JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=types.ErrorData(
            code=types.INTERNAL_ERROR,
            message=f"ledgerfs could not start: {body.code}: {body.message} ({body.suggestion})",
            data=error.envelope.to_builtins(),
        ),
    )


def refuse_stdio(
    error: LedgerError, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> None:
    """Answer every request on stdin with `error`, until `initialize` or the end of input.

    Plain blocking reads: nothing else runs in a process that could not start, and
    returning right after the handshake's answer lets the process exit at once
    (the SDK's stdio transport would wait for the client to close stdin).
    """
    lines, out = stdin or sys.stdin, stdout or sys.stdout
    for line in lines:
        try:
            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError:
            continue  # a line that is not JSON-RPC has nobody to answer
        if not isinstance(message, types.JSONRPCRequest):
            continue  # notifications and responses want no answer
        answer = refusal(error, message.id)
        out.write(answer.model_dump_json(by_alias=True, exclude_unset=True) + "\n")
        out.flush()
        if message.method == _HANDSHAKE:
            return
