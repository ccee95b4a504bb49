"""ledgerfs: an async, journaled file-mutation engine for AI-agent tool servers.

`from ledgerfs import Engine, LedgerError` is the embedding import (docs/embedding.md):
these names are the API an embedder builds on. Everything else stays importable
from its own module (`ledgerfs.engine.requests`, `ledgerfs.journal`, ...) for
adapters and tests, without being presented as that API.

ledgerfs runs on Linux and macOS. Elsewhere importing this package still works
(so the `ledgerfs` command can say why it cannot run, in one sentence); the
names below then raise ImportError with that sentence.
"""

import importlib.metadata as _metadata
import sys as _sys


def _unsupported() -> str | None:
    """Why this system cannot run ledgerfs, or None where it can."""
    try:
        import fcntl  # noqa: F401  # the file and journal locks are POSIX record locks
    except ImportError:
        return (
            f"ledgerfs runs on Linux and macOS with Python 3.11 or newer; this system"
            f" ({_sys.platform}) lacks the POSIX file locks (fcntl) that its journal relies on."
        )
    return None


#: The sentence the `ledgerfs` command exits with where it cannot run (None: it can).
_UNSUPPORTED = _unsupported()

if _UNSUPPORTED is None:
    from .engine.config import Config
    from .engine.core import Engine, Session
    from .engine.errors import Code, Envelope, LedgerError
else:

    def __getattr__(name: str) -> object:
        raise ImportError(_UNSUPPORTED)


__all__ = ["Code", "Config", "Engine", "Envelope", "LedgerError", "Session"]

try:
    __version__ = _metadata.version("ledgerfs")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
