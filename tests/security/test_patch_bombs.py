"""A patch never builds more than a file may hold, and refuses a bomb before building it.

A family of patch bombs goes to the real stdio server: binary literals that state
a huge size or inflate past what they state, deltas that state a huge result,
build past what they state or copy from outside their file, many small hunks
that add up, and text hunks that would make a file over max_file_size. Each is
refused with the envelope the class of input gets, nothing on disk changes, and
the server's peak memory (VmHWM) stays within a bound far below what the bombs
would build.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine.binpatch import MAX_DELTA_COMMANDS
from ledgerfs.engine.bounds import MAX_FILE_SIZE

from ._support import Server, error, ok

MiB = 1024 * 1024
#: What the bombs would build: eight times what a file may hold (the default limit).
BOMB = 8 * MAX_FILE_SIZE
#: The server's peak memory may grow this much while it refuses a binary bomb (a
#: call's hunks may inflate to the limit before the one that passes it is refused),
#: where each bomb would take at least BOMB bytes were it built.
RSS_GROWTH = 2 * MAX_FILE_SIZE
#: The file the deltas are made against: big enough for 64 KiB copies.
SOURCE = bytes(range(256)) * 256


def _base85_lines(data: bytes) -> str:
    """Deflated bytes as git writes them: lines of up to 52 bytes, a length letter first."""
    lines = []
    for start in range(0, len(data), 52):
        chunk = data[start : start + 52]
        size = len(chunk)
        letter = chr(ord("A") + size - 1) if size <= 26 else chr(ord("a") + size - 27)
        lines.append(letter + base64.b85encode(chunk, pad=True).decode())
    return "\n".join(lines) + "\n"


def _zeros(size: int) -> bytes:
    """`size` zero bytes, deflated, made without holding them all at once."""
    packer = zlib.compressobj(9)
    block = bytes(MiB)
    parts = [packer.compress(block) for _ in range(size // MiB)]
    parts.append(packer.compress(bytes(size % MiB)))
    return b"".join(parts) + packer.flush()


def _binary(path: str, kind: str, stated: int, deflated: bytes, *, new: bool = False) -> str:
    header = f"diff --git a/{path} b/{path}\n"
    if new:
        header += "new file mode 100644\n"
    return f"{header}GIT binary patch\n{kind} {stated}\n{_base85_lines(deflated)}\n"


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _delta(target: int, commands: bytes, source: int = len(SOURCE)) -> bytes:
    return _varint(source) + _varint(target) + commands


def _delta_patch(delta: bytes) -> str:
    return _binary("src.bin", "delta", len(delta), zlib.compress(delta, 9))


#: A copy of 64 KiB from offset 0: one byte (no offset or size bytes follow).
COPY_64K = bytes([0x80])


def _bombs() -> Iterator[Any]:
    """(id, patch text, envelope code, details reason)."""
    yield pytest.param(
        _binary("bomb.bin", "literal", BOMB, _zeros(BOMB), new=True),
        "VALIDATION",
        "file_too_large",
        id="literal-states-a-huge-size",
    )
    yield pytest.param(
        _binary("bomb.bin", "literal", 10, _zeros(BOMB), new=True),
        "VALIDATION",
        "binary",
        id="literal-inflates-past-its-stated-size",
    )
    yield pytest.param(
        _binary("bomb.bin", "literal", 2**62, zlib.compress(b"x"), new=True),
        "VALIDATION",
        "file_too_large",
        id="literal-states-2**62",
    )
    copies = COPY_64K * (BOMB // 0x10000)
    yield pytest.param(
        _delta_patch(_delta(BOMB, copies)),
        "VALIDATION",
        "file_too_large",
        id="delta-states-a-huge-target",
    )
    yield pytest.param(
        _delta_patch(_delta(2**62, COPY_64K)),
        "VALIDATION",
        "file_too_large",
        id="delta-states-2**62",
    )
    yield pytest.param(
        _delta_patch(_delta(100, copies)),
        "PATCH_FAILED",
        "binary_hunk",
        id="delta-copies-build-past-its-stated-size",
    )
    inserts = (bytes([127]) + b"i" * 127) * 8192
    yield pytest.param(
        _delta_patch(_delta(100, inserts)),
        "PATCH_FAILED",
        "binary_hunk",
        id="delta-inserts-build-past-its-stated-size",
    )
    tiny = MAX_DELTA_COMMANDS + 1
    yield pytest.param(
        _delta_patch(_delta(tiny, b"\x01i" * tiny)),
        "PATCH_FAILED",
        "binary_hunk",
        id="delta-of-one-byte-inserts-past-the-instruction-cap",
    )
    far_copy = bytes([0x80 | 0x0F | 0x70, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF])
    yield pytest.param(
        _delta_patch(_delta(0xFFFFFF, far_copy)),
        "PATCH_FAILED",
        "binary_hunk",
        id="delta-copies-from-past-the-file",
    )
    yield pytest.param(
        _delta_patch(_delta(len(SOURCE), bytes([0x93, 0xFF, 0xFF, 0x10]))),
        "PATCH_FAILED",
        "binary_hunk",
        id="delta-copy-straddles-the-end",
    )
    yield pytest.param(
        _delta_patch(_delta(100, COPY_64K, source=len(SOURCE) + 1)),
        "PATCH_FAILED",
        "binary_hunk",
        id="delta-for-another-source-size",
    )
    # Each hunk within the limit, together eight times it.
    each = MAX_FILE_SIZE // 4
    part = _zeros(each)
    many = "".join(_binary(f"part{i}.bin", "literal", each, part, new=True) for i in range(32))
    yield pytest.param(many, "VALIDATION", "file_too_large", id="many-hunks-add-up")


def _snapshot(root: Path) -> dict[str, str]:
    """Every file under the root but the journal: its path and a hash of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".ledgerfs" not in p.parts
    }


