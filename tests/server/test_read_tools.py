"""The reading-many tools through the real client, on both protocol versions:
search_files, directory_tree, list_directory's sizes and totals, read_multiple_files,
read_media_file and read_file's windows and caps.

One workspace holds what a search must find and what it must never show: secrets
(by name, in a secret folder, behind a link), `.git/`, what .gitignore ignores, and
links to outside the roots.
"""

from __future__ import annotations

import base64
import os
import struct
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from ._support import envelope, ok, stdio_params

SECRET = (".env", "credentials", ".ssh", ".git/", "outside", "link_env")
IGNORED = ("build/", "debug.log")
MANY = 1200  # files under many/, enough for a search to report progress


def png(width: int = 1, height: int = 1) -> bytes:
    """A valid PNG of one colour."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def wav() -> bytes:
    """A valid WAV of 8 silent samples."""
    samples = b"\x00\x00" * 8
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 16000, 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data"
    body += struct.pack("<I", len(samples)) + samples
    return b"RIFF" + struct.pack("<I", len(body)) + body


def build(base: Path) -> Path:
    root = base / "ws"
    outside = base / "outside"
    outside.mkdir()
    (outside / "hello.py").write_text("hello from outside\n")
    files = {
        "src/app.py": "import os\n\ndef main():\n    return 'Hello World'\n",
        "src/util.py": "def helper():\n    return 'hello'\n",
        "README.md": "# Demo\nhello there\n",
        ".gitignore": "build/\n*.log\n",
        "build/out.py": "hello = 1\n",
        "debug.log": "hello\n",
        ".env": "TOKEN=hello\n",
        "config/credentials.json": '{"hello": 1}\n',
        ".ssh/config": "Host hello\n",
        ".git/config": "[hello]\n",
        "big.txt": "".join(f"line {n}\n" for n in range(3000)),
        "wide.txt": ("x" * 200_000 + "\n") * 2,
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "src" / "data.bin").write_bytes(b"\x00\x01hello\x00")
    (root / "pic.png").write_bytes(png())
    (root / "blob.bin").write_bytes(bytes(range(256)) * 1200)  # 300 KiB, not text
    (root / "sound.wav").write_bytes(wav())
    with open(root / "huge.png", "wb") as handle:
        handle.truncate(10 * 1024 * 1024 + 1)
    many = root / "many"
    many.mkdir()
    for n in range(MANY):
        (many / f"f{n:04}.txt").write_text(f"item {n}\n")
    (root / "link_out").symlink_to(outside, target_is_directory=True)
    (root / "link_out_file.py").symlink_to(outside / "hello.py")
    (root / "link_env").symlink_to(root / ".env")
    (root / "link_in.py").symlink_to(root / "src" / "util.py")
    return root.resolve()


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("reads"))


@pytest.fixture(scope="module", params=["auto", "legacy"])
async def client(
    root: Path, request: pytest.FixtureRequest, anyio_backend: str
) -> AsyncIterator[Client]:
    async with Client(stdio_params(root), mode=request.param) as c:
        yield c


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    return ok(await client.call_tool(tool, arguments))


async def fails(client: Client, code: str, tool: str, **arguments: Any) -> dict[str, Any]:
    return envelope(await client.call_tool(tool, arguments), code)


def shown(result: Any) -> list[str]:
    """Every path-like string anywhere in a result."""
    if isinstance(result, dict):
        return [s for value in result.values() for s in shown(value)]
    if isinstance(result, list):
        return [s for value in result for s in shown(value)]
    return [result] if isinstance(result, str) else []


def never_hidden(result: dict[str, Any], *, gitignore: bool = True) -> None:
    """No secret, internal or outside path shows (nor, by default, an ignored one)."""
    hidden = SECRET + IGNORED if gitignore else SECRET
    for text in shown(result):
        assert not any(part in text for part in hidden), text


# search_files ---------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"pattern": "*.py"}, ["link_in.py", "src/app.py", "src/util.py"]),
        ({"pattern": "src/*.py"}, ["src/app.py", "src/util.py"]),
        ({"pattern": "*.py", "exclude": ["src/"]}, ["link_in.py"]),
        (
            {"pattern": "*.py", "respect_gitignore": False},
            ["build/out.py", "link_in.py", "src/app.py", "src/util.py"],
        ),
        ({"pattern": "*.log"}, []),
        ({"pattern": "*.md"}, ["README.md"]),
    ],
)
async def test_search_names_by_glob(
    client: Client, root: Path, arguments: dict[str, Any], expected: list[str]
) -> None:
    result = await call(client, "search_files", path=".", **arguments)
    assert result["files"] == [str(root / name) for name in expected]
    assert result["matches"] is None and result["truncated"] is False
    never_hidden(result, gitignore=arguments.get("respect_gitignore", True))


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"content": "hello"}, [("README.md", 2), ("link_in.py", 2), ("src/util.py", 2)]),
        (
            {"content": "hello", "case_sensitive": False},
            [("README.md", 2), ("link_in.py", 2), ("src/app.py", 4), ("src/util.py", 2)],
        ),
        (
            {"content": r"def \w+\(", "regex": True, "pattern": "*.py"},
            [("link_in.py", 1), ("src/app.py", 3), ("src/util.py", 1)],
        ),
        ({"content": "def \\w+\\("}, []),  # literal by default
        ({"content": "hello", "path": "src"}, [("src/util.py", 2)]),
    ],
)
async def test_search_contents(
    client: Client, root: Path, arguments: dict[str, Any], expected: list[tuple[str, int]]
) -> None:
    arguments = {"path": ".", **arguments}
    result = await call(client, "search_files", **arguments)
    got = [(m["path"], m["line"]) for m in result["matches"]]
    assert got == [(str(root / name), line) for name, line in expected]
    assert result["files"] == list(dict.fromkeys(str(root / name) for name, _ in expected))
    assert result["truncated"] is False and result["files_searched"] > 0
    never_hidden(result)


@pytest.mark.anyio
async def test_search_context_and_the_cap(client: Client, root: Path) -> None:
    result = await call(
        client, "search_files", path="src", content="return", context=1, pattern="app.py"
    )
    [match] = result["matches"]
    assert match == {
        "path": str(root / "src" / "app.py"),
        "line": 4,
        "text": "    return 'Hello World'",
        "before": ["def main():"],
        "after": [],
    }
    capped = await call(client, "search_files", path="many", content="item", max_results=5)
    assert [m["line"] for m in capped["matches"]] == [1] * 5
    assert capped["truncated"] is True and len(capped["files"]) == 5
    names = await call(client, "search_files", path="many", max_results=3)
    assert names["truncated"] is True and len(names["files"]) == 3


@pytest.mark.anyio
async def test_search_reports_progress_when_asked(client: Client) -> None:
    seen: list[tuple[float, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, message))

    result = ok(
        await client.call_tool(
            "search_files", {"path": "many", "content": "nowhere"}, progress_callback=progress
        )
    )
    assert result["files_searched"] == MANY and result["matches"] == []
    assert [done for done, _ in seen] == [500, 1000]
    assert seen[0][1] == "500 files searched"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "code", "field"),
    [
        ({"path": ".", "content": "(", "regex": True}, "VALIDATION", "content"),
        ({"path": "README.md"}, "VALIDATION", None),
        ({"path": "/"}, "NOT_ALLOWED", None),
        ({"path": ".ssh/config"}, "SECRET_DENIED", None),
        ({"path": ".git"}, "FILE_POLICY_DENIED", None),
        ({"path": "link_out"}, "NOT_ALLOWED", None),
        ({"path": ".", "max_results": 0}, "VALIDATION", None),
        ({"path": ".", "context": 21}, "VALIDATION", None),
        ({"path": ".", "nope": 1}, "VALIDATION", None),
    ],
)
async def test_search_envelopes(
    client: Client, arguments: dict[str, Any], code: str, field: str | None
) -> None:
    body = await fails(client, code, "search_files", **arguments)
    if field is not None:
        assert body["details"]["field"] == field


# directory_tree and list_directory -------------------------------------------


def names(nodes: list[dict[str, Any]]) -> list[str]:
    return [node["name"] for node in nodes]


@pytest.mark.anyio
async def test_directory_tree(client: Client, root: Path) -> None:
    top = await call(client, "directory_tree", path=".", max_depth=1)
    assert names(top["tree"]) == [
        ".gitignore",
        "README.md",
        "big.txt",
        "blob.bin",
        "config",
        "huge.png",
        "link_in.py",
        "many",
        "pic.png",
        "sound.wav",
        "src",
        "wide.txt",
    ]
    by_name = {node["name"]: node for node in top["tree"]}
    # max_depth stopped above src's files: it says so.
    assert by_name["src"] == {
        "name": "src",
        "type": "directory",
        "size": None,
        "children": [],
        "truncated": True,
    }
    assert by_name["README.md"]["size"] == len("# Demo\nhello there\n")
    assert by_name["README.md"]["children"] is None
    never_hidden(top)
    full = await call(client, "directory_tree", path=".", exclude=["many/", "*.png"])
    src = {node["name"]: node for node in full["tree"]}["src"]
    assert names(src["children"]) == ["app.py", "data.bin", "util.py"]
    # A folder whose entries are all hidden is empty, not cut.
    config = {node["name"]: node for node in full["tree"]}["config"]
    assert config["children"] == [] and config["truncated"] is False
    assert "pic.png" not in names(full["tree"]) and full["truncated"] is False
    capped = await call(client, "directory_tree", path="many", max_entries=10)
    assert capped["truncated"] is True and capped["entries"] == 10
    assert len(capped["tree"]) == 10
    # A folder of secrets shows nothing, not even its name.
    inside = await call(client, "search_files", path=".ssh", content="hello")
    assert inside["files"] == [] and inside["matches"] == []


@pytest.mark.anyio
async def test_list_directory_sizes_sorting_and_totals(client: Client) -> None:
    listing = await call(client, "list_directory", path="src", sort_by="size")
    sizes = [entry["size"] for entry in listing["entries"]]
    assert sizes == sorted(sizes, reverse=True)
    assert [e["name"] for e in listing["entries"]] == ["app.py", "util.py", "data.bin"]
    assert (listing["files"], listing["directories"]) == (3, 0)
    assert listing["total_size"] == sum(sizes)
    by_name = await call(client, "list_directory", path="src")
    assert [e["name"] for e in by_name["entries"]] == ["app.py", "data.bin", "util.py"]
    await fails(client, "VALIDATION", "list_directory", path="src", sort_by="mtime")


# read_multiple_files -----------------------------------------------------------


@pytest.mark.anyio
async def test_read_multiple_files_fails_each_file_alone(client: Client, root: Path) -> None:
    result = await call(
        client,
        "read_multiple_files",
        paths=["README.md", "missing.txt", ".env", "/etc/hostname", "src"],
    )
    first, missing, secret, outside, folder = result["files"]
    assert first["file"]["content"] == "# Demo\nhello there\n" and first["error"] is None
    assert first["file"]["path"] == str(root / "README.md")
    codes = [o["error"]["code"] for o in (missing, secret, outside, folder)]
    assert codes == ["NOT_FOUND", "SECRET_DENIED", "NOT_ALLOWED", "VALIDATION"]
    assert all(o["file"] is None for o in (missing, secret, outside, folder))
    assert secret["path"] == ".env" and "TOKEN" not in str(result)
    await fails(client, "VALIDATION", "read_multiple_files", paths=[])


# read_media_file ---------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "kind", "mime"),
    [("pic.png", "image", "image/png"), ("sound.wav", "audio", "audio/x-wav")],
)
async def test_read_media_file_is_a_content_block(
    client: Client, root: Path, name: str, kind: str, mime: str
) -> None:
    result = await client.call_tool("read_media_file", {"path": name})
    assert not result.is_error
    [block] = result.content
    assert isinstance(block, types.ImageContent | types.AudioContent)
    assert block.type == kind and block.mime_type == mime
    data = (root / name).read_bytes()
    assert base64.b64decode(block.data) == data
    info = result.structured_content
    assert info is not None
    assert (info["path"], info["kind"], info["size"]) == (str(root / name), kind, len(data))
    assert info["content_hash"].startswith("blake3:")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "code", "reason"),
    [
        ("README.md", "VALIDATION", "not_media"),
        ("huge.png", "VALIDATION", "file_too_large"),
        ("missing.png", "NOT_FOUND", None),
        ("/etc/hostname.png", "NOT_ALLOWED", None),
    ],
)
async def test_read_media_file_envelopes(
    client: Client, path: str, code: str, reason: str | None
) -> None:
    body = await fails(client, code, "read_media_file", path=path)
    if reason is not None:
        assert body["details"]["reason"] == reason


# read_file windows and caps ----------------------------------------------------


def numbered(first: int, last: int) -> str:
    return "".join(f"line {n}\n" for n in range(first, last))


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "content", "offset", "next_offset"),
    [
        ({}, numbered(0, 2000), 0, 2000),
        ({"offset": 2000}, numbered(2000, 3000), 2000, None),
        ({"offset": 10, "limit": 5}, numbered(10, 15), 10, 15),
        ({"head": 3}, numbered(0, 3), 0, 3),
        ({"tail": 2}, numbered(2998, 3000), 2998, None),
        ({"limit": 5000}, numbered(0, 3000), 0, None),
    ],
)
async def test_read_file_windows(
    client: Client,
    arguments: dict[str, Any],
    content: str,
    offset: int,
    next_offset: int | None,
) -> None:
    result = await call(client, "read_file", path="big.txt", **arguments)
    assert result["content"] == content
    assert (result["offset"], result["next_offset"]) == (offset, next_offset)
    assert result["total_lines"] == 3000
    assert result["truncated"] is (next_offset is not None)


@pytest.mark.anyio
async def test_read_file_caps_bytes_and_refuses_mixed_windows(client: Client) -> None:
    first = await call(client, "read_file", path="wide.txt")
    assert (first["lines"], first["truncated"], first["next_offset"]) == (1, True, 1)
    rest = await call(client, "read_file", path="wide.txt", offset=first["next_offset"])
    assert (rest["lines"], rest["next_offset"]) == (1, None)
    assert first["content"] + rest["content"] == ("x" * 200_000 + "\n") * 2
    body = await fails(client, "VALIDATION", "read_file", path="big.txt", head=1, tail=1)
    assert body["details"]["reason"] == "conflicting_arguments"


@pytest.mark.anyio
async def test_read_file_pages_a_binary_file_by_bytes(client: Client, root: Path) -> None:
    data = (root / "blob.bin").read_bytes()
    first = await call(client, "read_file", path="blob.bin")
    assert (first["encoding"], first["truncated"], first["next_offset"]) == ("base64", True, 262144)
    rest = await call(client, "read_file", path="blob.bin", offset=first["next_offset"])
    assert (rest["offset"], rest["next_offset"], rest["truncated"]) == (262144, None, False)
    joined = base64.b64decode(first["content"]) + base64.b64decode(rest["content"])
    assert joined == data and first["content_hash"] == rest["content_hash"]


def test_the_workspace_holds_what_must_stay_hidden(root: Path) -> None:
    # The fixture must really contain what the tests say is never shown.
    assert (root / ".env").read_text() == "TOKEN=hello\n"
    assert os.readlink(root / "link_out") == str(root.parent / "outside")
    assert (root / "link_out_file.py").read_text() == "hello from outside\n"
