"""The file wheel engine against a real MessageStore under a manual clock (ARCHITECTURE §8)."""
from __future__ import annotations

import pytest
from tests.support.wheel_support import DAY_MS, START_MS, env, make_env  # noqa: F401 - fixtures

from rocks_timer.errors import InvalidHandleError
from rocks_timer.message import (REAL_QID, REAL_TOPIC, TIMER_DEQUEUE_MS, TIMER_ENQUEUE_MS,
                                 TIMER_OUT_MS, TIMER_ROLL_TIMES, WHEEL_TIMER_TOPIC, Message)
from rocks_timer.timer.handles import decode_handle, encode_handle
from rocks_timer.timer.store import TimerRecord, TimerStore
from rocks_timer.timer.wheel.layouts import MAGIC_DELETE, MAGIC_ROLL, UNIT_SIZE


def test_implements_protocol(env):
    assert isinstance(env.wheel, TimerStore)
    assert env.wheel.name == "wheel" and env.wheel.exactly_once is False
    assert env.wheel.reconcile_from() is None and env.wheel.reconcile([], 0) == 0


def test_schedule_writes_the_timer_topic(env):  # behaviour 44
    msg_id, handle = env.send("orders", env.now + 5000, b"hello", color="red")
    cq = env.store.consume_queue(WHEEL_TIMER_TOPIC, 0)
    assert cq.max_offset == 1
    stored = env.store.get_message(cq.get(0).commitlog_offset)
    assert stored.topic == WHEEL_TIMER_TOPIC and stored.queue_id == 0
    assert stored.properties[REAL_TOPIC] == "orders" and stored.properties[REAL_QID] == "0"
    assert stored.properties[TIMER_OUT_MS] == str(env.now + 4900)  # D - p on a multiple of p
    assert stored.properties["color"] == "red" and stored.msg_id == msg_id
    h = decode_handle(handle)
    assert (h.topic, h.due_ms) == ("orders", env.now + 4901)  # TIMER_OUT_MS + 1


