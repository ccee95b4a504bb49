"""Path attacks: nothing escapes a root, each gets the right code, nothing changes on disk."""

from __future__ import annotations

import errno
import os
import threading
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgerfs.engine import Code, Engine, LedgerError
from ledgerfs.engine.fileops import FileOps
from ledgerfs.engine.paths import Workspace


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A root with links in every direction, and an outside folder with a secret."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("outside\n")
    (root / "inside.txt").write_text("inside\n")
    (root / "sub").mkdir()
    (root / "sub" / "nested.txt").write_text("nested\n")
    (root / "link_out_file").symlink_to(outside / "secret.txt")
    (root / "link_out_dir").symlink_to(outside)
    (root / "link_in").symlink_to(root / "inside.txt")
    (root / "dangling_out").symlink_to(outside / "new.txt")
    (root / "loop_a").symlink_to(root / "loop_b")
    (root / "loop_b").symlink_to(root / "loop_a")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    os.mkfifo(root / "fifo")
    yield root, outside


def snapshot(*folders: Path) -> dict[str, bytes | str]:
    """Every entry below the folders: file bytes, link targets, folder markers."""
    result: dict[str, bytes | str] = {}
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(folder):
            if ".ledgerfs" in Path(dirpath).parts:
                continue
            for name in dirnames + filenames:
                if name == ".ledgerfs":
                    continue
                path = Path(dirpath) / name
                if path.is_symlink():
                    result[str(path)] = "link:" + os.readlink(path)
                elif path.is_dir():
                    result[str(path)] = "dir"
                elif path.is_file():
                    result[str(path)] = path.read_bytes()
                else:
                    result[str(path)] = "special"
    return result


ESCAPES = [
    "..",
    "../outside/secret.txt",
    "../outside/new.txt",
    "sub/../../outside/secret.txt",
    "sub/../../../etc/passwd",
    "./../outside",
    "sub//..//..//outside/x",
    "link_out_file",
    "link_out_dir",
    "link_out_dir/secret.txt",
    "link_out_dir/new.txt",
    "dangling_out",
    "/etc/passwd",
    "/",
]


@pytest.mark.parametrize("raw", ESCAPES)
def test_escapes_are_not_allowed(sandbox: tuple[Path, Path], raw: str) -> None:
    root, _ = sandbox
    workspace = Workspace([str(root)])
    with pytest.raises(LedgerError) as caught:
        workspace.resolve(raw, must_exist=False)
    assert caught.value.code is Code.NOT_ALLOWED


def test_absolute_path_to_the_outside_folder_is_not_allowed(sandbox: tuple[Path, Path]) -> None:
    root, outside = sandbox
    with pytest.raises(LedgerError) as caught:
        Workspace([str(root)]).resolve(str(outside / "secret.txt"))
    assert caught.value.code is Code.NOT_ALLOWED


@pytest.mark.parametrize(
    ("raw", "resolved"),
    [
        ("inside.txt", "inside.txt"),
        ("sub/../inside.txt", "inside.txt"),
        ("./sub/nested.txt", "sub/nested.txt"),
        ("link_in", "inside.txt"),
        ("sub/new.txt", "sub/new.txt"),
    ],
)
def test_paths_that_stay_inside_resolve(
    sandbox: tuple[Path, Path], raw: str, resolved: str
) -> None:
    root, _ = sandbox
    target = Workspace([str(root)]).resolve(raw, must_exist=False)
    assert target.path == str(root / resolved)


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("", Code.VALIDATION),
        ("   ", Code.VALIDATION),
        ("a\x00b", Code.VALIDATION),
        ("bad\ud800name", Code.VALIDATION),  # a lone surrogate that is no byte
        ("bad\udcffname", Code.NOT_FOUND),  # the bytes b"bad\xffname", not there
        ("x" * 256, Code.VALIDATION),
        ("a/" * 2100 + "b", Code.VALIDATION),
        ("\uff0e\uff0e/outside/secret.txt", Code.VALIDATION),
        ("sub\uff0fx", Code.VALIDATION),
        ("missing.txt", Code.NOT_FOUND),
        ("no/such/folder/file.txt", Code.NOT_FOUND),
        ("loop_a", Code.FILE_POLICY_DENIED),
        ("loop_a/x", Code.FILE_POLICY_DENIED),
        ("fifo", Code.FILE_POLICY_DENIED),
        (".git/config", Code.FILE_POLICY_DENIED),
        (".git", Code.FILE_POLICY_DENIED),
        (".ledgerfs/journal.db", Code.FILE_POLICY_DENIED),
        ("sub/.git/HEAD", Code.FILE_POLICY_DENIED),
        (".GIT/config", Code.FILE_POLICY_DENIED),
    ],
)
def test_bad_paths_get_the_right_code(sandbox: tuple[Path, Path], raw: str, code: Code) -> None:
    root, _ = sandbox
    with pytest.raises(LedgerError) as caught:
        Workspace([str(root)]).resolve(raw)
    assert caught.value.code is code


