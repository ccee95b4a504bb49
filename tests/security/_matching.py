"""Shared by the matching denial-of-service tests: a hostile call and an unrelated
one sent together to one real server, both answered within a generous timeout."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from tests.security._support import Server

#: Far above what any of these calls needs now (milliseconds), far below what the
#: backtracking patterns took (hours): it catches a freeze, not a slow machine.
TIMEOUT = 20.0

_ids = itertools.count(1_000_000)


def together(
    server: Server, hostile: tuple[str, dict[str, Any]], unrelated: tuple[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Send both tool calls at once; return both results, failing after TIMEOUT."""
    sent: dict[int, str] = {}
    for name, arguments in (hostile, unrelated):
        ident = next(_ids)
        sent[ident] = name
        server.send_raw(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": ident,
                    "method": "tools/call",
                    "params": {"name": name, "arguments": arguments},
                }
            )
        )
    replies: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + TIMEOUT
    while len(replies) < len(sent):
        message = server.read_message(timeout=max(deadline - time.monotonic(), 0.01))
        if message.get("id") in sent:
            replies[message["id"]] = message
    first, second = (replies[ident] for ident in sent)
    assert "result" in first and "result" in second, (first, second)
    return first["result"], second["result"]
