"""The recovery fault campaign (issue 30, ARCHITECTURE §9): RocksDB-level faults on both layouts.

Each row seeds a data dir in a real child process that sends, delivers, cancels and
reschedules, then is killed with SIGKILL (so the index's newest entries are only in RocksDB's
WAL, as after any crash); damages one thing; runs the documented recovery (``rtimer repair``
as a real subprocess where it matters); then delivers everything and checks the promise:
every acknowledged, uncancelled message is delivered exactly once, or is named as lost by the
repair, which then exits non-zero. No cancelled message is delivered.

    fault                          vlog                              inline
    plain kill -9, then repair     nothing to repair, all kept       same
    WAL torn tail                  opens; all but the torn batch     same
    WAL 8 zeroed bytes (middle)    open refused; repair: all         open refused; repair names
    index SST block corrupt        repair: all (from the segments)   repair: lost counted, exit 1
    MANIFEST corrupt               repair: all (from the segments)   repair refuses (exit 1)
    CURRENT missing                refused; repair: all              same
    timer-rocksdb/ removed         refused; repair: empty, exit 1    same
    kill -9 inside repair (each    the next repair finishes: all     same
      step)
    ENOSPC at open / in repair     StoreIOError, nothing changed   same (root + tmpfs only)
    EACCES/EPERM where repair      StoreIOError, nothing changed   same
      writes
    repair --rebuild of a healthy  the rebuilt count = pending: the  same (salvaged index)
      store                          removal records hold
    crash inside a reschedule or   voided at open; a rebuild gives   -
      cancel (before its batch)      the message back once
    --engine memory / engine.json  refused (ConfigError)             -
      edited to wheel
    vlog.next_id rolled back       no live segment truncated         -
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rocks_timer.timer import keys as K
from rocks_timer import Broker, BrokerConfig, ConfigError, CorruptRecordError, ManualClock
from rocks_timer.timer.rocksdb.recovery import KILL_AT_ENV, KILL_POINTS

ROOT = Path(__file__).resolve().parents[2]
HOUR = 3_600_000
LAYOUTS = ("vlog", "inline")

CHILD = r"""
import json, os, signal, sys
from rocks_timer import Broker, BrokerConfig, Message
path, layout, n, flush_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
config = BrokerConfig(rocksdb_layout=layout, timer_precision_ms=10)
out = {"acked": [], "cancelled": [], "delivered_before": []}
with Broker.open(path, config) as broker:
    soon = broker.send_batch([Message("later", b"soon%d" % i + bytes(300), keys=["s%d" % i])
                              for i in range(5)], delay_ms=50)
    out["acked"] += [r.msg_id for r in soon]
    import time
    deadline = time.time() + 10
    while broker.stats()["pending"] and time.time() < deadline:
        broker.tick()
        time.sleep(0.01)
    handles = []
    for i in range(n):
        r = broker.send(Message("later", b"m%05d" % i + bytes(300), keys=["k%d" % i]),
                        delay_ms=HOUR + i)
        out["acked"].append(r.msg_id)
        handles.append(r.handle)
        if i % 10 == 3:
            assert broker.cancel(r.handle)
            out["cancelled"].append(r.msg_id)
        elif i % 10 == 5:
            broker.reschedule(r.handle, int(time.time() * 1000) + HOUR + 1000 + i)
        if i == flush_at:
            broker.timer.flush()  # what came before is in table files, the rest in the WAL
    print(json.dumps(out), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""".replace("HOUR", str(HOUR))


def seed(path: Path, layout: str, n: int = 120, flush_at: int = -1) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), layout, str(n),
                           str(flush_at)], capture_output=True, cwd=ROOT, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    return json.loads(done.stdout.decode().splitlines()[-1])


def rtimer(path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", "--data-dir", str(path), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, **(env or {})})


def repair(path: Path, env: dict | None = None) -> tuple[int, dict]:
    return repair_args(path, env=env)


def repair_args(path: Path, *args: str, env: dict | None = None) -> tuple[int, dict]:
    done = rtimer(path, "repair", "--json", *args, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    try:
        return done.returncode, json.loads(done.stdout)
    except ValueError:
        return done.returncode, {"error": done.stderr}


def deliver_all(path: Path, layout: str) -> Counter:
    clock = ManualClock(int(time.time() * 1000) + 3 * HOUR)
    with Broker.open(path, BrokerConfig(rocksdb_layout=layout), clock=clock) as broker:
        for _ in range(200):
            broker.tick()
            if broker.stats()["pending"] == 0:
                break
        assert broker.stats()["pending"] == 0
        got: Counter = Counter()
        offset = 0
        while page := broker.pull("later", 0, offset, 500):
            got.update(m.msg_id for m in page)
            offset = page[-1].queue_offset + 1
        assert broker.timer.check()["problems"] == []
    return got


def holds(seeded: dict, got: Counter, lost: list[dict] = ()) -> None:
    """Every acknowledged, uncancelled message exactly once, or named as lost."""
    named = {m["msg_id"] for m in lost}
    cancelled = set(seeded["cancelled"])
    assert not [i for i in cancelled if got[i]], "a cancelled message was delivered"
    assert not [i for i, n in got.items() if n > 1], "a message was delivered twice"
    missing = [i for i in seeded["acked"] if i not in cancelled and not got[i] and i not in named]
    assert missing == [], f"{len(missing)} acknowledged messages neither delivered nor named"


def timer_dir(path: Path) -> Path:
    return path / "timer-rocksdb"


def newest_wal(path: Path) -> Path:
    return max(timer_dir(path).glob("*.log"), key=lambda p: p.stat().st_size)


# -- rows -----------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_repair_after_a_plain_kill_keeps_every_message(tmp_path, layout):
    """Issue 30: repair after kill -9 deleted every message whose entry was in the WAL."""
    seeded = seed(tmp_path, layout)
    code, report = repair(tmp_path)
    assert code == 0, report
    assert report["action"] == "none" and report["lost"] == []
    holds(seeded, deliver_all(tmp_path, layout))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_forced_rebuild_resurrects_nothing(tmp_path, layout):
    """``repair --rebuild`` of a healthy store: in vlog the index comes from the segments alone,
    so the removal records must say exactly what was delivered, cancelled and rescheduled
    (the rebuilt count is checked before any reconciliation with the CommitLog runs)."""
    seeded = seed(tmp_path, layout)
    with Broker.open(tmp_path, BrokerConfig(rocksdb_layout=layout)) as broker:
        pending = broker.stats()["pending"]
    code, report = repair_args(tmp_path, "--rebuild")
    assert code == 0 and report["action"] == "rebuilt" and report["lost"] == [], report
    assert report["recovered"] == pending
    holds(seeded, deliver_all(tmp_path, layout))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_torn_wal_tail_is_dropped_and_the_rest_kept(tmp_path, layout):
    seeded = seed(tmp_path, layout)
    wal = newest_wal(tmp_path)
    os.truncate(wal, wal.stat().st_size - 5)  # the last write cut short: never acknowledged
    got = deliver_all(tmp_path, layout)
    last = seeded["acked"][-1]
    holds({**seeded, "acked": [i for i in seeded["acked"] if i != last]}, got)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_zeroed_bytes_in_the_middle_of_the_wal(tmp_path, layout):
    """Issue 30: point-in-time recovery dropped every later record silently, and the vlog open
    then cut those messages' bodies."""
    seeded = seed(tmp_path, layout, n=200)
    wal = newest_wal(tmp_path)
    data = bytearray(wal.read_bytes())
    # the topic counter's row inside the batch of a plain send about a third of the way in
    # (later message 100: neither cancelled nor rescheduled; its key and value stay readable,
    # so an inline repair can name it; the row that also holds the pending count, key index
    # version 4). Not at a fixed fraction of the file: where that falls moves with the
    # batches' sizes, and on a cancel's batch the repair rightly names the cancelled message
    # lost (its removal record is in the segment, its index batch gone: it cannot tell
    # whether the cancel was acknowledged)
    at = data.find(K.topic_count_key(b"later"),
                   data.find(bytes.fromhex(seeded["acked"][5 + 100])))
    assert at > 0
    data[at:at + 8] = bytes(8)
    wal.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="rtimer repair"):
        Broker.open(tmp_path, BrokerConfig(rocksdb_layout=layout))
    segments_before = {p.name: p.stat().st_size
                       for p in (timer_dir(tmp_path) / "vlog").glob("*.vlog")}
    code, report = repair(tmp_path)
    for name, size in segments_before.items():  # nothing cut from the value segments
        assert (timer_dir(tmp_path) / "vlog" / name).stat().st_size >= size
    assert report["kept_as"] and Path(report["kept_as"]).is_dir()
    if layout == "vlog":
        assert code == 0, report
        assert report["lost"] == []
    else:
        assert code == 1 and report["lost"], report
        assert all(m["topic"] == "later" and m["due_ms"] for m in report["lost"])
    holds(seeded, deliver_all(tmp_path, layout), report["lost"])


