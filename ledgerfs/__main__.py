"""The `ledgerfs` command (and `python -m ledgerfs`).

Where the system cannot run ledgerfs it exits with one sentence saying why,
before anything that needs POSIX is imported.
"""

import sys

from . import _UNSUPPORTED


def main() -> None:
    """Run the command line, or exit with the reason this system cannot."""
    if _UNSUPPORTED is not None:
        sys.exit(_UNSUPPORTED)
    from .engine.cli import main as run

    run()


if __name__ == "__main__":
    main()