def test_never_early_and_on_time(env):  # behaviours 35, 70, 74
    due = {}
    for i in range(200):
        d = env.now + 1000 + i * 37
        msg_id, _ = env.send("T", d)
        due[msg_id] = d
    env.run(env.now + 10_000, 30)
    assert sorted(env.delivered_ids()) == sorted(due)
    for at, msg in env.delivered:
        d = due[msg.msg_id]
        assert at >= d, "delivered early"
        assert at <= -(-d // 100) * 100 + 30 + 100
        assert msg.topic == "T" and msg.queue_id == 0
        assert REAL_TOPIC not in msg.properties and REAL_QID not in msg.properties
        assert int(msg.properties[TIMER_DEQUEUE_MS]) >= int(msg.properties[TIMER_OUT_MS])
        assert int(msg.properties[TIMER_ENQUEUE_MS]) <= int(msg.properties[TIMER_OUT_MS])
    assert len(env.store.pull("T", 0, 0, 1000)) == 200
    assert env.wheel.pending_count() == 0


def test_slot_read_only_after_floor_now_passes(env):  # behaviour 70
    env.send("T", env.now + 1000)  # TIMER_OUT_MS = now + 900
    env.clock.set(START_MS + 999)
    env.step()
    assert env.delivered == []
    env.clock.set(START_MS + 1000)
    env.step()
    assert len(env.delivered) == 1
    assert env.wheel.stats().extra["read_time_ms"] == START_MS + 1000


def test_real_queue_id_is_kept(env):
    msg = Message(topic="Q", body=b"b", queue_id=3)
    env.wheel.schedule([TimerRecord(env.now + 500, msg)], env.now)
    env.run(env.now + 1000, 100)
    assert env.delivered[0][1].queue_id == 3


def test_units_link_backwards_in_one_slot(env):  # behaviour 63
    for _ in range(3):
        env.send("T", env.now + 5000)
    env.wheel.maintain(env.now)
    slot = env.wheel.wheel.get_slot(env.now + 4900)
    units = [env.wheel.timerlog.read_unit(i * UNIT_SIZE) for i in range(3)]
    assert units[0].prev_pos == -1 and units[1].prev_pos == 0 and units[2].prev_pos == 52
    assert (slot.first_pos, slot.last_pos, slot.num) == (0, 104, 3)
    assert units[0].slot_ms == env.now + 4900 and units[0].write_ms == env.now


def test_marker_decrements_num_and_sets_delete(env):  # behaviour 64
    handles = [env.send("T", env.now + 5000)[1] for _ in range(5)]
    env.wheel.maintain(env.now)
    assert env.wheel.wheel.get_num(env.now + 4900) == 5
    assert env.wheel.cancel(handles[0], env.now) is True
    assert env.wheel.wheel.get_num(env.now + 4900) == 4
    assert env.wheel.timerlog.read_unit(5 * UNIT_SIZE).magic & MAGIC_DELETE


def test_cancel_suppresses_only_its_target(env):  # behaviours 71, 73
    ids, handles = zip(*(env.send("T", env.now + 3000) for _ in range(5)))
    assert env.wheel.cancel(handles[0], env.now) is True
    env.run(env.now + 5000, 100)
    assert sorted(env.delivered_ids()) == sorted(ids[1:])
    assert len(env.store.pull("T", 0, 0, 100)) == 4  # the marker is never delivered
    assert env.wheel.stats().extra["deleted"] == 1


def test_marker_for_another_topic_deletes_nothing(env):  # behaviour 72
    uk1, h1 = env.send("A", env.now + 3000)
    uk2, _ = env.send("A", env.now + 3000)
    assert env.wheel.cancel(h1, env.now)
    fake = encode_handle("Acollision", decode_handle(h1).due_ms, uk2)
    assert env.wheel.cancel(fake, env.now)  # best-effort: the wheel cannot tell
    env.run(env.now + 5000, 100)
    assert env.delivered_ids("A") == [uk2]
    assert env.store.pull("Acollision", 0, 0, 10) == []


def test_cancel_rejections(env):  # behaviour 41: no marker in the past; the cancel answers False
    _, handle = env.send("T", env.now + 3000)
    with pytest.raises(InvalidHandleError):
        env.wheel.cancel("not-a-handle", env.now)
    env.clock.set(START_MS + 3000)
    before = env.store.max_offset
    assert env.wheel.cancel(handle, env.now) is False
    assert env.store.max_offset == before  # no marker was written


def test_cancel_behind_the_write_time_answers_false(env):
    _, handle = env.send("T", env.now + 3000)
    env.wheel.maintain(env.now + 5000)  # the wheel has moved on (clock skew)
    assert env.wheel.cancel(handle, env.now) is False
    assert env.wheel.stats().extra["expired_markers"] == 1


def test_expired_at_enqueue_goes_straight_out(env):  # behaviour 69
    msg_id, _ = env.send("T", env.now + 1000)
    env.clock.set(START_MS + 5000)
    records = env.step()
    assert [m.msg_id for _, m in env.delivered] == [msg_id]
    assert env.delivered[0][1].properties[TIMER_ENQUEUE_MS] == str(2**63 - 1)
    assert env.wheel.stats().extra["expired"] == 1 and records[0].key.topic == "T"
    assert env.wheel.stats().extra["timing_count"] == {}


def test_roll_small_window(tmp_path):  # behaviour 65
    e = make_env(tmp_path, timer_precision_ms=500, timer_roll_window_slots=2)
    d = e.now + 2000  # slot now + 1500 >= W x p
    msg_id, _ = e.send("T", d)
    e.run(e.now + 5000, 100)
    assert e.delivered_ids() == [msg_id]
    at, msg = e.delivered[0]
    assert msg.properties[TIMER_ROLL_TIMES] == "1" and at >= d
    stats = e.wheel.stats()
    assert stats.extra["roll_count"] == 1 and stats.bytes_written["rolls"] > 0
    by_topic = e.store.bytes_written_by_topic()[WHEEL_TIMER_TOPIC]
    assert by_topic == stats.bytes_written["commitlog_timer_topic"] + stats.bytes_written["rolls"]
    e.close()


def test_roll_target_slots(tmp_path):  # behaviour 66, at p = 1000 and W = 9
    e = make_env(tmp_path, timer_precision_ms=1000, timer_roll_window_slots=9)
    e.send("T", e.now + 10_000)  # out = now + 9 s: overshoot 0 < 3 -> park at w + 4
    e.send("T", e.now + 13_000)  # out = now + 12 s: overshoot 3 is not < 3 -> park at w + 9
    e.wheel.maintain(e.now)
    u1, u2 = (e.wheel.timerlog.read_unit(i * UNIT_SIZE) for i in range(2))
    assert u1.magic & MAGIC_ROLL and u1.slot_ms == e.now + 4000
    assert u2.magic & MAGIC_ROLL and u2.slot_ms == e.now + 9000
    e.close()


def test_three_days_rolls_once_with_defaults(env):  # behaviour 68
    d = env.now + 3 * DAY_MS
    msg_id, _ = env.send("T", d)
    env.run(d + 60_000, 600_000 - 7)
    assert env.delivered_ids() == [msg_id]
    at, msg = env.delivered[0]
    assert at >= d and at <= d + 600_000
    assert msg.properties[TIMER_ROLL_TIMES] == "1"


def test_thirty_days_with_commitlog_retention(tmp_path):
    """A 30-day message survives 72 h CommitLog retention by rolling every 2 days."""
    e = make_env(tmp_path, timer_max_delay_sec=40 * 86_400, max_message_size=4096,
                 commitlog_segment_size=64 * 1024)
    d = e.now + 30 * DAY_MS
    msg_id, _ = e.send("T", d, body=b"m" * 100)
    while e.now < d + 3_600_000:
        e.clock.set(e.now + 1_800_000)
        e.store.put_message(Message(topic="noise", body=b"n" * 4000))  # segments fill, expire
        e.step()
        e.store.delete_expired(e.now)
    assert e.store.min_offset > 0, "retention never deleted a segment"
    assert e.delivered_ids() == [msg_id]
    at, msg = e.delivered[0]
    assert d <= at <= d + 1_800_000
    # each roll re-enqueues up to one 30-minute step late, so 14 rolls of 2 days bring the
    # remainder under the 2-day window (a 15th would need zero lateness)
    assert msg.properties[TIMER_ROLL_TIMES] == "14"
    assert e.wheel.stats().extra["roll_count"] == 14
    e.close()


def test_big_slot_over_several_claims(env):  # bounded work
    ids = {env.send("T", env.now + 2000)[0] for _ in range(250)}
    env.wheel.maintain(env.now)  # into the wheel while the slot is ahead
    env.clock.set(START_MS + 2000)
    got, batches = [], []
    while True:
        records = env.wheel.claim_due(env.now, 100, 1 << 30)
        if not records:
            break
        batches.append(records)
        got += [r.key.msg_id for r in records]
    assert [len(b) for b in batches] == [100, 100, 50]
    assert set(got) == ids
    assert env.wheel.stats().extra["read_time_ms"] < START_MS + 1900 + 100  # not completed
    for records in batches[:2]:
        env.wheel.complete(records, None)
    assert env.wheel.stats().extra["read_time_ms"] == START_MS + 1900
    env.wheel.complete(batches[2], None)
    assert env.wheel.stats().extra["read_time_ms"] == START_MS + 2000
    assert env.wheel.claim_due(env.now, 100, 1 << 30) == []


def test_byte_budget(env):
    for _ in range(10):
        env.send("T", env.now + 1000, body=b"b" * 1000)
    env.wheel.maintain(env.now)
    env.clock.set(START_MS + 1000)
    first = env.wheel.claim_due(env.now, 100, 2500)
    assert 2 <= len(first) <= 3


def test_unreadable_message_is_counted_and_skipped(env):
    ids = [env.send("T", env.now + 2000, body=b"z" * 50)[0] for _ in range(3)]
    env.wheel.maintain(env.now)
    cq = env.store.consume_queue(WHEEL_TIMER_TOPIC, 0)
    victim = cq.get(1).commitlog_offset
    segment = sorted((tmp := env.root / "store" / "commitlog").iterdir())[0]
    with open(segment, "r+b") as f:
        f.seek(victim + 100)
        f.write(b"!")  # flip a body byte: the record's CRC no longer matches
    env.run(env.now + 3000, 100)
    assert sorted(env.delivered_ids()) == sorted([ids[0], ids[2]])
    assert env.wheel.stats().extra["unreadable"] == 1
    assert tmp.exists()


def test_scan_lists_pending_in_due_order_with_paging(env):
    ids = [env.send("T" if i % 2 else "U", env.now + 10_000 - i * 1000)[0] for i in range(6)]
    _, h = env.send("T", env.now + 20_000)
    env.wheel.cancel(h, env.now)
    env.wheel.maintain(env.now)
    page = env.wheel.scan(limit=4)
    assert [e.deliver_at_ms for e in page] == sorted(e.deliver_at_ms for e in page)
    assert page.next_after is not None
    rest = env.wheel.scan(limit=4, after=page.next_after)
    assert [e.msg_id for e in page + rest] == list(reversed(ids))
    assert rest.next_after is None
    assert {e.topic for e in env.wheel.scan(topic="U")} == {"U"}
    assert len(env.wheel.scan(from_ms=START_MS + 7000, to_ms=START_MS + 8000)) == 1
    assert env.wheel.pending_count() == 6


def test_stats_byte_accounting(env):
    for _ in range(20):
        env.send("T", env.now + 2000)
    env.run(env.now + 3000, 1000)
    stats = env.wheel.stats()
    b = stats.bytes_written
    assert b["commitlog_timer_topic"] == env.store.bytes_written_by_topic()[WHEEL_TIMER_TOPIC]
    assert b["timerlog"] == 20 * UNIT_SIZE
    assert b["wheel"] >= 4096 and b["wheel"] % 4096 == 0
    assert b["checkpoint"] % 56 == 0 and b["checkpoint"] > 0
    assert b["rolls"] == 0
    assert stats.pending == 0 and stats.extra["queue_offset"] == 20


def test_scan_slot_cap_pages_resume(env):
    msg_id, _ = env.send("T", env.now + 50_000)
    env.wheel.maintain(env.now)
    from rocks_timer.timer.wheel.scan import scan_pending
    w = env.wheel
    first = scan_pending(w.state, w.wheel, w.timerlog, w.message_store, from_ms=None,
                         to_ms=None, topic=None, limit=10, after=None, max_slots=100)
    assert list(first) == [] and first.next_after == f"{START_MS + 100 * 100}:0"
    rest = w.scan(after=first.next_after)
    assert [e.msg_id for e in rest] == [msg_id] and rest.next_after is None


def test_bench_smoke(tmp_path):
    from bench.wheel import main
    result = main(["--messages", "300", "--rate", "200", "--seconds", "0.3",
                   "--min-delay-ms", "100", "--max-delay-ms", "300",
                   "--out", str(tmp_path / "wheel.json")])
    assert result["throughput"]["delivered"] == 300
    assert result["lateness"]["early"] == 0
    assert result["lateness"]["delivered"] == result["lateness"]["sent"] > 0
    assert (tmp_path / "wheel.json").exists()
