"""Every code block of README.md and docs/ runs as written, so the docs cannot rot.

`python` blocks run as scripts given an empty folder; `sh` blocks run with bash in a
workspace holding the journal they describe; `json` blocks are parsed; `sql` blocks
are executed in SQLite. `text` blocks are listings and diagrams. A runnable block that
is not run says so on the line introducing it: "(not run: why)", or "(run by
.ci/run)" for the README's set-up commands, which CI runs word for word.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from ledgerfs.engine import Engine
from tests.server._support import REPO, server_env

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUNNABLE = {"python", "sh", "json", "sql"}
NOT_RUN = "(not run"
CI_RUN = "(run by .ci/run)"
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


class Block(msgspec.Struct, frozen=True, kw_only=True):
    doc: str
    line: int
    lang: str
    code: str
    intro: str

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def runs_here(self) -> bool:
        return self.lang in RUNNABLE and NOT_RUN not in self.intro and CI_RUN not in self.intro


def blocks() -> list[Block]:
    found: list[Block] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            before = text[: match.start()].rstrip().splitlines()
            found.append(
                Block(
                    doc=str(doc.relative_to(REPO)),
                    line=text.count("\n", 0, match.start()) + 1,
                    lang=match.group(1),
                    code=match.group(2),
                    intro=before[-1] if before else "",
                )
            )
    return found


ALL = blocks()


def of(lang: str) -> list[Block]:
    return [b for b in ALL if b.lang == lang and b.runs_here]


def test_every_block_says_what_it_is() -> None:
    untagged = [b.id for b in ALL if b.lang not in RUNNABLE | {"text"}]
    assert untagged == [], "tag each block python, sh, json, sql or text"
    assert len(of("python")) >= 3 and of("sh") and of("json") and of("sql")


@pytest.mark.parametrize("block", of("json"), ids=lambda b: b.id)
def test_json_blocks_parse(block: Block) -> None:
    json.loads(block.code)


@pytest.mark.parametrize("block", of("sql"), ids=lambda b: b.id)
def test_sql_blocks_run_in_sqlite(block: Block) -> None:
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(block.code)
    finally:
        db.close()


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # The venv's bin first, as for a user who activated it; no PYTHONPATH to the clone.
    env = {k: v for k, v in server_env().items() if k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        args,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def undid_the_edit(root: Path, out: str) -> None:
    assert "read_and_rebase" in out
    assert (root / "notes.txt").read_text() == "one\n"


def edited(root: Path, out: str) -> None:
    assert "-old\n+new\n" in out
    assert (root / "notes.txt").read_text() == "new\n"


def rewound_one_agent(root: Path, out: str) -> None:
    assert "-agent 2\n+line 2\n" in out and "plan.txt outside" in out
    kept = (root / "plan.txt").read_text()
    assert "other 8\n" in kept and "person 5\n" in kept and "agent 2" not in kept


def refused(root: Path, out: str) -> None:
    assert "ledgerfs could not start: NOT_FOUND: Root " in out
    assert not (root / "no-such-folder").exists()


#: What a script must leave behind, found by a phrase of its code.
EFFECTS = {
    "undone = await handle(": undid_the_edit,
    "no-such-folder": refused,
    '"new_text": "new"': edited,
    '"rewind", {"checkpoint"': rewound_one_agent,
}


@pytest.mark.parametrize("block", of("python"), ids=lambda b: b.id)
def test_python_blocks_run_as_scripts(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(block.code)
    root = tmp_path / "ws"
    root.mkdir()
    done = run([sys.executable, str(script), str(root)], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    [effect] = [check for phrase, check in EFFECTS.items() if phrase in block.code]
    effect(root, done.stdout)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def described(tmp_path: Path) -> Path:
    """The workspace the sh blocks describe: notes.txt written (1), then edited (2)."""
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    async with Engine.open({"roots": [str(root)]}) as engine:
        session = await engine.session()
        await session.call("write_file", {"path": "notes.txt", "content": "one\n"})
        await session.call(
            "edit_file", {"path": "notes.txt", "edits": [{"old_text": "one", "new_text": "two"}]}
        )
    return root


@pytest.mark.anyio
@pytest.mark.parametrize("block", of("sh"), ids=lambda b: b.id)
async def test_sh_blocks_run_in_the_workspace_they_describe(block: Block, described: Path) -> None:
    done = run(["bash", "-euo", "pipefail", "-c", block.code], cwd=described)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_setup_commands_are_what_ci_runs() -> None:
    marked = [b for b in ALL if CI_RUN in b.intro]
    assert [b.lang for b in marked] == ["sh", "sh"]
    assert all(b.doc == "README.md" for b in marked)
    done = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "readme_commands.py"), str(REPO / "README.md")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.splitlines() == [b.code.strip() for b in marked]
    assert ".ci/readme_commands.py README.md" in (REPO / ".ci" / "run").read_text()
    assert marked[-1].code.strip().endswith("python -m pytest -q -n 2 --dist loadfile")