@pytest.mark.parametrize(
    "raw",
    ["evil\u202etxt.exe", "in\u200bvisible.txt", "tab\there", "del\x7fname", "new/in\u00adner/x"],
)
def test_deceptive_names_are_refused_only_where_a_call_creates_them(
    sandbox: tuple[Path, Path], raw: str
) -> None:
    root, _ = sandbox
    workspace = Workspace([str(root)])
    with pytest.raises(LedgerError) as caught:
        workspace.resolve(raw, must_exist=False, creates=True)
    assert caught.value.code is Code.VALIDATION
    assert caught.value.details["code_point"].startswith("U+")
    # Looked up, not created: such a name may exist (made by another program).
    assert not workspace.resolve(raw, must_exist=False).exists


def test_an_ascii_name_is_refused_exactly_for_a_control_character(
    sandbox: tuple[Path, Path],
) -> None:
    root, _ = sandbox
    workspace = Workspace([str(root)])
    refused = set()
    for code in range(1, 128):
        name = f"a{chr(code)}b"
        if chr(code) == "/":
            continue
        try:
            workspace.resolve(name, must_exist=False, creates=True)
        except LedgerError as exc:
            assert exc.code is Code.VALIDATION
            refused.add(chr(code))
    assert refused == {chr(c) for c in range(1, 128) if unicodedata.category(chr(c)) == "Cc"}


@pytest.mark.parametrize("raw", [None, 3, ["a"], {"p": 1}, b"bytes"])
def test_non_string_paths_are_validation(sandbox: tuple[Path, Path], raw: object) -> None:
    root, _ = sandbox
    with pytest.raises(LedgerError) as caught:
        Workspace([str(root)]).resolve(raw)
    assert caught.value.code is Code.VALIDATION
    assert caught.value.details["field"] == "path"


SECRETS = [
    ".env",
    ".env.local",
    "config/.env.production",
    "prod.env",
    "id_rsa",
    "keys/id_ed25519",
    "certs/server.pem",
    "tls/private.key",
    "store.p12",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    "credentials",
    "credentials.json",
    ".aws/credentials",
    ".aws/config",
    ".ssh/config",
    ".ssh/known_hosts",
    "home/.ssh/id_rsa.pub",
    "SECRETS.YML",
    ".ENV",
]


@pytest.mark.parametrize("raw", SECRETS)
def test_secret_files_are_denied_unless_allowed(sandbox: tuple[Path, Path], raw: str) -> None:
    root, _ = sandbox
    with pytest.raises(LedgerError) as caught:
        Workspace([str(root)]).resolve(raw, must_exist=False)
    assert caught.value.code is Code.SECRET_DENIED
    assert caught.value.details["reason"]
    Path(root, raw).parent.mkdir(parents=True, exist_ok=True)
    allowed = Workspace([str(root)], allow_secrets=True).resolve(raw, must_exist=False)
    assert allowed.path == str(root / raw)


