"""`python -m ledgerfs`: the `ledgerfs` command."""

from .engine.cli import main

main()
