"""ledgerfs engine: the transactional core and its adapters."""
