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


def _record_dir_fsyncs(monkeypatch) -> list:
    """The directories fsynced from now on (their paths, in order)."""
    synced, real = [], os.fsync

    def fsync(fd):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_create_durably_fsyncs_the_directory_once_per_name(tmp_path, monkeypatch):
    synced = _record_dir_fsyncs(monkeypatch)
    fd = fileio.create_durably(tmp_path / "seg", os.O_RDWR, 0o600)
    os.write(fd, b"abc")
    os.close(fd)
    assert synced == [str(tmp_path)]  # the new name, before anything is written to it
    assert (tmp_path / "seg").stat().st_mode & 0o777 == 0o600
    fd = fileio.create_durably(tmp_path / "seg", os.O_RDWR, 0o600)  # it exists: no fsync
    try:
        assert os.pread(fd, 3, 0) == b"abc"  # and an existing file is not truncated
    finally:
        os.close(fd)
    assert synced == [str(tmp_path)]


def test_mkdir_durably_fsyncs_each_new_directory_s_parent(tmp_path, monkeypatch):
    synced = _record_dir_fsyncs(monkeypatch)
    target = tmp_path / "a" / "b" / "c"
    assert fileio.mkdir_durably(target, 0o700) is True
    assert synced == [str(tmp_path), str(tmp_path / "a"), str(tmp_path / "a" / "b")]
    assert all((tmp_path / p).stat().st_mode & 0o777 == 0o700 for p in ("a", "a/b", "a/b/c"))
    assert fileio.mkdir_durably(target) is False  # already there: nothing made, nothing synced
    assert len(synced) == 3


def test_mkdir_durably_refuses_a_file_in_the_way(tmp_path):
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(FileExistsError):
        fileio.mkdir_durably(tmp_path / "f" / "sub")
