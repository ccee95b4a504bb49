"""No tool creates a name that reads differently from what it is, or a look-alike of a secret.

Every character of each refused class (control, format, line and paragraph
separators, default-ignorable code points, Hangul fillers, variation selectors)
is refused in a new name by every tool that makes one: write_file, the
destination of move_file, create_directory, a file apply_patch creates, and each
of those inside batch. The refusal is VALIDATION naming the code point, and
nothing appears on disk. A name whose NFKC form (case folded) is a secret or an
internal name is that name, for reads and writes alike. Names that merely look
foreign (accents, CJK, emoji, right-to-left letters) are created as given, and
a file that has a refused name already can still be read, moved and deleted.
All through the real stdio server.
"""

from __future__ import annotations

import json
import os
import sys
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ._support import Server, error, ok

# ------------------------------------------------------------- the classes


def _by_category(*categories: str) -> list[str]:
    return [
        chr(code)
        for code in range(sys.maxunicode + 1)
        if not 0xD800 <= code <= 0xDFFF and unicodedata.category(chr(code)) in categories
    ]


# Written here from DerivedCoreProperties.txt (Default_Ignorable_Code_Point),
# independently of the engine's table.
DEFAULT_IGNORABLE = [
    chr(code)
    for first, last in [
        (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
        (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
        (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
        (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
        (0xE0000, 0xE0FFF),
    ]
    for code in range(first, last + 1)
]  # fmt: skip

CLASSES = {
    # NUL is refused before any name is looked at (a path cannot hold it).
    "control (Cc)": [c for c in _by_category("Cc") if c != "\x00"],
    "format (Cf)": _by_category("Cf"),
    "line separator (Zl)": _by_category("Zl"),
    "paragraph separator (Zp)": _by_category("Zp"),
    "default ignorable": DEFAULT_IGNORABLE,
    "Hangul filler": ["\u115f", "\u1160", "\u3164", "\uffa0"],
    "variation selector": [chr(c) for c in [*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)]],
}

# The characters seen accepted in new names, and their neighbours.
LISTED = [
    "\u061c",  # ARABIC LETTER MARK
    "\u00ad",  # SOFT HYPHEN
    "\u2028",  # LINE SEPARATOR
    "\u2029",  # PARAGRAPH SEPARATOR
    "\u180e",  # MONGOLIAN VOWEL SEPARATOR
    "\u3164",  # HANGUL FILLER
    "\u115f",  # HANGUL CHOSEONG FILLER
    "\uffa0",  # HALFWIDTH HANGUL FILLER
    "\U000e0001",  # LANGUAGE TAG
    "\U000e0041",  # TAG LATIN CAPITAL LETTER A
    "\U000e007f",  # CANCEL TAG
    "\ufe0f",  # VARIATION SELECTOR-16
    "\U000e0100",  # VARIATION SELECTOR-17
    "\u2062",  # INVISIBLE TIMES
    "\u200b",  # ZERO WIDTH SPACE
    "\u202e",  # RIGHT-TO-LEFT OVERRIDE
    "\u2066",  # LEFT-TO-RIGHT ISOLATE
    "\ufeff",  # ZERO WIDTH NO-BREAK SPACE
    "\x1b",  # ESCAPE
    "\n",
]

# (look-alike, the name it imitates, the code both get): NFKC look-alikes.
LOOK_ALIKES = [
    ("\uff0eenv", ".env", "SECRET_DENIED"),  # FULLWIDTH FULL STOP + env
    (".\uff45nv", ".env", "SECRET_DENIED"),  # FULLWIDTH e
    ("\uff0e\uff25\uff2e\uff36", ".env", "SECRET_DENIED"),  # all full width, upper case
    (".e\u00adnv", ".env", "SECRET_DENIED"),  # a soft hyphen inside (ignorable)
    (".env\uff0elocal", ".env.local", "SECRET_DENIED"),
    ("\uff49d_rsa", "id_rsa", "SECRET_DENIED"),
    ("server\uff0epem", "server.pem", "SECRET_DENIED"),
    ("\uff43redentials", "credentials", "SECRET_DENIED"),
    (".\uff53\uff53\uff48/config", ".ssh/config", "SECRET_DENIED"),  # a secret folder
    (".\uff27\uff29\uff34/config", ".git/config", "FILE_POLICY_DENIED"),  # .GIT
    ("\uff0egit/HEAD", ".git/HEAD", "FILE_POLICY_DENIED"),
    (".\uff4c\uff45\uff44\uff47\uff45\uff52\uff46\uff53/x", ".ledgerfs/x", "FILE_POLICY_DENIED"),
    (
        "\uff0e\uff2c\uff25\uff24\uff27\uff25\uff32\uff26\uff33/x",
        ".ledgerfs/x",
        "FILE_POLICY_DENIED",
    ),
]
LOOK_ALIKE_IDS = [imitated + "-" + str(i) for i, (_, imitated, _) in enumerate(LOOK_ALIKES)]

# Names that look foreign but hide nothing: created exactly as given.
CLEAN = [
    "caf\u00e9.txt",  # precomposed
    "cafe\u0301.txt",  # a combining accent (Mn) is a visible mark
    "\u6587\u4ef6.txt",  # CJK
    "\U0001f600.txt",  # an emoji
    "\U0001f44d\U0001f3fd.txt",  # an emoji with a skin tone (Sk, not a selector)
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac.md",  # Greek
    "\u05e2\u05d1\u05e8\u05d9\u05ea.txt",  # Hebrew: right-to-left letters, no control
    "\u0645\u0644\u0641.txt",  # Arabic
    "\uff46\uff55\uff4c\uff4c.txt",  # full-width letters naming no secret
    "\ud55c\uae00.txt",  # Hangul syllables (not fillers)
    "na\u00efve \u2013 r\u00e9sum\u00e9.txt",
]

# ------------------------------------------------------------ the tools


def _quoted(path: str) -> str:
    """`path` C-quoted as git writes a name that is not plain ASCII."""
    out = []
    for byte in path.encode("utf-8"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _new_file_patch(name: str) -> str:
    return (
        f"diff --git {_quoted('a/' + name)} {_quoted('b/' + name)}\n"
        "new file mode 100644\n"
        "--- /dev/null\n"
        f"+++ {_quoted('b/' + name)}\n"
        "@@ -0,0 +1 @@\n"
        "+new\n"
    )


Make = Callable[[str], tuple[str, dict[str, Any]]]

# Each tool that makes a name, as (tool, arguments) for the new name. The move's
# source is a clean file the fixture keeps in place.
MAKERS: dict[str, Make] = {
    "write_file": lambda name: ("write_file", {"path": name, "content": "x"}),
    "write_file in a new folder": lambda name: (
        "write_file",
        {"path": f"{name}/inner.txt", "content": "x"},
    ),
    "move_file": lambda name: ("move_file", {"source": "source.txt", "destination": name}),
    "create_directory": lambda name: ("create_directory", {"path": f"sub/{name}"}),
    "apply_patch": lambda name: ("apply_patch", {"patch": _new_file_patch(name)}),
    "batch write": lambda name: (
        "batch",
        {"operations": [{"op": "write", "path": name, "content": "x"}]},
    ),
    "batch move": lambda name: (
        "batch",
        {"operations": [{"op": "move", "source": "source.txt", "destination": name}]},
    ),
    "batch mkdir": lambda name: ("batch", {"operations": [{"op": "mkdir", "path": name}]}),
    "batch patch": lambda name: (
        "batch",
        {"operations": [{"op": "patch", "patch": _new_file_patch(name)}]},
    ),
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    base = tmp_path_factory.mktemp("names")
    root = base / "root"
    root.mkdir()
    (root / "source.txt").write_text("moved only to a clean name\n")
    (root / "sub").mkdir()
    with Server(root, "--journal", base / "j.db") as server:
        yield server, root


def _snapshot(root: Path) -> set[str]:
    found = set()
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(folder, name), root))
    return found


def _refused_with_code_point(
    server: Server, root: Path, maker: str, name: str, char: str
) -> dict[str, Any]:
    before = _snapshot(root)
    tool, arguments = MAKERS[maker](name)
    body = error(server.call(tool, arguments), "VALIDATION")
    assert _snapshot(root) == before
    if not name.strip():
        return body  # a name of white space alone is refused as empty, before this rule
    point = f"U+{ord(char):04X}"
    assert body["details"]["code_point"] == point, body
    assert point in body["details"]["reason"], body
    return body


# ------------------------------------------------------------ the tests


@pytest.mark.parametrize("maker", MAKERS)
@pytest.mark.parametrize("char", LISTED, ids=lambda c: f"U+{ord(c):04X}")
def test_each_listed_character_is_refused_in_a_new_name(
    workspace: tuple[Server, Path], maker: str, char: str
) -> None:
    server, root = workspace
    _refused_with_code_point(server, root, maker, f"in{char}side.txt", char)


@pytest.mark.parametrize("cls", CLASSES)
def test_every_member_of_each_class_is_refused(workspace: tuple[Server, Path], cls: str) -> None:
    server, root = workspace
    members = CLASSES[cls]
    assert members, cls

    @settings(
        max_examples=40,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        char=st.sampled_from(members),
        maker=st.sampled_from(sorted(MAKERS)),
        where=st.sampled_from(["start", "middle", "end", "alone"]),
    )
    def refused(char: str, maker: str, where: str) -> None:
        name = {
            "start": f"{char}name.txt",
            "middle": f"na{char}me.txt",
            "end": f"name.txt{char}",
            "alone": char,
        }[where]
        _refused_with_code_point(server, root, maker, name, char)

    refused()


# Each maker with each look-alike, but for a folder named as a secret file: that
# is no secret (nor is its look-alike).
MADE_LOOK_ALIKES = [
    pytest.param(maker, *case, id=f"{maker}-{ident}")
    for maker in MAKERS
    for case, ident in zip(LOOK_ALIKES, LOOK_ALIKE_IDS, strict=True)
    if "/" in case[0] or maker != "write_file in a new folder"
]


@pytest.mark.parametrize(("maker", "name", "imitated", "code"), MADE_LOOK_ALIKES)
def test_a_look_alike_of_a_secret_or_internal_name_is_that_name(
    workspace: tuple[Server, Path], maker: str, name: str, imitated: str, code: str
) -> None:
    server, root = workspace
    before = _snapshot(root)
    for spelled in (imitated, name):
        tool, arguments = MAKERS[maker](spelled)
        error(server.call(tool, arguments), code)
        assert _snapshot(root) == before


@pytest.mark.parametrize(("name", "imitated", "code"), LOOK_ALIKES, ids=LOOK_ALIKE_IDS)
def test_a_look_alike_on_disk_is_treated_as_the_name_it_imitates(
    workspace: tuple[Server, Path], name: str, imitated: str, code: str
) -> None:
    server, root = workspace
    path = root / "planted" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("API_TOKEN=look-alike\n")
    try:
        relative = f"planted/{name}"
        for tool, arguments in [
            ("read_file", {"path": relative}),
            ("get_file_info", {"path": relative}),
            ("edit_file", {"path": relative, "edits": [{"old_text": "API", "new_text": "X"}]}),
            ("move_file", {"source": relative, "destination": "planted/plain.txt"}),
            ("delete_file", {"path": relative}),
        ]:
            body = error(server.call(tool, arguments), code)
            assert "look-alike" not in json.dumps(body)
        listed = ok(server.call("search_files", {"path": "planted", "pattern": "**"}))
        assert "look-alike" not in json.dumps(listed)
        assert path.read_text() == "API_TOKEN=look-alike\n"
    finally:
        path.unlink()
        for folder in [path.parent, *path.parent.parents]:
            if folder == root:
                break
            folder.rmdir()


@pytest.mark.parametrize("name", CLEAN)
@pytest.mark.parametrize("maker", ["write_file", "move_file", "apply_patch", "batch write"])
def test_clean_names_that_look_foreign_are_created_as_given(
    workspace: tuple[Server, Path], name: str, maker: str
) -> None:
    server, root = workspace
    tool, arguments = MAKERS[maker](name)
    result = ok(server.call(tool, arguments))
    assert name in os.listdir(root)
    ok(server.call("undo", {"transaction": result["transaction"]}))
    assert name not in os.listdir(root)
    assert (root / "source.txt").exists()


@pytest.mark.parametrize("name", ["create_directory", "batch mkdir"])
def test_a_clean_folder_name_is_created(workspace: tuple[Server, Path], name: str) -> None:
    server, root = workspace
    tool, arguments = MAKERS[name]("\u6587\u4ef6 caf\u00e9")
    ok(server.call(tool, arguments))
    made = [p for p in (root, root / "sub") if "\u6587\u4ef6 caf\u00e9" in os.listdir(p)]
    assert made
    for parent in made:
        (parent / "\u6587\u4ef6 caf\u00e9").rmdir()


@pytest.mark.parametrize("char", ["\u200b", "\u202e", "\u00ad", "\u3164", "\ufe0f", "\x1b"])
def test_an_existing_name_stays_readable_movable_and_deletable(
    workspace: tuple[Server, Path], char: str
) -> None:
    server, root = workspace
    name = f"old{char}name.txt"
    (root / name).write_text("made by another program\n")
    read = ok(server.call("read_file", {"path": name}))
    assert read["content"] == "made by another program\n"
    listing = ok(server.call("list_directory", {"path": "."}))
    assert name in [entry["name"] for entry in listing["entries"]]
    ok(server.call("write_file", {"path": name, "content": "changed in place\n"}))
    moved = ok(server.call("move_file", {"source": name, "destination": "clean.txt"}))
    assert (root / "clean.txt").read_text() == "changed in place\n"
    # Undo restores what was there, under the name it had.
    ok(server.call("undo", {"transaction": moved["transaction"]}))
    assert (root / name).read_text() == "changed in place\n"
    ok(server.call("delete_file", {"path": name}))
    assert not (root / name).exists()
    assert not (root / "clean.txt").exists()
