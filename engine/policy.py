"""Which files the engine refuses to touch: secrets and its own internals.

The rules match names, case-insensitively, so they hold on case-insensitive file
systems too. They are checked on both the path a client gave and the resolved one,
so a link cannot disguise a secret and a secret cannot hide behind a link.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

__all__ = ["INTERNAL_DIRS", "SECRET_DIRS", "SECRET_NAMES", "internal_part", "secret_reason"]

#: Folders the engine never reads or writes through: its journal and git's internals.
INTERNAL_DIRS: frozenset[str] = frozenset({".ledgerfs", ".git"})

#: File names (glob patterns) that hold secrets.
SECRET_NAMES: tuple[str, ...] = (
    ".env",
    ".env.*",
    "*.env",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "id_ecdsa_sk",
    "id_ed25519_sk",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.keystore",
    "*.jks",
    ".netrc",
    "_netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".pgpass",
    "credentials",
    "credentials.*",
    "*.credentials",
    "secrets.yml",
    "secrets.yaml",
    "secrets.json",
)

_SECRET_NAME_RE = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in SECRET_NAMES))

#: Folders whose every file is a secret.
SECRET_DIRS: frozenset[str] = frozenset({".ssh", ".gnupg", ".aws", ".docker", ".kube"})


def secret_reason(parts: Iterable[str]) -> str | None:
    """The rule that makes a path a secret, or None.

    >>> secret_reason(["app", ".env.local"])
    'name matches .env.*'
    >>> secret_reason(["home", ".ssh", "config"])
    'inside .ssh/'
    >>> secret_reason(["src", "main.py"]) is None
    True
    """
    names = [part.casefold() for part in parts]
    if not names:
        return None
    for folder in names[:-1]:
        if folder in SECRET_DIRS:
            return f"inside {folder}/"
    name = names[-1]
    # One combined regex answers the common "not a secret" on every call; only a
    # match walks the patterns to name the rule.
    if _SECRET_NAME_RE.match(name) is None:
        return None
    for pattern in SECRET_NAMES:
        if fnmatch.fnmatchcase(name, pattern):
            return f"name matches {pattern}"
    return None  # pragma: no cover - the combined regex matched one of them


def internal_part(parts: Iterable[str]) -> str | None:
    """The engine-internal folder a path's parts lie in (`.git` or `.ledgerfs`), or None.

    >>> internal_part(["w", ".git", "config"])
    '.git'
    >>> internal_part(["w", "src", "git.py"]) is None
    True
    """
    for part in parts:
        if part.casefold() in INTERNAL_DIRS:
            return part
    return None
