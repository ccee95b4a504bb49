"""`python -m engine`: the `ledgerfs` command."""

from .cli import main

main()
