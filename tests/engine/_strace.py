"""Run a process under `strace` and read back its system calls, files and WAL frames.

The trace is taken with `-f -ttt -T -y -xx`: every thread, each call's start and
duration, every descriptor with the path it names, every string in hex (so a
reply's JSON and a WAL frame's bytes come back exact). Lines are read in the
order strace printed them, which is the order it saw the calls enter and leave:
a call split over two lines (another thread's call in between) enters at the
first and returns at the second. `Call.entry` and `Call.exit` are those line
numbers, so "A returned before B began" is `a.exit < b.entry`, whatever the
threads.

The journal's WAL is read frame by frame from the `pwrite64`s SQLite makes (a
24-byte frame header, then the page): `wal_frames` decodes the rows of the
`transactions` table each page holds, so a test sees when a transaction's
intent, its checkpoint mark or its recovery record was written, by id.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

STRACE = shutil.which("strace")

#: What the checks read: writes (replies, WAL frames, temp files), flushes, and
#: the file steps of a transaction.
TRACED = (
    "write",
    "pwrite64",
    "fsync",
    "fdatasync",
    "syncfs",
    "sync",
    "ftruncate",
    "unlink",
    "unlinkat",
    "rename",
    "renameat",
    "renameat2",
    "mkdir",
    "mkdirat",
    "rmdir",
    "openat",
)
#: Bytes of each string strace prints: a WAL page with its header, or a few
#: dozen replies written together; a longer write (the zeros written ahead) is cut.
STRING_LIMIT = 32768
FLUSHES = frozenset({"fsync", "fdatasync", "syncfs", "sync"})
FILE_STEPS = frozenset(
    {"write", "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir"}
)


def unavailable() -> str | None:
    """Why strace cannot trace a child here, or None if it can."""
    if STRACE is None:
        return "strace is not installed (apt-get install strace)"
    try:
        probe = subprocess.run(
            [STRACE, "-f", "-qq", "-e", "trace=fdatasync", "-o", os.devnull, "true"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"strace cannot run: {exc}"
    if probe.returncode != 0:
        reason = probe.stderr.decode(errors="replace").strip()
        return f"strace cannot trace here (ptrace refused?): {reason}"
    return None


def command(output: Path, argv: Sequence[str], *, extra: Sequence[str] = ()) -> list[str]:
    """`argv` run under strace, writing the trace to `output` (`extra`: more
    strace options, such as a fault to inject)."""
    assert STRACE is not None
    return [
        STRACE,
        "-f",
        "--seccomp-bpf",  # stop only at the traced calls: the server runs near full speed
        "-qq",
        "-ttt",
        "-T",
        "-y",
        "-xx",
        "-s",
        str(STRING_LIMIT),
        "-e",
        "trace=" + ",".join(TRACED),
        "-o",
        str(output),
        *extra,
        "--",
        *argv,
    ]


def _unhex(text: str) -> bytes:
    """The bytes of `-xx` hex text (`\\x68\\x69`)."""
    return bytes.fromhex(text.replace("\\x", ""))


@dataclass
class Call:
    """One system call: where it entered and returned in the trace, and what it did."""

    entry: int
    exit: int
    tid: int
    name: str
    args: list[str]
    result: int | None

    def fd_path(self, i: int = 0) -> str | None:
        """The path `-y` printed for descriptor argument `i` (AT_FDCWD's too)."""
        if i >= len(self.args) or not self.args[i].endswith(">"):
            return None
        arg = self.args[i]
        return _unhex(arg[arg.rindex("<") + 1 : -1]).decode("utf-8", "surrogateescape")

    def string(self, i: int) -> bytes:
        """String argument `i`, decoded (what strace printed of it)."""
        arg = self.args[i]
        assert arg.startswith('"'), (self.name, arg)
        return _unhex(arg[1 : arg.rindex('"')])

    def cut(self, i: int) -> bool:
        """Whether strace printed string argument `i` cut short (past STRING_LIMIT)."""
        return self.args[i].endswith("...")

    def number(self, i: int) -> int:
        return int(self.args[i].split("<", 1)[0], 0)

    def target(self, dir_arg: int, name_arg: int) -> str:
        """The path a (dirfd, name) pair names."""
        name = self.string(name_arg).decode("utf-8", "surrogateescape")
        if name.startswith("/"):
            return name
        folder = self.fd_path(dir_arg) if dir_arg >= 0 else os.getcwd()
        return os.path.join(folder or "", name)

    def paths(self) -> list[str]:
        """Every path this call writes, removes or names, as a file step."""
        n = self.name
        if n == "openat":
            return [self.target(0, 1)]
        if n in ("write", "pwrite64", "ftruncate", "fsync", "fdatasync", "syncfs"):
            path = self.fd_path(0)
            return [path] if path else []
        if n in ("unlink", "mkdir", "rmdir"):
            return [self.target(-1, 0)]
        if n == "rename":
            return [self.target(-1, 0), self.target(-1, 1)]
        if n in ("unlinkat", "mkdirat"):
            return [self.target(0, 1)]
        if n in ("renameat", "renameat2"):
            return [self.target(0, 1), self.target(2, 3)]
        return []

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result >= 0


_LINE = re.compile(r"^(\d+) +\d+\.\d+ (.*)$")
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")


def _split_args(text: str) -> list[str]:
    """The arguments: strings and paths are hex, so no comma hides inside one
    (and none of the traced calls takes a struct or an array)."""
    return [arg.strip() for arg in text.split(", ")] if text.strip() else []


def read(path: Path) -> list[Call]:
    """The calls of a trace, ordered by where they entered."""
    calls: list[Call] = []
    number = 0
    open_calls: dict[tuple[int, str], tuple[int, str]] = {}
    for number, raw in enumerate(path.read_text(errors="surrogateescape").splitlines()):
        line = _LINE.match(raw)
        if line is None:
            continue
        tid, rest = int(line.group(1)), line.group(2)
        if rest.startswith(("+++", "---")):
            continue
        resumed = _RESUMED.match(rest)
        if resumed is not None:
            name = resumed.group(1)
            if (tid, name) not in open_calls:
                continue
            entry, head = open_calls.pop((tid, name))
            text, exit_line = head + resumed.group(2), number
        elif rest.endswith("<unfinished ...>"):
            name = rest.split("(", 1)[0]
            open_calls[(tid, name)] = (number, rest[: -len("<unfinished ...>")].rstrip())
            continue
        else:
            name = rest.split("(", 1)[0]
            text, entry, exit_line = rest, number, number
        # `call(args) = result ...`, padded with spaces before the `=` at times.
        at = text.rfind(" = ")
        inner, tail = text[:at].rstrip(), text[at + 3 :]
        if at < 0 or not inner.endswith(")"):
            continue
        inner = inner[:-1]
        value = tail.split(" ", 1)[0].split("<", 1)[0]
        result = None if value == "?" else int(value)
        inner = inner[len(name) + 1 :]
        calls.append(Call(entry, exit_line, tid, name, _split_args(inner), result))
    # A call the process was killed in (or whose return strace never saw) entered,
    # and may have done its work: it returns at the trace's end, with no result.
    for (tid, name), (entry, head) in open_calls.items():
        calls.append(Call(entry, number + 1, tid, name, _split_args(head[len(name) + 1 :]), None))
    calls.sort(key=lambda c: c.entry)
    return calls


# The journal's WAL, frame by frame.

_FRAME_HEADER = 24


@dataclass
class Frame:
    """One WAL frame SQLite wrote: its page, and whether it ends a commit."""

    header: Call
    page: Call
    pgno: int
    commit: bool
    rows: dict[int, tuple[str, int]] = field(default_factory=dict)  # tx id: (state, checkpointed)


def wal_frames(calls: Sequence[Call], wal: str) -> list[Frame]:
    """Every frame written to `wal`, in order, with the transactions rows it holds."""
    frames: list[Frame] = []
    pending: dict[int, Call] = {}  # tid: its last frame header
    for call in calls:
        if call.name != "pwrite64" or call.fd_path(0) != wal or not call.ok:
            continue
        size, offset = call.number(2), call.number(3)
        if size == _FRAME_HEADER:
            pending[call.tid] = call
            continue
        header = pending.pop(call.tid, None)
        if header is None or header.number(3) + _FRAME_HEADER != offset:
            continue  # the WAL header, or the zeros written ahead at open
        head = header.string(1)
        pgno, truncate = struct.unpack(">II", head[:8])
        frames.append(Frame(header, call, pgno, truncate != 0, _transactions(call.string(1), pgno)))
    return frames


def commit_of(frames: Sequence[Frame], index: int) -> Frame:
    """The frame that commits frame `index` (the next commit frame, or itself)."""
    for frame in frames[index:]:
        if frame.commit:
            return frame
    raise AssertionError(f"frame {index} was never committed")


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = 0
    for i in range(8):
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | data[at + 8], at + 9


_STATES = {"pending", "committed", "rolled_back", "recovered"}
_OWNER = re.compile(r"^[0-9a-f]{32}$")


def _transactions(page: bytes, pgno: int) -> dict[int, tuple[str, int]]:
    """{id: (state, checkpointed)} of the `transactions` rows on a table leaf page.

    A row is recognised by its shape (14 columns, a known state, an owner id);
    only the columns up to `checkpointed`, which come before the large ones, are
    read, so a row whose tail overflowed the page still counts.
    """
    base = 100 if pgno == 1 else 0
    if len(page) < base + 8 or page[base] != 0x0D:
        return {}
    cells = struct.unpack(">H", page[base + 3 : base + 5])[0]
    rows: dict[int, tuple[str, int]] = {}
    for i in range(cells):
        (pointer,) = struct.unpack(">H", page[base + 8 + 2 * i : base + 10 + 2 * i])
        try:
            row = _row(page, pointer)
        except (IndexError, UnicodeDecodeError, ValueError):
            continue
        if row is not None:
            rows[row[0]] = (row[1], row[2])
    return rows


def _row(page: bytes, at: int) -> tuple[int, str, int] | None:
    _, at = _varint(page, at)  # payload size
    rowid, at = _varint(page, at)
    header_size, cursor = _varint(page, at)
    body = at + header_size
    types: list[int] = []
    while cursor < body and len(types) < 11:
        serial, cursor = _varint(page, cursor)
        types.append(serial)
    if len(types) < 11:
        return None
    values: list[object] = []
    for serial in types[:11]:
        if serial >= 13 and serial % 2:
            n = (serial - 13) // 2
            values.append(page[body : body + n].decode("utf-8"))
            body += n
        elif serial >= 12 and not serial % 2:
            n = (serial - 12) // 2
            values.append(page[body : body + n])
            body += n
        elif serial in (0, 8, 9):
            values.append(None if serial == 0 else serial - 8)
        elif serial <= 6:
            n = (0, 1, 2, 3, 4, 6, 8)[serial]
            values.append(int.from_bytes(page[body : body + n], "big", signed=True))
            body += n
        else:
            values.append(None)
            body += 8
    state, owner, checkpointed = values[2], values[9], values[10]
    if state not in _STATES or not isinstance(owner, str) or not _OWNER.match(owner):
        return None
    if not isinstance(checkpointed, int):
        return None
    return rowid, str(state), checkpointed


def first_seen(frames: Sequence[Frame]) -> Iterator[tuple[int, int, str, int]]:
    """(frame index, tx, state, checkpointed) for each row state a frame writes first."""
    seen: set[tuple[int, str, int]] = set()
    for index, frame in enumerate(frames):
        for tx, (state, checkpointed) in frame.rows.items():
            if (tx, state, checkpointed) not in seen:
                seen.add((tx, state, checkpointed))
                yield index, tx, state, checkpointed
