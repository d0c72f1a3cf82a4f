"""The ``vlog`` layout of the RocksDB engine (ARCHITECTURE §8): value segments, liveness, release,
one-shot relocation, and containment of damaged segment bytes. Real RocksDB, real files."""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from rocks_timer import BrokerConfig
from rocks_timer.errors import CorruptRecordError
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.vlog import segments as S
from rocks_timer.timer.rocksdb.vlog.liveness import DAY_MS, LONG, delay_class
from tests.support.rocks_support import BIG, T0, msg, rec  # noqa: F401

SMALL_SEGMENTS = BrokerConfig(vlog_segment_bytes=64 << 10, rocksdb_layout="vlog",
                              vlog_inline_max_bytes=128)  # small bodies stay in the index


def body(i: int, size: int = 1000) -> bytes:
    """Seeded incompressible bytes (lz4 would shrink a pattern below the inline threshold)."""
    return f"{i:08d}".encode() + random.Random(i).randbytes(size - 8)


def open_vlog(path: Path, **changes) -> RocksTimerStore:
    return RocksTimerStore.open(path, SMALL_SEGMENTS.replace(**changes))


def deliver_all(store: RocksTimerStore, now_ms: int) -> list:
    out = []
    while True:
        due = store.claim_due(now_ms, 500, BIG)
        if not due:
            return out
        store.complete(due, None)
        out.extend(due)


def segment_files(path: Path) -> list[Path]:
    return sorted((path / "vlog").glob("*.vlog"))


@pytest.fixture
def path(tmp_path):
    return tmp_path / "timer"


def test_a_new_store_is_vlog_and_an_inline_store_stays_inline(tmp_path):
    with RocksTimerStore.open(tmp_path / "a", BrokerConfig()) as store:
        assert store.layout == "vlog" and store.stats().extra["layout"] == "vlog"
    with RocksTimerStore.open(tmp_path / "b", BrokerConfig(rocksdb_layout="inline")) as store:
        store.schedule([rec(1, T0 + 10, body=body(1))], T0)
    with RocksTimerStore.open(tmp_path / "b", BrokerConfig()) as store:  # default says vlog
        assert store.layout == "inline"
        [got] = deliver_all(store, T0 + 10)
        assert got.message.body == body(1)


def test_large_bodies_go_to_segments_small_ones_stay_in_the_index(path):
    with open_vlog(path) as store:
        store.schedule([rec(1, T0 + 5, body=b"tiny"), rec(2, T0 + 5, body=body(2))], T0)
        values = [bytes(v) for v in store.db.timer.values()]
        assert sorted(I.is_pointer(v) for v in values) == [False, True]
        [entry] = [e for e in store.scan() if e.msg_id == f"{2:032X}"]
        assert (entry.size, entry.queue_id, entry.tags) == (1000, 2, "T2")  # from the pointer
        got = deliver_all(store, T0 + 5)
        assert sorted(r.message.body for r in got) == sorted([b"tiny", body(2)])
        assert store.check()["problems"] == []


def test_segments_roll_and_are_deleted_once_every_record_is_gone(path):
    with open_vlog(path) as store:
        for start in range(0, 400, 50):
            store.schedule([rec(i, T0 + 1000 + i, body=body(i)) for i in range(start, start + 50)],
                           T0)
        assert len(segment_files(path)) >= 6
        got = deliver_all(store, T0 + 2000)
        assert sorted(int(r.message.body[:8]) for r in got) == list(range(400))
        store.maintain(T0 + 2000)
        store.wait_for_maintenance()
        assert segment_files(path) == []  # the open one was sealed by age (1 s), then released
        figures = store.stats().extra
        assert figures["vlog_released_segments"] >= 5 and figures["vlog_live_bytes"] == 0
        assert store.check()["problems"] == []


def test_bodies_are_grouped_by_delay_class(path):
    with open_vlog(path) as store:
        store.schedule([rec(1, T0 + 2_000, body=body(1)), rec(2, T0 + 3 * DAY_MS, body=body(2)),
                        rec(3, T0 + 2_100, body=body(3))], T0)
        classes = {seg.day: seg.live_count for seg in store.vlog.segments.values()}
        assert classes == {delay_class(2_000): 2, delay_class(3 * DAY_MS): 1}
        assert delay_class(2_000) == delay_class(2_100) != delay_class(3 * DAY_MS)


