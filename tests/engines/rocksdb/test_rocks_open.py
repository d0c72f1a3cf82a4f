"""RocksTimerStore: opening, on-disk format, profiles, locks and kill -9."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tests.support.rocks_support import BIG, ROOT, ids, layout, open_store, rec  # noqa: F401 - fixtures

from rocks_timer.config import BrokerConfig
from rocks_timer.errors import ConfigError, StoreClosedError, StoreLockedError
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb.profiles import PROFILES, build_options, parse_tickers
from rocks_timer.timer.rocksdb import RocksTimerStore


def test_format_mismatch_is_a_config_error(tmp_path, open_store):
    path = tmp_path / "timer"
    open_store(path=path).close()
    with pytest.raises(ConfigError) as info:
        open_store(BrokerConfig(rocksdb_profile="universal"), path=path)
    assert "'level'" in str(info.value) and "'universal'" in str(info.value)
    # same compaction style, other profile: allowed
    open_store(BrokerConfig(rocksdb_profile="tuned"), path=path).close()
    store = open_store(path=path)
    store.db.meta[K.META_VALUE_CODEC] = b"7"
    store.close()
    with pytest.raises(ConfigError, match="value_codec.*'7'.*'1'"):
        open_store(path=path)


def test_unknown_profile_lists_valid_ones(open_store):
    with pytest.raises(ConfigError) as info:
        open_store(BrokerConfig(rocksdb_profile="nope"))
    for name in PROFILES:
        assert name in str(info.value)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_profile_works(tmp_path, open_store, profile):
    store = open_store(BrokerConfig(rocksdb_profile=profile))
    store.schedule([rec(i, 10 + i, body=os.urandom(300)) for i in range(50)], 0)
    store.flush()
    due = store.claim_due(1000, 100, BIG)
    store.complete(due, 1)
    assert len(due) == 50
    stats = store.stats()
    assert stats.extra["profile"] == profile
    body_bytes = stats.bytes_written["user"] + stats.bytes_written["vlog"]
    assert body_bytes > 50 * 300 and stats.bytes_written["flush"] > 0


def test_parse_tickers_and_fresh_options():
    a, b = build_options("default"), build_options("default")
    assert a is not b
    text = "rocksdb.bytes.written COUNT : 1741\nrocksdb.db.get.micros P50 : 1.0\nx COUNT : 3\n"
    assert parse_tickers(text) == {"rocksdb.bytes.written": 1741}
    assert parse_tickers(None) == {}


def test_reopen_in_the_same_process(tmp_path, open_store):
    path = tmp_path / "timer"
    store = open_store(path=path)
    store.schedule([rec(i, 10 + i) for i in range(3)], 0)
    store.scan(limit=10)
    store.claim_due(10, 1, BIG)  # iterators and handles were used
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreClosedError):
        store.pending_count()
    store = open_store(path=path)
    assert store.pending_count() == 3


def test_second_open_in_process_is_locked(tmp_path, open_store):
    open_store()
    with pytest.raises(StoreLockedError):
        RocksTimerStore.open(tmp_path / "timer", BrokerConfig())


def test_open_from_another_process_is_locked(tmp_path, open_store):
    open_store()
    code = ("import sys; from pathlib import Path\n"
            "from rocks_timer.config import BrokerConfig\n"
            "from rocks_timer.errors import StoreLockedError\n"
            "from rocks_timer.timer.rocksdb import RocksTimerStore\n"
            "try:\n    RocksTimerStore.open(Path(sys.argv[1]), BrokerConfig())\n"
            "except StoreLockedError as exc:\n    print('LOCKED', exc)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "timer")], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("LOCKED"), out.stderr


KILL_CHILD = """
import sys, time
from pathlib import Path
from rocks_timer.config import BrokerConfig
from rocks_timer.message import Message
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.store import TimerRecord
store = RocksTimerStore.open(Path(sys.argv[1]), BrokerConfig())
got = store.schedule([TimerRecord(100 + i, Message(topic="orders", body=b"b" * i,
                                                  msg_id=f"{i:032X}")) for i in range(100)], 0)
