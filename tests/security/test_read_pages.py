"""`read_file` pages end: `truncated` means "there is more after this page".

An agent reads on while `truncated` is true, from `next_offset`. Through the real
stdio server, files of every shape (small, empty, exactly one page of lines or of
bytes, several pages of lines, of wide lines and of binary bytes, a window that
reaches the end) are paged from their first argument by following `next_offset`
until it is null: every page but the last says `truncated: true` with the next
offset, the last says `truncated: false` (before, it said true with a null
`next_offset`, and such a loop re-read the last page forever), and the pages put
together are the file.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._support import Server, ok

#: A generous bound on pages: every file here has at most a few.
MAX_PAGES = 20

PAGE_BYTES = 256 * 1024
PAGE_LINES = 2000


def numbered(count: int, width: int = 0) -> bytes:
    """`count` distinct lines, each padded to `width` bytes (newline included)."""
    return b"".join(f"{i}".ljust(max(width - 1, 0), ".").encode() + b"\n" for i in range(count))


def binary(size: int) -> bytes:
    return bytes(i % 251 for i in range(size))  # NUL bytes: binary


#: name -> (file bytes, arguments of the first read, offset the first page starts at,
#: pages expected)
CASES: dict[str, tuple[bytes, dict[str, Any], int, int]] = {
    "small": (b"one\ntwo\n", {}, 0, 1),
    "empty": (b"", {}, 0, 1),
    "no final newline": (b"one\ntwo", {}, 0, 1),
    "exactly one page of lines": (numbered(PAGE_LINES), {}, 0, 1),
    "one line over a page": (numbered(PAGE_LINES + 1), {}, 0, 2),
    "several pages of lines": (numbered(3 * PAGE_LINES + 7), {}, 0, 4),
    "pages by limit": (numbered(1000), {"limit": 300}, 0, 4),
    "exactly one page of bytes": (numbered(1024, 256), {}, 0, 1),
    "wide lines": (numbered(3, 200_000), {}, 0, 3),
    "binary, exactly one page": (binary(PAGE_BYTES), {}, 0, 1),
    "binary, several pages": (binary(2 * PAGE_BYTES + 5), {}, 0, 3),
    "binary from an offset": (binary(PAGE_BYTES + 100), {"offset": 100}, 100, 1),
    "range at the end": (numbered(3000), {"offset": 2990, "limit": 10}, 2990, 1),
    "range past the end": (numbered(3000), {"offset": 2995, "limit": 10}, 2995, 1),
    "range ending at the end": (numbered(3000), {"offset": 2000, "limit": 1000}, 2000, 1),
    "tail": (numbered(3000), {"tail": 5}, 2995, 1),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    root = tmp_path_factory.mktemp("pages").resolve()
    for index, (data, _, _, _) in enumerate(CASES.values()):
        (root / f"f{index}").write_bytes(data)
    with Server(root, "--readonly") as running:
        yield running, root


def _suffix(data: bytes, start: int, is_binary: bool) -> bytes:
    """The file from `start` on (a byte offset for binary files, else a line)."""
    if is_binary:
        return data[start:]
    return b"".join(data.splitlines(keepends=True)[start:])


@pytest.mark.parametrize("name", list(CASES))
def test_paging_to_the_end_stops_with_a_page_that_is_not_truncated(
    server: tuple[Server, Path], name: str
) -> None:
    running, root = server
    data, first, start, expected_pages = CASES[name]
    path = str(root / f"f{list(CASES).index(name)}")
    pages: list[dict[str, Any]] = []
    arguments = {"path": path, **first}
    while len(pages) < MAX_PAGES:
        page = ok(running.call("read_file", arguments))
        pages.append(page)
        if page["next_offset"] is None:
            break
        following = {k: v for k, v in first.items() if k == "limit"}
        arguments = {"path": path, **following, "offset": page["next_offset"]}
    assert pages[-1]["next_offset"] is None, f"still paging after {MAX_PAGES} pages"
    # truncated means "there is more after this page", on every page.
    assert [p["truncated"] for p in pages] == [True] * (len(pages) - 1) + [False]
    assert len(pages) == expected_pages
    is_binary = pages[0]["encoding"] == "base64"
    if is_binary:
        joined = b"".join(base64.b64decode(p["content"]) for p in pages)
    else:
        joined = "".join(p["content"] for p in pages).encode()
    assert pages[0]["offset"] == start
    assert joined == _suffix(data, start, is_binary)
    assert {p["content_hash"] for p in pages} == {pages[0]["content_hash"]}