def test_sparse_segments_are_relocated_once_into_due_day_segments(path):
    with open_vlog(path, vlog_reclaim_live_pct=50) as store:
        # 300 bodies due in 3 days, 4 of every 5 cancelled: the sealed segments are 20% live
        handles = []
        for start in range(0, 300, 50):
            handles += [s.handle for s in store.schedule(
                [rec(i, T0 + 3 * DAY_MS + i, body=body(i)) for i in range(start, start + 50)], T0)]
        for i, handle in enumerate(handles):
            if i % 5:
                assert store.cancel(handle, T0) is True
        store.maintain(T0 + DAY_MS)  # seals the open segment (open longer than its class's quarter)
        store.wait_for_maintenance()
        report = store.relocate(T0 + DAY_MS)
        moved = store.stats().extra["vlog_relocated_count"]
        assert moved == 60 and report["released_bytes"] >= 0
        assert {seg.kind for seg in store.vlog.segments.values() if seg.live_count} == {LONG}
        assert store.check()["problems"] == []
        assert store.relocate(T0 + DAY_MS)["relocated_records"] == 0  # long segments stay
        # a relocated record can still be cancelled, the rest are delivered intact
        assert store.cancel(handles[5], T0 + DAY_MS) is True
        later = deliver_all(store, T0 + 5 * DAY_MS)
        assert sorted(int(r.message.body[:8]) for r in later) == [
            i for i in range(0, 300, 5) if i != 5]
        assert all(r.message.body == body(int(r.message.body[:8])) for r in later)
        assert store.check()["problems"] == []


def test_a_segment_that_empties_soon_is_not_relocated(path):
    with open_vlog(path, vlog_reclaim_live_pct=90, vlog_reclaim_min_pinned_sec=3600) as store:
        due = T0 + 1_200_000  # 20 minutes: one class
        handles = [s.handle for s in store.schedule(
            [rec(i, due + i, body=body(i)) for i in range(60)], T0)]
        for handle in handles[:50]:
            store.cancel(handle, T0)
        store.maintain(T0 + 600_000)  # sealed by age; 17% live, but empty within the hour
        assert store.relocate(T0 + 600_000)["relocated_records"] == 0
        assert len(deliver_all(store, due + 100)) == 10
        assert store.relocate(due + 100)["released_bytes"] > 0


def test_a_retried_send_keeps_one_live_copy(path):
    with open_vlog(path) as store:
        store.schedule([rec(1, T0 + 50, body=body(1))], T0)
        store.schedule([rec(1, T0 + 50, body=body(1)), rec(1, T0 + 50, body=body(1))], T0)
        assert store.pending_count() == 1
        assert sum(s.live_count for s in store.vlog.segments.values()) == 1
        assert store.check()["problems"] == []


def test_a_retry_of_a_message_being_delivered_keeps_the_counts_exact(path):
    with open_vlog(path) as store:
        store.schedule([rec(1, T0 + 50, body=body(1))], T0)
        [claimed] = store.claim_due(T0 + 50, 10, BIG)
        # the producer's retry lands behind the cursor: its key is clamped to a new due time
        # (ARCHITECTURE §4), so it is a new pending copy, counted once
        store.schedule([rec(1, T0 + 50, body=body(1))], T0)
        store.complete([claimed], None)
        assert store.pending_count() == 1
        assert sum(s.live_count for s in store.vlog.segments.values()) == 1
        assert store.check()["problems"] == []


def test_a_store_reopened_soon_goes_on_appending_to_its_segment(path):
    for i in range(3):  # three processes in a row, as three CLI sends would be
        with open_vlog(path) as store:
            store.schedule([rec(i, T0 + 3_600_000 + i, body=body(i))], T0 + i)
    assert len(segment_files(path)) == 1
    with open_vlog(path) as store:  # past the class's open time: a new segment
        store.schedule([rec(9, T0 + 3 * DAY_MS, body=body(9))], T0 + DAY_MS)
        assert len(segment_files(path)) == 2
        assert sorted(int(r.message.body[:8]) for r in deliver_all(store, T0 + 4 * DAY_MS)) == [
            0, 1, 2, 9]
        assert store.check()["problems"] == []


def test_an_unindexed_tail_is_kept_on_open(path):
    """Bytes past the index's end are never cut (issue 30): appends go on after them."""
    with open_vlog(path) as store:
        store.schedule([rec(i, T0 + 10, body=body(i)) for i in range(5)], T0)
    [seg] = segment_files(path)
    size = seg.stat().st_size
    with open(seg, "ab") as fh:  # a crash after the append, before the index batch
        fh.write(S.frame(b"k" * 30, b"v" * 500)[:300])
    with open_vlog(path) as store:
        assert seg.stat().st_size > size + 300  # the tail, then its void record
        assert len(deliver_all(store, T0 + 10)) == 5
        assert store.check()["problems"] == []