def _corrupt_index_sst(path: Path) -> None:
    """Flip 64 bytes inside the first data block of the index's (``timer``'s) table file: the
    one whose properties name the column family ``timer`` (its name is stored in plain text)."""
    ssts = [p for p in timer_dir(path).glob("*.sst")
            if b"timer" in p.read_bytes() and b"meta" not in p.read_bytes()]
    assert ssts, "no table file of the timer column family"
    sst = max(ssts, key=lambda p: p.stat().st_size)
    data = bytearray(sst.read_bytes())
    for at in range(100, 164):
        data[at] ^= 0xFF
    sst.write_bytes(bytes(data))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_corrupt_index_table_block(tmp_path, layout):
    """Issue 30: repair discarded the whole SST although every body was in the segments."""
    seeded = seed(tmp_path, layout, n=200, flush_at=150)
    _corrupt_index_sst(tmp_path)
    code, report = repair(tmp_path)
    assert report.get("action") == "rebuilt", report
    if layout == "vlog":
        assert code == 0 and report["lost"] == [] and report["lost_unnamed"] == 0, report
        holds(seeded, deliver_all(tmp_path, layout))
    else:  # what was in the damaged block is named where the WAL still holds it, else counted
        assert code == 1 and (report["lost"] or report["lost_unnamed"] > 0), report
        got = deliver_all(tmp_path, layout)
        assert not [i for i in seeded["cancelled"] if got[i]]
        assert not [i for i, n in got.items() if n > 1]
        named = {m["msg_id"] for m in report["lost"]}
        missing = [i for i in seeded["acked"] if i not in seeded["cancelled"] and not got[i]
                   and i not in named]
        assert len(missing) <= report["lost_unnamed"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_missing_current_file(tmp_path, layout):
    seeded = seed(tmp_path, layout, flush_at=60)
    (timer_dir(tmp_path) / "CURRENT").unlink()
    with pytest.raises(CorruptRecordError, match="CURRENT"):
        Broker.open(tmp_path, BrokerConfig(rocksdb_layout=layout))
    code, report = repair(tmp_path)
    assert code == 0 and report["lost"] == [], report
    holds(seeded, deliver_all(tmp_path, layout))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_corrupt_manifest(tmp_path, layout):
    seeded = seed(tmp_path, layout, flush_at=60)
    manifest = max(timer_dir(tmp_path).glob("MANIFEST-*"))
    data = bytearray(manifest.read_bytes())
    for at in range(8, min(len(data), 72)):
        data[at] ^= 0xFF
    manifest.write_bytes(bytes(data))
    code, report = repair(tmp_path)
    if layout == "vlog":
        assert code == 0 and report["lost"] == [], report
        holds(seeded, deliver_all(tmp_path, layout))
    else:  # RocksDB's repair of a copy; what it cannot place is named from the key index
        assert code == 1 and (report["lost"] or report["lost_unnamed"] > 0), report
        assert all(m["keys"] for m in report["lost"]), report["lost"][:3]
        holds(seeded, deliver_all(tmp_path, layout), report["lost"])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_removed_timer_directory_is_refused_then_named_by_repair(tmp_path, layout):
    seed(tmp_path, layout)
    shutil.rmtree(timer_dir(tmp_path))
    with pytest.raises(CorruptRecordError, match="missing or empty"):
        Broker.open(tmp_path)
    assert not timer_dir(tmp_path).exists()  # nothing recreated it
    done = rtimer(tmp_path, "check")
    assert done.returncode != 0 and not timer_dir(tmp_path).exists()
    code, report = repair(tmp_path)
    assert code == 1 and report["action"] == "created-empty" and report["lost_unnamed"] < 0
    with Broker.open(tmp_path) as broker:
        assert broker.stats()["pending"] == 0


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_inside_repair_then_repair_again(tmp_path, layout, point):
    seeded = seed(tmp_path, layout, n=60, flush_at=30)
    (timer_dir(tmp_path) / "CURRENT").unlink()  # so the repair rebuilds
    done = rtimer(tmp_path, "repair", env={KILL_AT_ENV: point})
    assert done.returncode == -signal.SIGKILL, done.stderr
    if point == "switched":  # the repaired store is in place
        with Broker.open(tmp_path, BrokerConfig(rocksdb_layout=layout)) as broker:
            assert broker.stats()["pending"] > 0
    else:  # refused: never an empty store meanwhile
        with pytest.raises((CorruptRecordError, ConfigError)):
            Broker.open(tmp_path, BrokerConfig(rocksdb_layout=layout)).close()
    code, report = repair(tmp_path)
    assert code == 0 and report["lost"] == [], report
    holds(seeded, deliver_all(tmp_path, layout))
    assert not (tmp_path / "timer-rocksdb.rebuild").exists()
    for root, dirs, files in os.walk(timer_dir(tmp_path)):
        for name in files:
            assert os.stat(os.path.join(root, name)).st_mode & 0o077 == 0, name


def test_a_lost_store_and_record_are_told_by_the_commitlogs_timer_copies(tmp_path):
    seed(tmp_path, "vlog", n=20)  # five were delivered: stamped copies in the CommitLog
    shutil.rmtree(timer_dir(tmp_path))
    (tmp_path / "config" / "engine.json").unlink()
    with pytest.raises(CorruptRecordError, match="delivered timer messages"):
        Broker.open(tmp_path)
    assert not timer_dir(tmp_path).exists()


def test_an_engine_is_never_switched_under_pending_messages(tmp_path):
    seed(tmp_path, "vlog", n=20)
    with pytest.raises(ConfigError, match="timer-rocksdb"):
        Broker.open(tmp_path, BrokerConfig(timer_engine="memory"))
    assert rtimer(tmp_path, "--engine", "memory", "stats").returncode != 0
    record = tmp_path / "config" / "engine.json"
    stored = json.loads(record.read_text())
    record.write_text(json.dumps({**stored, "timer_engine": "wheel"}))
    assert rtimer(tmp_path, "stats").returncode != 0
    record.write_text(json.dumps(stored))
    with Broker.open(tmp_path) as broker:
        assert broker.stats()["pending"] > 0


def test_a_rolled_back_segment_id_never_truncates_a_live_segment(tmp_path):
    seeded = seed(tmp_path, "vlog", n=40)
    with Broker.open(tmp_path) as broker:
        broker.timer.flush()
    before = {p.name: p.read_bytes() for p in (timer_dir(tmp_path) / "vlog").glob("*.vlog")}
    from rocksdict import Options, Rdict
    families = {n: Options(raw_mode=True) for n in Rdict.list_cf(str(timer_dir(tmp_path)))
                if n != "default"}
    db = Rdict(str(timer_dir(tmp_path)), Options(raw_mode=True), column_families=families)
    meta = db.get_column_family("meta")
    meta[b"vlog.next_id"] = (1).to_bytes(8, "big")
    del meta
    db.close()
    with Broker.open(tmp_path) as broker:  # sends land in new segments
        from rocks_timer import Message
        for i in range(5):
            broker.send(Message("other", bytes(400)), delay_ms=2 * HOUR - i)  # another class
    for name, data in before.items():
        assert (timer_dir(tmp_path) / "vlog" / name).read_bytes()[:len(data)] == data
    holds(seeded, deliver_all(tmp_path, "vlog"))


# -- the disk refusing (root on a small tmpfs) -------------------------------------------------
@pytest.fixture
def small_fs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs (ENOSPC rows)")
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(mount: Path) -> None:
    fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, bytes(64 << 10))
    except OSError:
        pass  # full
    finally:
        os.close(fd)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_full_disk_is_not_damage(small_fs, layout):
    data = small_fs / "data"
    seeded = seed(data, layout, n=60, flush_at=30)
    (timer_dir(data) / "CURRENT").unlink()  # damaged: repair must copy beside
    _fill(small_fs)
    code, report = repair(data)
    assert code == 1 and "not damage" in report.get("error", ""), report
    assert not (data / "timer-rocksdb.rebuild").exists()
    assert not list(data.glob("timer-rocksdb.before-repair-*"))
    (small_fs / "filler").unlink()
    code, report = repair(data)
    assert code == 0 and report["lost"] == [], report
    holds(seeded, deliver_all(data, layout))


