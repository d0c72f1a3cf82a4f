"""ScheduleMessageService in sync mode over a real MessageStore (behaviours 8-18, 32)."""
from __future__ import annotations

import time

import pytest

from legacy_levels.level import TRANS_HALF_TOPIC
from legacy_levels.offsets import DelayOffsetFile, decode_offsets
from legacy_levels.service import ScheduleMessageService
from tests.support.levels_support import T0_MS, FailingStore, open_store, park, pull_all
from rocks_timer.clock import ManualClock
from rocks_timer.message import DELAY, REAL_QID, REAL_TOPIC, SCHEDULE_TOPIC, UNIQ_KEY


@pytest.fixture
def env(tmp_path):
    clock = ManualClock(T0_MS)
    store, cfg = open_store(tmp_path, clock, message_delay_level="1s 5s 10s")
    service = ScheduleMessageService(tmp_path, store, cfg, clock)
    service.load()
    yield tmp_path, clock, store, cfg, service
    service.close()
    store.close()


def test_parked_entry_tags_code_is_deliver_time(env):
    _, clock, store, _, _ = env
    result = park(store, 2, "orders", queue_id=3)
    entry = store.consume_queue(SCHEDULE_TOPIC, 1).entries(0, 1)[0]
    assert entry.tags_code == result.store_ms + 5000
    parked = store.get_message(entry.commitlog_offset, entry.size)
    assert parked.properties[REAL_TOPIC] == "orders" and parked.properties[REAL_QID] == "3"


def test_never_early_and_delivered_when_due(env):
    _, clock, store, _, service = env
    park(store, 2, "orders", b"hello")
    clock.advance(4_999)
    assert service.tick() == 0
    assert pull_all(store, "orders") == []
    clock.advance(1)
    assert service.tick() == 1
    [delivered] = pull_all(store, "orders")
    assert delivered.body == b"hello"
    assert service.tick() == 0  # not delivered twice, not re-scheduled


def test_copy_keeps_fields_and_loses_schedule_properties(env):
    _, clock, store, _, service = env
    sent = park(store, 1, "orders", b"body", queue_id=2, tags="TagA", keys=("k1", "k2"), flag=7,
                born_ms=T0_MS - 123, reconsume_times=4,
                props={"custom": "v", "TIMER_DELIVER_MS": "5"})
    clock.advance(1_000)
    assert service.tick() == 1
    [copy] = store.pull("orders", 2, 0, 10)
    original = store.get_message(sent.commitlog_offset)
    assert (copy.body, copy.tags, copy.keys, copy.flag) == (b"body", "TagA", ("k1", "k2"), 7)
    assert copy.msg_id == original.msg_id == copy.properties[UNIQ_KEY]
    assert copy.born_ms == T0_MS - 123 and copy.reconsume_times == 4
    assert copy.properties["custom"] == "v"
    assert copy.commitlog_offset != sent.commitlog_offset
    assert copy.queue_id == 2
    assert DELAY not in copy.properties
    assert not [n for n in copy.properties if n.startswith("TIMER_")]
    # decision: REAL_TOPIC / REAL_QID stay on the copy, as 4.x consumers see them
    assert copy.properties[REAL_TOPIC] == "orders" and copy.properties[REAL_QID] == "2"


def test_offset_counts_deliveries_and_stops_at_undue_head(env):
    _, clock, store, _, service = env
    for i in range(5):
        park(store, 1, "a", str(i).encode())
    clock.advance(500)
    for i in range(3):
        park(store, 1, "a", str(i + 5).encode())
    clock.advance(500)
    assert service.tick() == 5
    assert service.offset(1) == 5  # k deliveries -> offset k
    assert service.tick() == 0
    assert service.offset(1) == 5  # the head not due: offset = head's CQ offset
    clock.advance(500)
    assert service.tick() == 3 and service.offset(1) == 8
    assert [m.body for m in pull_all(store, "a")] == [str(i).encode() for i in range(8)]


