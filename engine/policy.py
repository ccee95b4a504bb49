"""Which files the engine refuses to touch: secrets and its own internals.

The name rules match names as `characters.folded` gives them: case-insensitively,
so they hold on case-insensitive file systems too, and in NFKC form with the
default-ignorable code points dropped, so a look-alike (`\\uff0eenv` with a
full-width dot, `.e\\u00adnv` with a soft hyphen) is the name it imitates. They
see through backup and editor names (`id_rsa~`, `.env.bak`, `#.env#`,
`.id_rsa.swp`): a copy of a secret is a secret. They are checked on both the
path a client gave and the resolved one, so a symlink cannot
disguise a secret and a secret cannot hide behind one.

A hard link or a copy under an innocent name defeats any name rule, so two more
checks run on what a load actually opened (`credentials.secret_content`, and the link count
the sandbox checks): bytes that are a private key or a known credential format
are a secret whatever the file is called.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

from .characters import folded
from .discovery import JOURNAL_DIR

__all__ = [
    "INTERNAL_DIRS",
    "SECRET_DIRS",
    "SECRET_NAMES",
    "internal_part",
    "secret_reason",
    "undecorated",
]

#: Folders the engine never reads or writes through: its journal and git's internals.
INTERNAL_DIRS: frozenset[str] = frozenset({JOURNAL_DIR, ".git"})

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
    >>> secret_reason(["keys", "id_ed25519.old"])
    'name matches id_ed25519'
    >>> secret_reason(["app", "\uff0eenv"])
    'name matches .env'
    """
    names = [folded(part) for part in parts]
    if not names:
        return None
    for folder in names[:-1]:
        if folder in SECRET_DIRS or (
            _maybe_decorated(folder) and not SECRET_DIRS.isdisjoint(undecorated(folder))
        ):
            return f"inside {folder}/"
    last = names[-1]
    for name in undecorated(last) if _maybe_decorated(last) else (last,):
        # One combined regex answers the common "not a secret" on every call; only
        # a match walks the patterns to name the rule.
        if _SECRET_NAME_RE.match(name) is None:
            continue
        for pattern in SECRET_NAMES:
            if fnmatch.fnmatchcase(name, pattern):
                return f"name matches {pattern}"
    return None


def internal_part(parts: Iterable[str]) -> str | None:
    """The engine-internal folder a path's parts lie in (`.git` or `.ledgerfs`), or None.

    >>> internal_part(["w", ".git", "config"])
    '.git'
    >>> internal_part(["w", "src", "git.py"]) is None
    True
    >>> internal_part(["w", ".\uff27\uff29\uff34", "config"]) == ".\uff27\uff29\uff34"
    True
    """
    for part in parts:
        if folded(part) in INTERNAL_DIRS:
            return part
    return None


# Backup and editor decorations around a name: `name~`, `name.~1~`,
# `name.bak`/`.old`/`.orig`/..., emacs `#name#` and `.#name`, vim `.name.swp`,
# and the "copy" marks file managers add.
_BACKUP_SUFFIX = re.compile(
    r"(?:~|\.~\d+~|\.(?:bak|backup|bck|old|orig|prev|previous|save|saved|sav|tmp|temp|copy"
    r"|swp|swo|swn|swx|un~|rej|\d+)| ?\(copy(?: \d+)?\)| copy(?: \d+)?)\Z"
)
_VIM_SWAP = (".swp", ".swo", ".swn", ".swx")
_EDITOR_PREFIX = ("copy of ", ".#", "#")
# What a decorated name can end or start with; anything else is its own name.
_DECORATED_END = ("~", "#", ")", "copy", *(f"copy {n}" for n in range(1, 10)))


def undecorated(name: str) -> frozenset[str]:
    """`name` and every name it is a backup or editor copy of (casefold `name` first).

    >>> sorted(undecorated(".id_rsa.swp"))
    ['.id_rsa', '.id_rsa.swp', 'id_rsa']
    >>> sorted(undecorated("#.env#"))
    ['#.env', '#.env#', '.env', '.env#']
    >>> undecorated("main.py")
    frozenset({'main.py'})
    """
    if not _maybe_decorated(name):
        return frozenset((name,))
    seen = {name}
    todo = [name]
    while todo:
        current = todo.pop()
        for bare in _strip_once(current):
            if bare and bare not in seen:
                seen.add(bare)
                todo.append(bare)
    return frozenset(seen)


_BACKUP_EXTENSIONS = frozenset(
    [
        "bak",
        "backup",
        "bck",
        "old",
        "orig",
        "prev",
        "previous",
        "save",
        "saved",
        "sav",
        "tmp",
        "temp",
        "copy",
        "swp",
        "swo",
        "swn",
        "swx",
        "rej",
    ]
)


def _maybe_decorated(name: str) -> bool:
    # Cheap and on every resolve: most names end in an ordinary extension.
    if name.endswith(_DECORATED_END) or name.startswith(_EDITOR_PREFIX):
        return True
    extension = name.rpartition(".")[2]
    return extension in _BACKUP_EXTENSIONS or extension.isdigit()


def _strip_once(name: str) -> list[str]:
    stripped = []
    bare = _BACKUP_SUFFIX.sub("", name)
    stripped.append(bare)
    if name.startswith(".") and name.endswith(_VIM_SWAP):
        stripped.append(name[1:-4])
    for prefix in _EDITOR_PREFIX:
        if name.startswith(prefix):
            stripped.append(name[len(prefix) :])
    if name.endswith("#"):
        stripped.append(name[:-1])
    return stripped