def test_a_flipped_byte_sets_that_record_aside_and_delivers_the_rest(path):
    with open_vlog(path) as store:
        store.schedule([rec(i, T0 + 10 + i, body=body(i)) for i in range(10)], T0)
        pointer = I.pointer_or_none(bytes(store.db.timer.get(
            next(k for k in store.db.timer.keys() if k.endswith(bytes.fromhex(f"{4:032X}"))))))
    [seg] = segment_files(path)
    with open(seg, "r+b") as fh:
        fh.seek(pointer.offset + pointer.length - 7)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with open_vlog(path) as store:
        problems = store.check()["problems"]
        assert len(problems) == 1 and "CRC" in problems[0]
        got = deliver_all(store, T0 + 100)
        assert sorted(int(r.message.body[:8]) for r in got) == [0, 1, 2, 3, 5, 6, 7, 8, 9]
        extra = store.stats().extra
        assert extra["corrupt"] == 1 and extra["vlog_lost"] == 1
        assert len(list(store.db.corrupt.keys())) == 1  # kept, with its pointer, for inspection
        assert store.check()["problems"] == []


def test_a_segment_cut_short_by_a_power_cut_is_reported_not_a_crash(path):
    with open_vlog(path) as store:
        store.schedule([rec(i, T0 + 10 + i, body=body(i)) for i in range(10)], T0)
    [seg] = segment_files(path)
    os.truncate(seg, seg.stat().st_size - 1500)  # the last record and a half are gone
    with open_vlog(path) as store:
        assert store.stats().extra["vlog_short_segments"] == [1]
        got = deliver_all(store, T0 + 100)
        assert sorted(int(r.message.body[:8]) for r in got) == list(range(8))
        assert store.stats().extra["vlog_lost"] == 2


def test_a_missing_segment_is_reported_and_its_records_set_aside(path):
    with open_vlog(path) as store:
        store.schedule([rec(i, T0 + 10, body=body(i)) for i in range(3)], T0)
        store.schedule([rec(9, T0 + 10, body=b"small")], T0)
    for seg in segment_files(path):
        seg.unlink()
    with open_vlog(path) as store:
        assert store.stats().extra["vlog_missing_segments"] == [1]
        got = deliver_all(store, T0 + 10)
        assert [r.message.body for r in got] == [b"small"]
        assert store.stats().extra["corrupt"] == 3


def test_relocation_walks_past_a_damaged_record(tmp_path):
    seg = S.SegmentFile(tmp_path, 1)
    records = [S.frame(f"key{i}".encode(), body(i, 300)) for i in range(5)]
    seg.append(b"".join(records))
    damaged_at = len(records[0]) + len(records[1]) + 3  # a length byte of record 2
    with open(seg.path, "r+b") as fh:
        fh.seek(damaged_at)
        fh.write(b"\xff")
    damaged: list = []
    keys = [key for _, key, _, _ in S.iter_records(seg, seg.size, damaged)]
    assert keys == [b"key0", b"key1", b"key3", b"key4"]
    assert len(damaged) == 1 and damaged[0][0] == len(records[0]) + len(records[1])
    seg.close()


def test_record_framing_round_trips_and_detects_damage():
    record = S.frame(b"key", b"value")
    assert len(record) == S.SIZE + 8
    assert S.parse(record, 0, "t")[:2] == (b"key", b"value")
    for at in range(len(record)):
        bad = bytearray(record)
        bad[at] ^= 0x01
        with pytest.raises(CorruptRecordError):
            S.parse(bytes(bad), 0, "t")


