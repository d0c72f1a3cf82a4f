import os

import pytest

from rocks_timer import fileio


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
@pytest.mark.parametrize("size", [0, 1, fileio.SLICE - 1, fileio.SLICE, 3 * fileio.SLICE + 17])
def test_pwrite_all_writes_every_byte_at_the_offset(tmp_path, monkeypatch, native, size):
    if native and fileio._native_pwrite_all is None:
        pytest.skip("the C extension was not built")
    if not native:
        monkeypatch.setattr(fileio, "_native_pwrite_all", None)
    data = os.urandom(size)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"head")
        fileio.pwrite_all(fd, memoryview(data), 4)
        assert os.pread(fd, size + 10, 0) == b"head" + data
    finally:
        os.close(fd)


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_pwrite_all_raises_oserror(monkeypatch, native, tmp_path):
    if native and fileio._native_pwrite_all is None:
        pytest.skip("the C extension was not built")
    if not native:
        monkeypatch.setattr(fileio, "_native_pwrite_all", None)
    fd = os.open(tmp_path / "f", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        with pytest.raises(OSError):
            fileio.pwrite_all(fd, b"x" * 10, 0)
    finally:
        os.close(fd)