@pytest.mark.parametrize("cut", ["reschedule", "cancel"])
def test_a_removal_cut_short_by_a_crash_is_never_half_rebuilt(tmp_path, cut):
    """A reschedule appends the new record (here in a new segment) and the old one's removal
    record, then writes its index batch; a crash before the batch leaves both on disk, never
    indexed. The next open voids them (kept, not cut) and a rebuild restores the message once,
    at its old time."""
    from tests.support.rocks_support import rec
    from rocks_timer.timer.rocksdb import RocksTimerStore
    path = timer_dir(tmp_path)
    config = BrokerConfig(rocksdb_layout="vlog")
    with RocksTimerStore.open(path, config) as store:
        [scheduled] = store.schedule([rec(1, 10_000, body=bytes(500))], 0)

        def crash(batch):
            raise KeyboardInterrupt("the process dies before its index batch")
        store.db.write = crash  # the crash point, in the test only
        with pytest.raises(KeyboardInterrupt):
            if cut == "reschedule":
                store.reschedule([scheduled.handle], 90_000_000, 0)
            else:
                store.cancel(scheduled.handle, 0)
        del store.db.write
    for opens in range(2):  # the open voids the tail; a second open finds nothing to void
        with RocksTimerStore.open(path, config) as store:
            assert store.check()["problems"] == [] and store.pending_count() == 1
    report = RocksTimerStore.repair(path, config, rebuild=True).as_dict()
    assert report["ok"] and report["recovered"] == 1, report
    with RocksTimerStore.open(path, config) as store:
        [due] = store.claim_due(20_000, 10, 1 << 30)
        assert due.key.due_ms == 10_000


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_full_disk_at_open_is_not_called_damage(small_fs, layout):
    """Issue 30: a full disk at open was reported as "damaged, run `rtimer repair`"."""
    from rocks_timer import StoreIOError
    data = small_fs / "data"
    seeded = seed(data, layout, n=60)
    _fill(small_fs)
    done = rtimer(data, "stats")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "not damage" in done.stderr and "is damaged" not in done.stderr, done.stderr
    with pytest.raises((StoreIOError, OSError)) as refused:
        Broker.open(data, BrokerConfig(rocksdb_layout=layout)).close()
    assert "is damaged" not in str(refused.value)
    (small_fs / "filler").unlink()
    holds(seeded, deliver_all(data, layout))