def test_vlog_settings_load_from_broker_conf_and_are_checked(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("rocksdbLayout=inline\nvlogReclaimLivePct=40\nvlogSegmentBytes=1048576\n")
    config = BrokerConfig.load(conf)
    assert (config.rocksdb_layout, config.vlog_reclaim_live_pct) == ("inline", 40)
    with pytest.raises(Exception, match="vlog_reclaim_live_pct"):
        BrokerConfig(vlog_reclaim_live_pct=101).validate()
    with pytest.raises(Exception, match="rocksdb_layout"):
        BrokerConfig(rocksdb_layout="blobby").validate()


def test_value_log_counters_survive_a_reopen_although_only_changed_ones_are_written(path):
    with open_vlog(path, vlog_reclaim_live_pct=50) as store:
        handles = [s.handle for s in store.schedule(
            [rec(i, T0 + 3 * DAY_MS + i, body=body(i)) for i in range(120)], T0)]
        for i, handle in enumerate(handles):
            if i % 4:
                store.cancel(handle, T0)
        store.maintain(T0 + DAY_MS)
        store.wait_for_maintenance()
        store.relocate(T0 + DAY_MS)
        store.schedule([rec(500, T0 + DAY_MS + 5, body=body(500))], T0 + DAY_MS)
        deliver_all(store, T0 + DAY_MS + 5)
        before = {k: v for k, v in store.stats().extra.items() if k.startswith("vlog_")}
        next_id = store.vlog.next_id
    with open_vlog(path) as store:
        after = {k: v for k, v in store.stats().extra.items() if k.startswith("vlog_")}
        assert after == before and store.vlog.next_id == next_id
        assert before["vlog_appended_bytes"] > 0 and before["vlog_relocated_count"] > 0


def test_a_release_cut_between_the_unlink_and_the_row_is_finished_on_the_next_open(path):
    """Release deletes a file before its liveness row (never a file without a row, which
    nothing would ever delete): a crash in between leaves an empty row without a file, which
    the next release forgets. The WAL sync and the unlink run without the store lock."""
    with open_vlog(path) as store:
        for start in range(0, 200, 50):  # a segment rolls between batches
            store.schedule([rec(i, T0 + 1000 + i, body=body(i)) for i in range(start, start + 50)],
                           T0)
        deliver_all(store, T0 + 2000)
        store.vlog.seal(T0 + 2000)
        empty = store.vlog.releasable()
        assert len(empty) >= 2
        store.db.flush_wal()
        gone = store.vlog.detach(empty, {})  # nothing else runs: no maintain was called
        store.vlog.unlink(gone)  # ... and the process dies before the rows are deleted
        ids = sorted(seg.id for seg in gone)
    assert segment_files(path) == []
    with open_vlog(path) as store:
        assert sorted(store.vlog.segments) == ids and store.vlog.missing_segments == []
        store.maintain(T0 + 3000)
        store.wait_for_maintenance()
        assert store.vlog.segments == {}
        assert store.stats().extra["vlog_released_segments"] == len(ids)
        assert store.check()["problems"] == []


def test_a_relocation_copy_of_a_record_cancelled_meanwhile_is_never_rebuilt(path):
    """Issue 30: the copy relocation wrote for a record cancelled while it copied is never
    indexed; it gets a removal record, so a rebuild from the segments does not resurrect it
    once the original's segment is gone."""
    with open_vlog(path, vlog_reclaim_live_pct=50) as store:
        handles = []
        for start in range(0, 300, 50):
            handles += [s.handle for s in store.schedule(
                [rec(i, T0 + 3 * DAY_MS + i, body=body(i)) for i in range(start, start + 50)], T0)]
        for i, handle in enumerate(handles):
            if i % 5:
                assert store.cancel(handle, T0) is True
        real = store.vlog.append_long

        def copy_then_cancel(day, records, now_ms):  # a cancel lands while relocation copies
            out = real(day, records, now_ms)
            if not cancelled:
                cancelled.append(store.cancel(handles[0], T0 + DAY_MS))
            return out
        cancelled = []
        store.vlog.append_long = copy_then_cancel
        try:
            store.maintain(T0 + DAY_MS)  # seals the segments and relocates them
            store.wait_for_maintenance()
            store.relocate(T0 + DAY_MS)
        finally:
            del store.vlog.append_long
        assert cancelled == [True] and store.check()["problems"] == []
        pending = store.pending_count()
    report = RocksTimerStore.repair(path, SMALL_SEGMENTS, rebuild=True).as_dict()
    assert report["ok"] and report["recovered"] == pending == 59, (report["notes"], pending)
    with open_vlog(path) as store:
        got = deliver_all(store, T0 + 5 * DAY_MS)
        assert sorted(int(r.message.body[:8]) for r in got) == list(range(5, 300, 5))


def test_liveness_problems_names_a_row_that_disagrees_and_pointers_without_a_row():
    from rocks_timer.timer.rocksdb.vlog.liveness import Segment, liveness_problems
    rows = {1: Segment(1, 0, 0, 0, live_count=2, live_bytes=100, end=100),
            2: Segment(2, 0, 0, 0, live_count=1, live_bytes=50, end=50)}
    seen = {1: (2, 100), 2: (1, 40), 9: (3, 30)}
    assert liveness_problems(rows, seen) == [
        "vlog segment 2: liveness row says 1 records / 50 bytes, the index points at 1 / 40",
        "3 index entries point into vlog segment 9, which has no liveness row"]
    assert liveness_problems(rows, {1: (2, 100), 2: (1, 50)}) == []
