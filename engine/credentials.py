"""Bytes that are a credential, whatever the file holding them is called.

A hard link or a copy under an innocent name defeats every name rule, so each
load checks what it opened: a private key, or a known credential format. Kept
apart from the name rules (`policy`) and free of the engine's other modules, as
the search worker (`searchworker`) applies it in a process of its own.
"""

from __future__ import annotations

import re

import re2

__all__ = ["secret_content"]


# Content signatures. Each is cheap to rule out: a private key is found with one
# substring search over the file (no regex unless it hits); credential formats
# are judged on the file's first 4 KiB, each behind a literal a format must
# contain; a file that is just a token is matched whole. Measured in
# docs/security.md.
_HEAD = 4096
_TOKEN_FILE = 512
_PRIVATE_KEY = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ ){0,2}PRIVATE KEY(?: BLOCK)?-----")
# The literal every private key holds, found by RE2: three to four times as fast
# as bytes.find on source text, and without the GIL, so a long file holds no
# other thread back.
_KEY_LITERAL = re2.compile(b"PRIVATE KEY", re2.Options())
#: (literal in lower case, pattern, name): the pattern is tried where the literal is.
_HEAD_FORMATS: tuple[tuple[bytes, re.Pattern[bytes], str], ...] = (
    (
        b"aws_secret_access_key",
        re.compile(rb"(?mi)^[ \t]*aws_secret_access_key[ \t]*[=:][ \t]*\S{20,}"),
        "AWS credentials",
    ),
    (
        b"password",
        re.compile(rb"(?m)^[ \t]*machine[ \t]+\S+[ \t\n]+login[ \t]+\S+[ \t\n]+password[ \t]+\S"),
        "netrc credentials",
    ),
    (
        b":_authtoken=",
        re.compile(rb"(?m)^[ \t]*//\S+:_authToken=\S"),
        "npm token",
    ),
    (
        b"@",
        re.compile(rb"\A[ \t]*[a-z][a-z0-9+.-]*://[^\s:/@]+:[^\s/@]+@[^\s/]+"),
        "git credentials",
    ),
)
_PUTTY = b"PuTTY-User-Key-File-"
_PUTTY_KEY = re.compile(rb"PuTTY-User-Key-File-\d+:")
_TOKEN = re.compile(
    rb"\s*(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_\w{82}|glpat-[\w-]{20}|xox[bpoas]-[\w-]{10,}"
    rb"|[sr]k_live_[0-9A-Za-z]{24,}|AIza[\w-]{35}|npm_[A-Za-z0-9]{36}"
    rb"|pypi-AgEIcHlwaS5vcmc[\w-]{50,}|sk-ant-[\w-]{80,})\s*"
)


def secret_content(data: bytes) -> str | None:
    """The credential format `data` holds, or None.

    >>> secret_content(b"-----BEGIN OPENSSH PRIVATE KEY-----\\nb3Blbn...")
    'private key'
    >>> secret_content(b"def main():\\n    return 0\\n") is None
    True
    """
    found = _KEY_LITERAL.search(data)
    if found is not None:
        at = found.start()
        if _PRIVATE_KEY.search(data, max(0, at - 40), at + 30):
            return "private key"
    head = data[:_HEAD]
    # The literals are looked for case-blind, as a format may be read (an AWS
    # credentials file's keys are); each pattern then says what it accepts.
    folded = head.lower()
    for literal, pattern, name in _HEAD_FORMATS:
        if literal in folded and pattern.search(head):
            return name
    # Its pattern holds only at the start: a test of the first bytes, not a search.
    if head.startswith(_PUTTY) and _PUTTY_KEY.match(head):
        return "PuTTY private key"
    if len(data) <= _TOKEN_FILE and _TOKEN.fullmatch(data):
        return "access token"
    return None
