"""A secret stays a secret under another name: backup and editor names, hard links, content.

Each case lays out a file that is a secret though its name may not say so. Every
tool that would show its bytes (a read, file info, a dry-run diff, an edit, a
delete or move whose before image the journal would keep) is SECRET_DENIED,
through the engine and the real stdio server; the bytes never appear in a reply
or in the journal, and the file is unchanged. With --allow-secrets the same
files read normally, and look-alikes that are not secrets always do.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Engine, LedgerError

from ._support import Server, error, ok

MARK = "S3CR3T-MARK"
PRIVATE_KEY = (
    f"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA{MARK}\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
DOTENV = f"API_TOKEN={MARK}\n"

Plant = Callable[[Path], str]  # lays the case out under the root; returns the name to attack


def named(name: str, content: str = DOTENV) -> Plant:
    def plant(root: Path) -> str:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        return name

    return plant


def hard_link(secret: str, alias: str, content: str) -> Plant:
    def plant(root: Path) -> str:
        (root / secret).parent.mkdir(parents=True, exist_ok=True)
        (root / secret).write_text(content)
        os.link(root / secret, root / alias)
        return alias

    return plant


SECRETS = [
    pytest.param(named("id_rsa.bak", PRIVATE_KEY), id="id_rsa.bak"),
    pytest.param(named("id_rsa~", PRIVATE_KEY), id="id_rsa~"),
    pytest.param(named("id_ed25519.old", "k " + MARK), id="id_ed25519.old"),
    pytest.param(named(".env~"), id=".env~"),
    pytest.param(named(".env.swp"), id=".env.swp"),
    pytest.param(named(".id_rsa.swp", "k " + MARK), id="vim-swap"),
    pytest.param(named("#.env#"), id="emacs-autosave"),
    pytest.param(named(".#.env"), id="emacs-lock"),
    pytest.param(named("server.key.orig", "k " + MARK), id="key.orig"),
    pytest.param(named("credentials.json.bak", MARK), id="credentials.bak"),
    pytest.param(named("id_rsa (copy)", "k " + MARK), id="id_rsa-copy"),
    pytest.param(named("id_rsa.~2~", "k " + MARK), id="numbered-backup"),
    pytest.param(named(".ssh.old/config", "Host x " + MARK), id="backup-of-.ssh"),
    pytest.param(hard_link(".env", "notes.txt", DOTENV), id="hard-link-to-.env"),
    pytest.param(hard_link(".ssh/id_rsa", "readme.md", PRIVATE_KEY), id="hard-link-to-key"),
    pytest.param(named("notes.txt", PRIVATE_KEY), id="content-private-key"),
    pytest.param(named("key.txt", "-----BEGIN RSA PRIVATE KEY-----\n" + MARK), id="content-rsa"),
    pytest.param(
        named("pgp.asc", f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n{MARK}\n"), id="content-pgp"
    ),
    pytest.param(
        named(
            "settings.ini",
            "[default]\naws_access_key_id = AKIA\n"
            f"aws_secret_access_key = {MARK}xxxxxxxxxxxxxxxxxxxx\n",
        ),
        id="content-aws",
    ),
    pytest.param(
        named(
            "settings.ini",
            "[default]\nAWS_ACCESS_KEY_ID = AKIA\n"
            f"AWS_Secret_Access_Key = {MARK}xxxxxxxxxxxxxxxxxxxx\n",
        ),
        id="content-aws-other-case",
    ),
    pytest.param(
        named("registry.conf", f"//registry.example.com/:_authToken={MARK}\n"),
        id="content-npm-token",
    ),
    pytest.param(
        named("hosts.txt", f"machine example.com\n  login me\n  password {MARK}\n"),
        id="content-netrc",
    ),
    pytest.param(
        named("saved.txt", f"https://me:{MARK}@github.com\n"), id="content-git-credentials"
    ),
    pytest.param(named("token", "ghp_" + "A1b2" * 9 + "\n"), id="content-github-token"),
    pytest.param(
        named("conf.txt", f"PuTTY-User-Key-File-3: ssh-ed25519\n{MARK}\n"), id="content-putty"
    ),
]

# Files that only look like secrets: always readable.
LOOKALIKES = [
    ("id_rsa.pub", "ssh-ed25519 AAAA me\n"),
    ("keys.md", "Never commit a PRIVATE KEY or a BEGIN line.\n"),
    ("env.py", "import os\nTOKEN = os.environ['API_TOKEN']\n"),
    ("backup~", "plain\n"),
    ("notes.txt.bak", "plain\n"),
    ("mentions.txt", "ghp_ tokens start with ghp_\n"),
]


def attacks(name: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("read_file", {"path": name}),
        ("get_file_info", {"path": name}),
        ("write_file", {"path": name, "content": "replaced\n", "dry_run": True}),
        ("write_file", {"path": name, "content": "replaced\n"}),
        ("edit_file", {"path": name, "edits": [{"old_text": MARK, "new_text": "x"}]}),
        ("delete_file", {"path": name}),
        ("move_file", {"source": name, "destination": "moved"}),
        ("batch", {"operations": [{"op": "delete", "path": name}], "dry_run": True}),
    ]


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".ledgerfs" not in p.parts
    }


def journal_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def plant_all(root: Path) -> list[str]:
    """Every case in its own folder of one root; the names to attack, from the root."""
    names = []
    for case in SECRETS:
        folder = root / str(case.id)
        folder.mkdir(parents=True)
        plant: Plant = case.values[0]  # type: ignore[assignment]
        names.append(f"{case.id}/{plant(folder)}")
    return names


def test_server_denies_secrets_under_other_names(tmp_path: Path) -> None:
    root = tmp_path / "root"
    names = plant_all(root)
    before = snapshot(root)
    journal = tmp_path / "j.db"
    with Server(root, "--journal", journal) as server:
        for name in names:
            for tool, arguments in attacks(name):
                result = server.call(tool, arguments)
                assert MARK not in str(result), (name, tool)
                assert error(result, "SECRET_DENIED")["path"] is not None
            files = ok(server.call("read_multiple_files", {"paths": [name]}))["files"]
            assert files[0]["error"]["code"] == "SECRET_DENIED", files
        # Searches and trees neither show the bytes nor (for names) the files.
        for tool, arguments in [
            ("search_files", {"path": ".", "content": MARK}),
            ("search_files", {"path": ".", "content": "PRIVATE"}),
            ("directory_tree", {"path": "."}),
        ]:
            assert MARK not in str(ok(server.call(tool, arguments)))
    assert snapshot(root) == before
    assert MARK.encode() not in journal_bytes(journal)


@pytest.mark.anyio
async def test_engine_denies_secrets_under_other_names(tmp_path: Path) -> None:
    root = tmp_path / "root"
    names = plant_all(root)
    before = snapshot(root)
    journal = tmp_path / "j.db"
    async with Engine.open({"roots": [str(root)], "journal": str(journal)}) as engine:
        session = await engine.session()
        for name in names:
            for tool, arguments in attacks(name):
                with pytest.raises(LedgerError) as caught:
                    await session.call(tool, arguments)
                assert caught.value.code.value == "SECRET_DENIED", (name, tool, caught.value)
                assert MARK not in caught.value.envelope.to_json()
    assert snapshot(root) == before
    assert MARK.encode() not in journal_bytes(journal)


def test_allow_secrets_reads_them_and_lookalikes_are_never_secrets(tmp_path: Path) -> None:
    root = tmp_path / "root"
    names = plant_all(root)
    for name, content in LOOKALIKES:
        (root / name).write_text(content)
    with Server(root, "--journal", tmp_path / "j.db", "--allow-secrets") as server:
        for name in names:
            assert ok(server.call("read_file", {"path": name}))["size"] > 0
    with Server(root, "--journal", tmp_path / "j2.db") as server:
        for name, content in LOOKALIKES:
            assert ok(server.call("read_file", {"path": name}))["content"] == content
