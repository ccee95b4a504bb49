"""ledgerfs: an async, journaled file-mutation engine for AI-agent tool servers.

`from ledgerfs import Engine, LedgerError` is the embedding import (docs/embedding.md):
these names are the API an embedder builds on. Everything else stays importable
from its own module (`ledgerfs.engine.requests`, `ledgerfs.journal`, ...) for
adapters and tests, without being presented as that API.
"""

import importlib.metadata as _metadata

from .engine.config import Config
from .engine.core import Engine, Session
from .engine.errors import Code, Envelope, LedgerError

__all__ = ["Code", "Config", "Engine", "Envelope", "LedgerError", "Session"]

try:
    __version__ = _metadata.version("ledgerfs")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
