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


def test_check_writable_refuses_what_cannot_be_a_file(tmp_path):
    """Every path a write would fail on, block on, or that would replace something other than
    a regular file is refused before any work, in one line naming it (tools/fuzz, stop 24)."""
    from gpuplan._io import check_writable
    from gpuplan.errors import InputError

    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "afile").write_text("x")
    cases = {
        tmp_path / ("a" * 300 + ".png"): "File name too long",
        tmp_path / ("c/" * 2100) / "x.png": "File name too long",
        tmp_path / "missing" / "x.png": "does not exist",
        tmp_path / "loop1": "not a regular file",
        tmp_path / "fifo": "not a regular file",
        "/dev/null": "not a regular file",
        tmp_path / "afile" / "x.json": "is a file, not a directory",
        tmp_path: "is a directory",
        tmp_path / ("b" * 220 + ".png"): "over 200 bytes",
    }
    for path, why in cases.items():
        with pytest.raises(InputError, match=why) as e:
            check_writable(path, what="--plot")
        assert "\n" not in str(e.value) and str(e.value).startswith("--plot ")
    assert check_writable(tmp_path / "ok.png") == tmp_path / "ok.png"


def test_write_atomic_turns_a_full_disk_into_one_line(tmp_path, monkeypatch):
    import errno

    from gpuplan.errors import InputError

    real = os.fdopen

    class Full:
        def __init__(self, fd, mode):
            self.f = real(fd, mode)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdopen", Full)
    p = tmp_path / "out.json"
    with pytest.raises(InputError, match="No space left on device; nothing was written"):
        write_atomic(p, "{}")
    assert list(tmp_path.iterdir()) == []
