"""ledgerfs journal: the SQLite transaction journal, blobs and recovery.

`journal` knows nothing about `engine`; the engine uses only the names below.
"""

from ._errors import JournalError, JournalErrorKind, TransactionStateError, errno_name
from ._journal import Journal
from ._records import (
    Durability,
    GcReport,
    IntegrityReport,
    IssueWrite,
    JournalStatistics,
    MutationRecord,
    TxIntent,
    TxRecord,
    Unfinished,
    content_hash,
)

__all__ = [
    "Durability",
    "GcReport",
    "IntegrityReport",
    "IssueWrite",
    "Journal",
    "JournalError",
    "JournalErrorKind",
    "JournalStatistics",
    "MutationRecord",
    "TransactionStateError",
    "TxIntent",
    "TxRecord",
    "Unfinished",
    "content_hash",
    "errno_name",
]
