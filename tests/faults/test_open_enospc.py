"""A full disk at open is an I/O error ("no space left"), not "damaged, run `rtimer repair`":
on a real, small tmpfs filled to the last byte (root only: mounting needs it; skipped with the
reason otherwise). Freeing space is all it takes; nothing was lost."""
from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from tests.tools.test_cli_remote import RTIMER, ROOT

TMPFS_BYTES = 8 << 20


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; a full disk cannot be made otherwise")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs",
                           str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def rtimer(data: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RTIMER, "--data-dir", str(data), "--lock-wait", "0", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def fill(disk: Path) -> Path:
    """Write until the file system says ENOSPC; returns the filler file."""
    filler = disk / "filler"
    chunk = b"\0" * (64 << 10)
    with open(filler, "wb", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
        for size in (4096, 512, 1):  # the last pages too
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return filler


@pytest.mark.parametrize("command", [("scan",), ("send", "orders", "y", "--delay", "1h")])
def test_a_full_disk_at_open_is_an_io_error_not_damage(small_disk, command):
    data = small_disk / "data"
    sent = rtimer(data, "send", "orders", "x", "--delay", "1h")
    assert sent.returncode == 0, sent.stderr
    filler = fill(small_disk)
    refused = rtimer(data, *command)
    assert refused.returncode == 1
    [line] = refused.stderr.strip().splitlines()
    assert "no space left" in line.lower(), line
    assert "is damaged" not in line and "then run `rtimer repair`" not in line
    filler.unlink()
    listed = rtimer(data, "scan")
    assert listed.returncode == 0, listed.stderr
    assert "1 pending" in listed.stdout
    assert rtimer(data, "check").returncode == 0
