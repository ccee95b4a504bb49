"""ledgerfs journal: the SQLite transaction journal, blobs and recovery.

`journal` knows nothing about `engine`; the engine uses only the names below.
"""

# The folder is importable from a checkout's root as `journal`, a second name that would
# load every module twice: a second JournalError that `except` would miss. One name only,
# unless the package above says it holds another checkout's journal on purpose (the A/B
# benchmark measures two checkouts' journals in one process).
import sys as _sys

if __name__ != "ledgerfs.journal" and not getattr(
    _sys.modules.get(__name__.rpartition(".")[0]), "OTHER_CHECKOUT", False
):
    raise ImportError(
        f"ledgerfs's journal/ folder is the package ledgerfs.journal, not {__name__!r}: "
        "install ledgerfs (pip install -e .) and import ledgerfs.journal"
    )


from ._audit import AuditMutation, AuditRecord, ExportCheck, check_export
from ._codec import stored_path
from ._errors import JournalError, JournalErrorKind, TransactionStateError, errno_name
from ._journal import Journal, recorded_roots
from ._records import (
    CheckpointRecord,
    Durability,
    GcReport,
    IntegrityReport,
    IssueWrite,
    JournalLoss,
    JournalStatistics,
    MutationRecord,
    PathSeen,
    Relocation,
    SessionFacts,
    SessionRecord,
    TxIntent,
    TxRecord,
    Unfinished,
    VerifiedPoint,
    content_hash,
)

__all__ = [
    "AuditMutation",
    "AuditRecord",
    "CheckpointRecord",
    "Durability",
    "ExportCheck",
    "GcReport",
    "IntegrityReport",
    "IssueWrite",
    "Journal",
    "JournalError",
    "JournalErrorKind",
    "JournalLoss",
    "JournalStatistics",
    "MutationRecord",
    "PathSeen",
    "Relocation",
    "SessionFacts",
    "SessionRecord",
    "TransactionStateError",
    "TxIntent",
    "TxRecord",
    "Unfinished",
    "VerifiedPoint",
    "check_export",
    "content_hash",
    "errno_name",
    "recorded_roots",
    "stored_path",
]
