"""Print the README's set-up commands, word for word, one per line.

They are the `sh` blocks whose introducing line says "(run by .ci/run)": `.ci/run`
runs exactly these, so the README cannot drift from what CI proves. Standard library
only: it runs before anything is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MARK = "(run by .ci/run)"
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def setup_commands(markdown: str) -> list[str]:
    """The commands of the sh blocks introduced by a line carrying MARK, in order."""
    commands: list[str] = []
    for match in FENCE.finditer(markdown):
        before = markdown[: match.start()].rstrip().splitlines()
        if match.group(1) == "sh" and before and MARK in before[-1]:
            commands.extend(line for line in match.group(2).splitlines() if line.strip())
    return commands


if __name__ == "__main__":
    readme = Path(sys.argv[1] if len(sys.argv) > 1 else "README.md")
    print("\n".join(setup_commands(readme.read_text(encoding="utf-8"))))