def test_undue_head_blocks_only_its_level(env):
    _, clock, store, _, service = env
    park(store, 3, "slow")          # 10 s
    clock.advance(6_000)
    park(store, 3, "slow")          # behind the head, blocked by it
    park(store, 2, "fast")          # 5 s
    park(store, 1, "fastest")       # 1 s
    clock.advance(5_000)
    assert service.tick() == 3      # slow head (due at +10 s), fast, fastest
    assert len(pull_all(store, "slow")) == 1
    assert service.offset(3) == 1
    clock.advance(5_000)
    assert service.tick() == 1
    assert len(pull_all(store, "slow")) == 2


def test_clock_jump_back_delivers_at_once(env):
    _, clock, store, _, service = env
    park(store, 2, "orders")        # due at T0 + 5 s
    clock.set(T0_MS - 3_600_000)    # the clock stepped back an hour
    assert service.tick() == 1      # due time > now + delay(level): deliver now
    assert len(pull_all(store, "orders")) == 1


def test_half_topic_is_dropped_and_offset_moves(env):
    _, clock, store, _, service = env
    park(store, 1, TRANS_HALF_TOPIC)
    park(store, 1, "orders")
    clock.advance(1_000)
    assert service.tick() == 1
    assert service.offset(1) == 2
    assert service.stats()["dropped_half"] == 1
    assert store.consume_queue(TRANS_HALF_TOPIC, 0) is None


def test_unreadable_record_is_skipped_not_blocking(env):
    root, clock, store, _, service = env
    park(store, 1, "orders", b"first")
    bad = park(store, 1, "orders", b"second-body-to-corrupt")
    park(store, 1, "orders", b"third")
    store.flush()
    segment = sorted((root / "commitlog").iterdir())[0]
    with open(segment, "r+b") as handle:  # flip body bytes: the record's CRC no longer matches
        handle.seek(bad.commitlog_offset + bad.size - 60)
        handle.write(b"\xff\xfe\xfd\xfc")
    clock.advance(1_000)
    assert service.tick() == 2
    assert [m.body for m in pull_all(store, "orders")] == [b"first", b"third"]
    assert service.offset(1) == 3
    assert service.stats()["skipped"] == 1


def test_record_without_real_topic_is_skipped(env):
    _, clock, store, _, service = env
    from rocks_timer.message import Message
    store.put_message(Message(topic=SCHEDULE_TOPIC, queue_id=0, properties={DELAY: "1"}))
    park(store, 1, "orders")
    clock.advance(1_000)
    assert service.tick() == 1
    assert service.stats()["skipped"] == 1 and service.offset(1) == 2


def test_failed_sync_put_retries_same_message_after_100ms(tmp_path):
    clock = ManualClock(T0_MS)
    real, cfg = open_store(tmp_path, clock, message_delay_level="1s 5s")
    store = FailingStore(real, fail_puts=3)
    service = ScheduleMessageService(tmp_path, store, cfg, clock)
    try:
        for i in range(5):
            park(real, 1, "orders", str(i).encode())
        park(real, 2, "other", b"o")
        clock.advance(5_000)
        assert service.tick() == 0          # both level heads failed (puts 1 and 2)
        assert store.attempts == 2 and service.offset(1) == 0 and service.offset(2) == 0
        assert service.tick() == 0          # same instant: no retry yet
        clock.advance(99)
        assert service.tick() == 0 and store.attempts == 2
        clock.advance(1)
        assert service.tick() == 1          # level 1 failed again (put 3), level 2 delivered
        assert store.attempts == 4 and service.offset(1) == 0
        clock.advance(100)
        assert service.tick() == 5          # recovered: everything, in order
        assert [m.body for m in pull_all(real, "orders")] == [str(i).encode() for i in range(5)]
        assert service.offset(1) == 5 and service.offset(2) == 1
        stats = service.stats()
        assert stats["put_failures"] == 3 and stats["resends"] == 3 and stats["delivered"] == 6
    finally:
        service.close()
        real.close()


def test_stats_have_an_offset_key_for_every_level(env):
    _, clock, store, _, service = env
    park(store, 2, "x")
    park(store, 2, "x")
    clock.advance(5_000)
    service.tick()
    stats = service.stats()
    assert stats["scheduleMessageOffset_1"] == "0,0"
    assert stats["scheduleMessageOffset_2"] == "2,2"
    assert stats["scheduleMessageOffset_3"] == "0,0"
    assert stats["delivered"] == 2 and stats["pending"] == {1: 0, 2: 0, 3: 0}