for s in got[90:]:
    assert store.cancel(s.handle, 0)
store.complete(store.claim_due(119, 100, 1 << 30), 5)
store.claim_due(200, 5, 1 << 30)  # in flight when killed: must come back
print("READY", flush=True)
time.sleep(60)
"""


def test_state_survives_kill_9(tmp_path, open_store):
    path = tmp_path / "timer"
    child = subprocess.Popen([sys.executable, "-c", KILL_CHILD, str(path)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "READY", child.stderr.read()
    finally:
        os.kill(child.pid, 9)
        child.wait(timeout=30)
    store = open_store(path=path)
    assert store.pending_count() == 70 and store.reconcile_from() == 5
    again = store.claim_due(10_000, 1000, BIG)
    assert ids(again) == [f"{i:032X}" for i in range(20, 90)]
    assert store.check()["problems"] == []


def test_a_store_without_current_is_refused_then_repaired(tmp_path):
    """Never a new empty database over acknowledged data (issue: 300 pending destroyed)."""
    from rocks_timer.errors import CorruptRecordError
    path = tmp_path / "timer"
    with RocksTimerStore.open(path, BrokerConfig()) as store:
        store.schedule([rec(i, 10_000 + i, body=os.urandom(600)) for i in range(300)], 0)
        store.flush()
    (path / "CURRENT").unlink()
    for _ in range(2):  # refused every time: the first refusal leaves nothing behind
        with pytest.raises(CorruptRecordError, match="no CURRENT file.*rtimer repair"):
            RocksTimerStore.open(path, BrokerConfig())
    assert not (path / "CURRENT").exists()
    report = RocksTimerStore.repair(path, BrokerConfig()).as_dict()
    assert report["ok"] and report["problems"] == [] and report["live_keys"] == 300
    assert report["lost"] == [] and report["kept_as"]
    with RocksTimerStore.open(path, BrokerConfig()) as store:
        assert store.pending_count() == 300
        assert len(store.claim_due(20_000, 1000, BIG)) == 300


def test_value_segments_without_their_index_are_refused(tmp_path):
    from rocks_timer.errors import CorruptRecordError
    path = tmp_path / "timer"
    with RocksTimerStore.open(path, BrokerConfig(rocksdb_layout="vlog")) as store:
        store.schedule([rec(1, 10_000, body=os.urandom(600))], 0)
    for entry in path.iterdir():
        if entry.is_file():
            entry.unlink()
    with pytest.raises(CorruptRecordError, match="no RocksDB index"):
        RocksTimerStore.open(path, BrokerConfig())


def test_a_corrupt_sst_is_an_error_not_a_short_scan(tmp_path):
    """Flipped bytes in an SST: listing and claiming raise an error naming the damage instead
    of returning a short page and stopping delivery quietly."""
    from rocks_timer.errors import CorruptRecordError
    path = tmp_path / "timer"
    config = BrokerConfig(rocksdb_layout="inline")
    with RocksTimerStore.open(path, config) as store:
        store.schedule([rec(i, 10_000 + i, body=os.urandom(600)) for i in range(300)], 0)
        store.flush()
    [sst] = sorted(path.glob("*.sst"), key=lambda p: p.stat().st_size)[-1:]
    data = bytearray(sst.read_bytes())
    for at in range(len(data) // 3, len(data) // 3 + 64):
        data[at] ^= 0xFF
    sst.write_bytes(bytes(data))
    with RocksTimerStore.open(path, config) as store:
        assert store.pending_count() == 300  # the counter still says what was acknowledged
        with pytest.raises(CorruptRecordError, match="RocksDB read failed.*(Corruption|checksum)"):
            store.scan(limit=1000)
        with pytest.raises(CorruptRecordError, match="RocksDB read failed"):
            while store.claim_due(20_000, 100, BIG):
                pass