def test_a_link_cannot_disguise_a_secret(sandbox: tuple[Path, Path]) -> None:
    root, _ = sandbox
    (root / ".env").write_text("TOKEN=1\n")
    (root / "notes.txt").symlink_to(root / ".env")
    with pytest.raises(LedgerError) as caught:
        Workspace([str(root)]).resolve("notes.txt")
    assert caught.value.code is Code.SECRET_DENIED


@pytest.mark.parametrize("raw", ["environment.txt", "keyboard.py", "pem.md", "src/envelope.py"])
def test_ordinary_names_are_not_secrets(sandbox: tuple[Path, Path], raw: str) -> None:
    root, _ = sandbox
    Workspace([str(root)]).resolve(raw, must_exist=False)


def test_no_roots_is_roots_empty() -> None:
    with pytest.raises(LedgerError) as caught:
        Workspace([])
    assert caught.value.code is Code.ROOTS_EMPTY


def test_second_root_is_reachable_by_absolute_path(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    (second / "f.txt").write_text("x")
    target = Workspace([str(first), str(second)]).resolve(str(second / "f.txt"))
    assert target.root == str(second)


PARTS = st.sampled_from(
    [
        "..",
        ".",
        "sub",
        "inside.txt",
        "link_out_dir",
        "link_in",
        "link_out_file",
        "new",
        "",
        "loop_a",
        "\uff0e\uff0e",
        ".git",
        "x" * 40,
    ]
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(PARTS, min_size=1, max_size=7), absolute=st.booleans())
def test_no_spelling_escapes_a_root(
    sandbox: tuple[Path, Path], parts: list[str], absolute: bool
) -> None:
    root, _ = sandbox
    raw = "/".join(parts)
    if absolute:
        raw = str(root) + "/" + raw
    try:
        target = Workspace([str(root)]).resolve(raw, must_exist=False)
    except LedgerError as exc:
        assert exc.code in {
            Code.NOT_ALLOWED,
            Code.NOT_FOUND,
            Code.VALIDATION,
            Code.FILE_POLICY_DENIED,
        }
        return
    real = os.path.realpath(target.path)
    assert real == str(root) or real.startswith(str(root) + os.sep)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("write_file", {"path": "../outside/new.txt", "content": "x"}),
        ("write_file", {"path": "link_out_dir/new.txt", "content": "x"}),
        ("write_file", {"path": "dangling_out", "content": "x"}),
        ("write_file", {"path": "link_out_file", "content": "x"}),
        ("write_file", {"path": ".git/config", "content": "x"}),
        ("write_file", {"path": ".env", "content": "x"}),
        # A link itself is deleted or moved as `rm` and `mv` do (tests/security/
        # test_symlink_ops.py); what it leads to outside is never touched.
        ("delete_file", {"path": "link_out_dir/secret.txt"}),
        ("move_file", {"source": "inside.txt", "destination": "../outside/moved.txt"}),
        ("move_file", {"source": "inside.txt", "destination": "link_out_dir/moved.txt"}),
        ("move_file", {"source": "inside.txt", "destination": ".ssh/id_rsa"}),
        ("move_file", {"source": "link_out_dir/secret.txt", "destination": "here.txt"}),
        ("move_file", {"source": "link_in", "destination": "link_out_dir/moved"}),
        ("create_directory", {"path": "../outside/dir"}),
        ("edit_file", {"path": "link_out_file", "edits": [{"old_text": "o", "new_text": "x"}]}),
        (
            "batch",
            {
                "operations": [
                    {"op": "write", "path": "ok.txt", "content": "fine"},
                    {"op": "write", "path": "../outside/evil.txt", "content": "x"},
                ]
            },
        ),
        (
            "apply_patch",
            {
                "patch": "--- a/../outside/secret.txt\n+++ b/../outside/secret.txt\n"
                "@@ -1 +1 @@\n-outside\n+pwned\n"
            },
        ),
    ],
)
async def test_hostile_mutations_change_nothing(
    sandbox: tuple[Path, Path], tool: str, arguments: dict[str, object]
) -> None:
    root, outside = sandbox
    before = snapshot(root, outside)
    async with Engine.open({"roots": [str(root)], "auto_occ": "off"}) as engine:
        session = await engine.session()
        with pytest.raises(LedgerError) as caught:
            await session.call(tool, arguments)
    assert caught.value.code in {
        Code.NOT_ALLOWED,
        Code.SECRET_DENIED,
        Code.FILE_POLICY_DENIED,
        Code.VALIDATION,
    }
    assert snapshot(root, outside) == before


