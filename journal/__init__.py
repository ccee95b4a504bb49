"""ledgerfs journal: the SQLite transaction journal, blobs and recovery."""
