"""`python -m ledgerfs`: the `ledgerfs` command."""

from ledgerfs.engine.cli import main

main()