def test_the_removal_and_void_record_sizes():
    from rocks_timer.timer.rocksdb.vlog import segments as S
    assert S.VOID_SIZE == 28 and len(S.frame_void(5, 9)) == S.VOID_SIZE
    assert S.REMOVAL_SIZE == 12 and len(S.frame_removal([1, 2, 3])) == S.REMOVAL_SIZE + 12
    key, value, _ = S.parse(S.frame_removal([7, 1 << 31]), 0, "t")
    assert S.removal_offsets(key, value) == [7, 1 << 31] and S.void_range(key, value) is None
    key, value, _ = S.parse(S.frame_void(5, 9), 0, "t")
    assert S.void_range(key, value) == (5, 9) and S.removal_offsets(key, value) is None


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_permission_error_is_not_repaired(tmp_path, layout):
    """EACCES/EPERM where the repair must write: reported as the disk refusing, nothing changed
    (root: the immutable attribute, which even root cannot write through; others: mode 0500)."""
    seeded = seed(tmp_path, layout, n=40, flush_at=20)
    (timer_dir(tmp_path) / "CURRENT").unlink()
    before = sorted(p.name for p in tmp_path.iterdir())
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "+i", str(tmp_path)], capture_output=True)
        if done.returncode != 0:
            if os.environ.get("CI") == "true":
                pytest.fail(f"chattr +i failed: {done.stderr!r}")
            pytest.skip("running as root on a file system without chattr +i")
        undo = ["chattr", "-i", str(tmp_path)]
    else:
        tmp_path.chmod(0o500)
        undo = ["chmod", "700", str(tmp_path)]
    try:
        code, report = repair(tmp_path)
    finally:
        subprocess.run(undo, check=True)
    assert code == 1 and "not damage" in report.get("error", ""), report
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    code, report = repair(tmp_path)
    assert code == 0 and report["lost"] == [], report
    holds(seeded, deliver_all(tmp_path, layout))


def test_the_index_and_meta_both_gone_rebuild_from_the_segments_alone(tmp_path):
    """Every RocksDB file of a vlog store removed: the value segments, their removal and void
    records and the delivery cursor kept beside them (vlog/cursor) rebuild exactly what was
    pending: the count is checked before any reconciliation with the CommitLog runs."""
    seeded = seed(tmp_path, "vlog")
    with Broker.open(tmp_path, BrokerConfig(rocksdb_layout="vlog")) as broker:
        pending = broker.stats()["pending"]
    for entry in timer_dir(tmp_path).iterdir():
        if entry.is_file():
            entry.unlink()
    with pytest.raises(CorruptRecordError, match="no RocksDB index"):
        Broker.open(tmp_path)
    code, report = repair(tmp_path)
    assert code == 0 and report["lost"] == [] and report["recovered"] == pending, report
    holds(seeded, deliver_all(tmp_path, "vlog"))