def _memory(server: Server, field: str) -> int:
    """A memory figure of the server process (`VmHWM`: its peak), in bytes."""
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    [line] = [line for line in status.splitlines() if line.startswith(field + ":")]
    return int(line.split()[1]) * 1024


def _start_peak(server: Server) -> int:
    """Reset the server's peak (VmHWM) to what it holds now, and return that."""
    Path(f"/proc/{server.proc.pid}/clear_refs").write_text("5")
    return _memory(server, "VmRSS")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    root = tmp_path_factory.mktemp("bombs")
    (root / "src.bin").write_bytes(SOURCE)
    (root / "keep.txt").write_text("kept\n")
    with Server(root) as server:
        # Warm the paths a patch takes, so the peak measured is the bombs' own.
        ok(
            server.call(
                "apply_patch",
                {
                    "patch": _binary("warm.bin", "literal", 3, zlib.compress(b"abc"), new=True),
                    "dry_run": True,
                },
            )
        )
        yield server, root


@pytest.mark.parametrize(("patch", "code", "reason"), list(_bombs()))
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_patch_bomb_is_refused_in_bounded_memory(
    served: tuple[Server, Path], patch: str, code: str, reason: str, dry_run: bool
) -> None:
    server, root = served
    before = _snapshot(root)
    start = _start_peak(server)
    body = error(server.call("apply_patch", {"patch": patch, "dry_run": dry_run}), code)
    assert body["details"]["reason"] == reason, body
    assert _snapshot(root) == before
    assert _memory(server, "VmHWM") - start < RSS_GROWTH
    # The same bomb inside a batch is refused the same way.
    start = _start_peak(server)
    batch = {"operations": [{"op": "patch", "patch": patch}], "dry_run": dry_run}
    assert error(server.call("batch", batch), code)["details"]["reason"] == reason
    assert _snapshot(root) == before
    assert _memory(server, "VmHWM") - start < RSS_GROWTH


def test_an_honest_binary_patch_still_applies(served: tuple[Server, Path]) -> None:
    server, root = served
    data = bytes(range(200)) * 50
    patch = _binary("honest.bin", "literal", len(data), zlib.compress(data), new=True)
    ok(server.call("apply_patch", {"patch": patch}))
    assert (root / "honest.bin").read_bytes() == data
    delta = _delta(0x10000 + 3, COPY_64K + bytes([3]) + b"end")
    ok(server.call("apply_patch", {"patch": _delta_patch(delta)}))
    assert (root / "src.bin").read_bytes() == SOURCE + b"end"
    (root / "src.bin").write_bytes(SOURCE)


@pytest.mark.parametrize("where", ["new file", "existing file"])
def test_text_hunks_cannot_build_a_file_over_the_limit(tmp_path: Path, where: str) -> None:
    line = "x" * 1023 + "\n"
    lines = MAX_FILE_SIZE // len(line) + 1
    if where == "new file":
        patch = f"--- /dev/null\n+++ b/huge.txt\n@@ -0,0 +1,{lines} @@\n" + ("+" + line) * lines
    else:
        # A file just under the limit and a hunk at its end that adds past it.
        (tmp_path / "huge.txt").write_text("first\n" + line * (lines - 2))
        last = lines - 1
        patch = f"--- a/huge.txt\n+++ b/huge.txt\n@@ -{last},1 +{last},3 @@\n " + line
        patch += ("+" + line) * 2
    before = _snapshot(tmp_path)
    with Server(tmp_path) as server:
        for dry_run in (True, False):
            body = error(server.call("apply_patch", {"patch": patch, "dry_run": dry_run}))
            assert (body["code"], body["details"]["reason"]) == ("VALIDATION", "file_too_large")
            assert body["details"]["limit"] == MAX_FILE_SIZE
    assert _snapshot(tmp_path) == before
