"""``rtimer check`` changes nothing: every file's bytes, mode and mtime and every directory's
listing are the same after it, on damaged data dirs of each kind (issue #30 point 4). Before,
check opened a Broker: it cut torn tails, rewrote ConsumeQueue entries and created stores."""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
from pathlib import Path

import pytest

from tests.support.fault_support import (SEGMENT, cq_file, flip, rtimer_check, seed, segment, vlog_files)

BLOCK = 4096


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: kind, mode, mtime (ns) and content hash; a directory's
    listing is in the keys."""
    out = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(top) / name
            st = path.lstat()
            digest = content_digest(path) if path.is_file() else None
            out[str(path.relative_to(root))] = (st.st_mode, st.st_mtime_ns, st.st_size, digest)
    return out


def content_digest(path: Path) -> str:
    """A hash of a file's content that reads only its data: the wheel's 387 MB sparse file is
    nearly all hole. Each non-zero 4 KiB block is hashed with its offset; a hole and a block of
    zeros are the same content and hash alike, so two digests are equal exactly when the bytes
    are (the size is compared beside it)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        fd, pos = f.fileno(), 0
        while True:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data past pos
                    break
                raise
            end = os.lseek(fd, data, os.SEEK_HOLE)
            data -= data % BLOCK
            f.seek(data)
            for at in range(data, end, BLOCK):
                block = f.read(BLOCK)
                if block.strip(b"\0"):
                    digest.update(at.to_bytes(8, "big") + len(block).to_bytes(4, "big") + block)
            pos = end
    return digest.hexdigest()


def test_the_content_digest_sees_every_byte_and_no_hole(tmp_path):
    sparse, dense = tmp_path / "sparse", tmp_path / "dense"
    with open(sparse, "wb") as f:
        f.truncate(1 << 20)
        f.seek(300_000)
        f.write(b"abc")
    dense.write_bytes(bytes(300_000) + b"abc" + bytes((1 << 20) - 300_003))
    assert content_digest(sparse) == content_digest(dense)  # a hole reads as zeros
    for at, byte in ((300_001, b"x"), (5, b"\1"), ((1 << 20) - 1, b"\1")):
        changed = bytearray(dense.read_bytes())
        changed[at:at + 1] = byte
        other = tmp_path / f"changed-{at}"
        other.write_bytes(bytes(changed))
        assert content_digest(other) != content_digest(dense), at


def _torn_commitlog_tail(path: Path) -> None:
    newest = max((path / "commitlog").iterdir())
    with open(newest, "ab") as f:
        f.write(newest.read_bytes()[:120])  # half a record nothing indexes


def _cut_commitlog(path: Path) -> None:
    newest = max((path / "commitlog").iterdir())
    os.truncate(newest, newest.stat().st_size // 2)


def _torn_cq_entry(path: Path) -> None:
    last = max((path / "consumequeue" / "orders" / "0").iterdir())
    with open(last, "ab") as f:
        f.write(b"\x00" * 7)


def _missing_timer_store(path: Path) -> None:
    shutil.rmtree(path / "timer-rocksdb")


def _torn_vlog(path: Path) -> None:
    [seg] = vlog_files(path)
    os.truncate(seg, seg.stat().st_size - 100)


DAMAGE = {
    "none": lambda path: None,
    "commitlog torn tail": _torn_commitlog_tail,
    "commitlog cut in half": _cut_commitlog,
    "commitlog middle segment deleted": lambda path: segment(path, 1).unlink(),
    "commitlog flipped byte": lambda path: flip(segment(path, 0), 5000),
    "consumequeue torn entry": _torn_cq_entry,
    "consumequeue middle file deleted": lambda path: cq_file(path, 1).unlink(),
    "timer store deleted": _missing_timer_store,
    "vlog torn tail": _torn_vlog,
    "vlog segment deleted": lambda path: vlog_files(path)[0].unlink(),
}


@pytest.mark.parametrize("engine", ["rocksdb", "wheel"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_check_changes_no_byte_no_mtime_no_name(tmp_path, damage, engine):
    if engine == "wheel" and ("vlog" in damage or "timer store" in damage):
        pytest.skip("a RocksDB-only fault")
    seed(tmp_path, engine)
    DAMAGE[damage](tmp_path)
    before = tree(tmp_path)
    code, out = rtimer_check(tmp_path)
    assert tree(tmp_path) == before, out
    healthy = ("none", "commitlog torn tail", "consumequeue torn entry")  # crash leftovers
    assert code == (0 if damage in healthy else 1), out


def test_check_reports_a_torn_tail_without_cutting_it(tmp_path):
    seed(tmp_path)
    _torn_commitlog_tail(tmp_path)
    from click.testing import CliRunner
    from cli.main import cli
    result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "check", "--json"])
    import json
    report = json.loads(result.output)
    assert report["ok"] and report["torn_tail"]["bytes"] == 120
    assert any("will be cut by the next open" in note for note in report["notes"])


def test_check_does_not_recreate_a_missing_timer_store(tmp_path):
    seed(tmp_path)
    _missing_timer_store(tmp_path)
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "timer-rocksdb is missing" in out
    assert not (tmp_path / "timer-rocksdb").exists()


def test_check_opens_rocksdb_read_only_beside_a_reader(tmp_path):
    """RocksDB's read-only mode takes no LOCK: a second read-only check runs while one is open,
    which a writable open could not (it would hold the store's LOCK)."""
    from rocks_timer.readonly import ReadOnlyView
    from rocks_timer.check import check_view
    seed(tmp_path)
    with ReadOnlyView(tmp_path) as first, ReadOnlyView(tmp_path) as second:
        assert check_view(first).ok and check_view(second).ok
        with pytest.raises(PermissionError):
            first.commitlog.write(first.commitlog.max_offset, b"x", 0)


def test_check_waits_for_no_one_and_says_why_while_a_broker_holds_the_dir(tmp_path):
    from rocks_timer import StoreLockedError
    from rocks_timer.readonly import ReadOnlyView
    from tests.support.fault_support import reopen
    seed(tmp_path)
    with reopen(tmp_path):
        with pytest.raises(StoreLockedError, match="in use by a running broker"):
            ReadOnlyView(tmp_path)