def test_a_folder_swapped_for_a_link_after_the_check_is_refused(
    sandbox: tuple[Path, Path],
) -> None:
    """The write works relative to a folder descriptor opened without following links."""
    root, outside = sandbox
    target = Workspace([str(root)]).resolve("sub/nested.txt")
    os.rename(root / "sub", root / "sub_moved")
    (root / "sub").symlink_to(outside)
    before = snapshot(outside)
    with pytest.raises(OSError) as caught:
        FileOps().install(target.path, b"pwned\n", 0o644, "0" * 32)
    assert caught.value.errno == errno.ELOOP
    assert snapshot(outside) == before


@pytest.mark.anyio
async def test_reads_through_the_engine_use_the_same_rules(sandbox: tuple[Path, Path]) -> None:
    root, _ = sandbox
    async with Engine.open({"roots": [str(root)]}) as engine:
        session = await engine.session()
        for raw, code in [
            ("link_out_file", Code.NOT_ALLOWED),
            ("fifo", Code.FILE_POLICY_DENIED),
            (".git/config", Code.FILE_POLICY_DENIED),
            ("nope", Code.NOT_FOUND),
        ]:
            with pytest.raises(LedgerError) as caught:
                await session.call("read_file", {"path": raw})
            assert caught.value.code is code, raw
        listing = await session.call("list_directory", {"path": "."})
        names = {e.name for e in listing.entries}  # type: ignore[attr-defined]
        assert {"inside.txt", "sub", "link_out_dir"} <= names
        await anyio.sleep(0)


def test_a_file_replaced_while_it_is_resolved_resolves_to_its_name(
    sandbox: tuple[Path, Path],
) -> None:
    """Another thread keeps renaming new versions over the file (as concurrent
    transactions do); every resolve still names the file, never a deleted inode."""
    root, _ = sandbox
    target = root / "hot.txt"
    target.write_text("0")
    workspace = Workspace([str(root)])
    stop = threading.Event()

    def replace_forever() -> None:
        n = 0
        while not stop.is_set():
            temp = root / ".hot.tmp"
            temp.write_text(str(n))
            os.rename(temp, target)
            n += 1

    replacer = threading.Thread(target=replace_forever)
    replacer.start()
    try:
        seen = {workspace.resolve("hot.txt").path for _ in range(20_000)}
    finally:
        stop.set()
        replacer.join()
    assert seen == {str(target)}


def test_a_forked_child_reads_its_own_descriptors_names(sandbox: tuple[Path, Path]) -> None:
    """A resolve reads the name of the descriptor it opened in its own process's
    table: after a fork, the parent opens the outside secret under the number the
    child's resolve is about to use, and the child still resolves its own path."""
    root, outside = sandbox
    workspace = Workspace([str(root)])
    assert workspace.resolve("inside.txt").path == str(root / "inside.txt")
    go_read, go_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: wait until the parent holds the number, then resolve
        code = 1
        try:
            os.read(go_read, 1)
            resolved = workspace.resolve("sub/nested.txt").path
            code = 0 if resolved == str(root / "sub" / "nested.txt") else 2
        finally:
            os._exit(code)
    # The lowest free number here is the lowest free one in the child too.
    decoy = os.open(outside / "secret.txt", os.O_RDONLY)
    try:
        os.write(go_write, b"x")
        _, status = os.waitpid(pid, 0)
    finally:
        for fd in (decoy, go_read, go_write):
            os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
