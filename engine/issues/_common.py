"""Helpers shared by both adapters: redaction, idempotency keys and markers."""

from __future__ import annotations

import re
from typing import Any

import blake3
import msgspec

from ..errors import LedgerError

__all__ = [
    "MARKER_RE",
    "MAY_BE_APPLIED",
    "embed_marker",
    "make_marker",
    "marker_token",
    "may_be_applied",
    "redact",
    "write_key",
]

# The detail key an adapter sets when a write failed after it may have reached
# the provider; the service then records the write as "unknown", not failed.
MAY_BE_APPLIED = "may_be_applied"

_TOKEN_RES = (
    # Whole credentials first, so "Bearer <token>" goes as one piece.
    re.compile(r"(?i)\bBearer\s+[A-Za-z0-9._~+/=\-]+"),
    re.compile(r"(?i)(authorization:\s*(?:token|basic)\s+)\S+"),
    # GitHub tokens: classic PAT, OAuth, user-to-server, server-to-server, refresh.
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{16,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{16,}"),
    re.compile(r"\bglpat-[A-Za-z0-9_\-]{10,}"),
    re.compile(r"(?i)(PRIVATE-TOKEN[\"']?\s*[:=]\s*[\"']?)[^\s\"',]+"),
    re.compile(r"(?i)(token=)[^\s&\"']+"),
)

MARKER_RE = re.compile(r"<!-- ledgerfs:w=([0-9a-f]{16}) -->")


def redact(text: str, *secrets: str | None) -> str:
    """Replace every token-looking string (and the given secrets) by `[REDACTED]`.

    >>> redact("HTTP 401 for ghp_abcdefghijklmnopqrstuvwxyz0123")
    'HTTP 401 for [REDACTED]'
    >>> redact("Authorization: Bearer abc.def")
    'Authorization: [REDACTED]'
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[REDACTED]")
    for pattern in _TOKEN_RES:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + "[REDACTED]", text)
        else:
            text = pattern.sub("[REDACTED]", text)
    return text


def write_key(
    *, provider: str, repo: str, kind: str, number: int | None, title: str | None, body: str
) -> str:
    """The idempotency key of one write: blake3 of its identifying fields.

    >>> len(write_key(provider="github", repo="github.com/o/r", kind="issue",
    ...               number=None, title="t", body="b"))
    64
    """
    fields = [provider, repo, kind, number, title, body]
    return blake3.blake3(msgspec.json.encode(fields)).hexdigest()


def make_marker(key: str) -> str:
    """The hidden HTML comment that lets a write be found on the provider later.

    >>> make_marker("0123456789abcdef" + "0" * 48)
    '<!-- ledgerfs:w=0123456789abcdef -->'
    """
    return f"<!-- ledgerfs:w={key[:16]} -->"


def marker_token(marker: str) -> str:
    """The hex part of a marker, the one word a provider's search can index.

    >>> marker_token('<!-- ledgerfs:w=0123456789abcdef -->')
    '0123456789abcdef'
    """
    match = MARKER_RE.fullmatch(marker)
    if match is None:
        raise ValueError(f"not a ledgerfs marker: {marker!r}")
    return match.group(1)


def embed_marker(body: str, marker: str) -> str:
    """The body as posted: the caller's text, a blank line, then the marker.

    >>> embed_marker("hello", "<!-- ledgerfs:w=0123456789abcdef -->")
    'hello\\n\\n<!-- ledgerfs:w=0123456789abcdef -->'
    """
    if not body:
        return marker
    return f"{body.rstrip()}\n\n{marker}"


def may_be_applied(exc: LedgerError) -> bool:
    """Whether a failed write may nevertheless have reached the provider."""
    value: Any = exc.details.get(MAY_BE_APPLIED)
    return value is True
