"""ledgerfs: an async, journaled file-mutation engine for AI-agent tool servers.

`from ledgerfs import Engine, Config` is the embedding import; the engine lives in
`ledgerfs.engine` and the SQLite journal in `ledgerfs.journal`.
"""

import importlib.metadata as _metadata

from ledgerfs.engine import *  # noqa: F403
from ledgerfs.engine import __all__ as __all__

try:
    __version__ = _metadata.version("ledgerfs")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
