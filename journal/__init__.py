"""ledgerfs journal: the SQLite transaction journal, blobs and recovery.

`journal` knows nothing about `engine`; the engine uses only the names below.
"""

from ._errors import JournalError, JournalErrorKind, TransactionStateError, errno_name
from ._journal import Journal
from ._records import (
    CheckpointRecord,
    Durability,
    GcReport,
    IntegrityReport,
    IssueWrite,
    JournalLoss,
    JournalStatistics,
    MutationRecord,
    SessionRecord,
    TxIntent,
    TxRecord,
    Unfinished,
    content_hash,
)

__all__ = [
    "CheckpointRecord",
    "Durability",
    "GcReport",
    "IntegrityReport",
    "IssueWrite",
    "Journal",
    "JournalError",
    "JournalErrorKind",
    "JournalLoss",
    "JournalStatistics",
    "MutationRecord",
    "SessionRecord",
    "TransactionStateError",
    "TxIntent",
    "TxRecord",
    "Unfinished",
    "content_hash",
    "errno_name",
]