def test_offsets_persist_every_interval_and_on_stop(env):
    root, clock, store, cfg, service = env
    file = DelayOffsetFile(root)
    park(store, 1, "x")
    clock.advance(1_000)
    service.tick()
    assert not file.path.exists()                 # first persist after 10 s
    clock.advance(cfg.flush_delay_offset_interval_ms)
    park(store, 1, "x")
    service.tick()
    assert decode_offsets(file.path.read_text())[0][1] == 1  # 10 s passed: persisted
    clock.advance(1_000)
    assert service.tick() == 1
    assert decode_offsets(file.path.read_text())[0][1] == 1  # 1 s later: not yet
    service.stop()
    assert decode_offsets(file.path.read_text())[0][1] == 2  # stop persists


def test_restart_resumes_from_persisted_offsets(tmp_path):
    clock = ManualClock(T0_MS)
    store, cfg = open_store(tmp_path, clock, message_delay_level="1s")
    service = ScheduleMessageService(tmp_path, store, cfg, clock)
    for i in range(3):
        park(store, 1, "r", str(i).encode())
    clock.advance(1_000)
    assert service.tick() == 3
    service.close()
    park(store, 1, "r", b"3")
    store.close()
    store, cfg = open_store(tmp_path, clock, message_delay_level="1s")
    service = ScheduleMessageService(tmp_path, store, cfg, clock)
    service.load()
    assert service.offset(1) == 3
    clock.advance(1_000)
    assert service.tick() == 1
    assert [m.body for m in pull_all(store, "r")] == [b"0", b"1", b"2", b"3"]
    service.close()
    store.close()


def test_thread_pool_mode_delivers_and_persists_on_stop(tmp_path):
    clock = ManualClock(T0_MS)
    store, cfg = open_store(tmp_path, clock, message_delay_level="1s 5s 10s")
    service = ScheduleMessageService(tmp_path, store, cfg, clock)
    try:
        for level in (1, 2, 3):
            for i in range(50):
                park(store, level, f"t{level}", str(i).encode())
        service.start()
        time.sleep(0.15)
        assert service.stats()["delivered"] == 0   # nothing due yet
        clock.advance(10_000)
        deadline = time.monotonic() + 10
        while service.stats()["delivered"] < 150 and time.monotonic() < deadline:
            time.sleep(0.02)
        service.stop()
        assert not service.running
        for level in (1, 2, 3):
            bodies = [m.body for m in pull_all(store, f"t{level}")]
            assert bodies == [str(i).encode() for i in range(50)]
        assert decode_offsets(DelayOffsetFile(tmp_path).path.read_text())[0] == {1: 50, 2: 50, 3: 50}
    finally:
        service.close()
        store.close()


def test_retention_moves_the_level_to_the_queue_head_and_skips_expired_records(tmp_path):
    """Expired CommitLog segments: offset < cq.min resets to cq.min; a CQ entry whose record is
    gone (KeyError) is skipped without blocking the level."""
    clock = ManualClock(T0_MS)
    store, cfg = open_store(tmp_path, clock, message_delay_level="1s", max_message_size=1024,
                            commitlog_segment_size=33 * 1024 + 1024,
                            consume_queue_entries_per_file=7, file_reserved_hours=1)
    service = ScheduleMessageService(tmp_path, store, cfg, clock)
    try:
        service.load()
        for i in range(200):
            park(store, 1, "old", bytes(500))
        clock.advance(2 * 3_600_000)
        park(store, 1, "new", b"fresh")
        assert store.delete_expired(clock.now_ms()) >= 1
        cq = store.consume_queue(SCHEDULE_TOPIC, 0)
        assert cq.min_offset > 0
        readable = 0
        for entry in cq.entries(cq.min_offset, 1_000):
            try:
                store.get_message(entry.commitlog_offset, entry.size)
                readable += 1
            except KeyError:
                pass
        gone = cq.max_offset - cq.min_offset - readable
        assert gone > 0 and readable > 1
        clock.advance(1_000)
        assert service.tick() == readable
        assert service.offset(1) == cq.max_offset
        assert service.stats()["skipped"] == gone
        assert [m.body for m in pull_all(store, "new")] == [b"fresh"]
    finally:
        service.close()
        store.close()
