"""File helpers: all-or-nothing writes with ordinary permissions, bounded reads."""

from __future__ import annotations

import os
import stat

import pytest

from gpuplan._io import read_bounded, write_atomic
from gpuplan.errors import ModelFileError


def test_write_atomic_gives_the_mode_open_would(tmp_path):
    umask = os.umask(0o022)
    try:
        p = tmp_path / "plot.png"
        write_atomic(p, b"data")
        assert p.read_bytes() == b"data"
        assert stat.S_IMODE(p.stat().st_mode) == 0o644   # 0o666 & ~0o022
    finally:
        os.umask(umask)


def test_write_atomic_leaves_nothing_when_writing_fails(tmp_path):

    p = tmp_path / "out.json"
    with pytest.raises(TypeError):
        write_atomic(p, 12345)  # not bytes or str: the write raises
    assert not p.exists()
    assert list(tmp_path.iterdir()) == []


def test_read_bounded_refuses_large_files(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b"x" * 101)
    assert read_bounded(p, 101) == b"x" * 101
    with pytest.raises(ModelFileError, match="larger than the 100-byte limit"):
        read_bounded(p, 100)
