"""engine.fileops.load_entry: a load holds the file's bytes to its end, whatever its stat said."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ledgerfs.engine import fileops
from ledgerfs.engine.fileops import load_entry
from ledgerfs.journal import content_hash

SIZES = [0, 1, 4095, 4096, fileops._CHUNK - 1, fileops._CHUNK, 2 * fileops._CHUNK + 3]


@pytest.mark.parametrize("size", SIZES)
def test_a_load_reads_the_whole_file(tmp_path: Path, size: int) -> None:
    data = bytes(i % 251 for i in range(size))
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    entry = load_entry(str(path))
    assert entry.data == data
    assert entry.hash == content_hash(data)


@pytest.mark.parametrize("size", [1, 4096, fileops._CHUNK + 7])
@pytest.mark.parametrize("skew", [-1, +1, -4096, +fileops._CHUNK])
def test_a_file_whose_size_changed_since_its_stat_is_read_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, skew: int
) -> None:
    """The stat the load reads by says a size the file no longer has (it grew or
    shrank between the stat and the read): the bytes are still all of it."""
    data = bytes(i % 251 for i in range(size))
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    real_fstat = os.fstat

    def skewed(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        fields = list(st)
        fields[6] = max(0, st.st_size + skew)  # st_size
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", skewed)
    entry = load_entry(str(path))
    assert entry.data == data
