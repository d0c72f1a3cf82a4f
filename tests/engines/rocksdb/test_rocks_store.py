"""RocksTimerStore: engine-specific behaviour on a real RocksDB in tmp_path."""
from __future__ import annotations

import os
import random
import threading

import pytest
from tests.support.rocks_support import (BIG, T0, clock, ids, layout, msg, open_store,  # noqa: F401 - fixtures
                          raw_timer_put, rec)

from rocks_timer.config import BrokerConfig
from rocks_timer.errors import InvalidHandleError, InvalidMessageError
from rocks_timer.message import TIMER_DELIVER_MS, Message
from rocks_timer.timer import keys as K
from rocks_timer.timer.handles import encode_handle
from rocks_timer.timer.store import TimerKey, TimerRecord, TimerStore


def test_implements_the_protocol(open_store):
    store = open_store()
    assert isinstance(store, TimerStore)
    assert store.name == "rocksdb" and store.exactly_once is True


def test_never_early_in_key_order_and_complete(open_store, clock):
    store = open_store()
    now = clock.now_ms()
    scheduled = store.schedule([rec(i, now + 1000 - i * 100) for i in range(5)], now)
    assert [s.key_due_ms for s in scheduled] == [now + 1000 - i * 100 for i in range(5)]
    assert store.claim_due(clock.advance(599), 100, BIG) == []
    due = store.claim_due(clock.advance(1), 100, BIG)
    assert ids(due) == [f"{4:032X}"]
    assert due[0].message.topic == "orders" and due[0].message.queue_id == 0
    assert due[0].handle == scheduled[4].handle
    assert store.claim_due(clock.now_ms(), 100, BIG) == []  # in flight: not again
    store.complete(due, commitlog_end=123)
    rest = store.claim_due(clock.advance(10_000), 100, BIG)
    assert ids(rest) == [f"{i:032X}" for i in (3, 2, 1, 0)]
    store.complete(rest, 456)
    assert store.pending_count() == 0 and store.reconcile_from() == 456
    assert store.check()["problems"] == []


def test_budget_by_count_and_bytes(open_store):
    store = open_store()
    store.schedule([rec(i, 10 + i, body=os.urandom(1000)) for i in range(10)], 0)
    assert len(store.claim_due(100, 3, BIG)) == 3
    second = store.claim_due(100, 100, 2500)
    assert len(second) == 2 and sum(r.size for r in second) <= 2500
    assert len(store.claim_due(100, 100, 1)) == 1  # one record always fits
    assert len(store.claim_due(100, 100, BIG)) == 4


def test_pending_counter_is_exact_with_replays(open_store):
    store = open_store()
    store.schedule([rec(1, 50), rec(1, 50), rec(2, 60)], 0)
    store.schedule([rec(2, 60)], 0)
    assert store.pending_count() == 2
    assert store.check() == {"live_keys": 2, "pending": 2, "undecodable": 0, "in_flight": 0,
                             "problems": []}


def test_message_without_id_is_rejected(open_store):
    store = open_store()
    with pytest.raises(InvalidMessageError):
        store.schedule([TimerRecord(5, Message(topic="t", body=b"x"))], 0)
    assert store.pending_count() == 0


def test_corrupt_value_is_quarantined_and_the_rest_delivered(tmp_path, open_store):
    path = tmp_path / "timer"
    # small bodies stay in the index, so the raw put below replaces the whole stored value
    # (over a pointer it would leave the segment's liveness row counting the old record)
    inline_small = BrokerConfig(vlog_inline_max_bytes=128)
    store = open_store(inline_small, path=path)
    store.schedule([rec(i, 100 + i) for i in range(5)], 0)
    store.close()
    bad_key = K.encode_key(TimerKey(102, "orders", f"{2:032X}"))
    raw_timer_put(path, bad_key, b"\x01\x00garbage")
    store = open_store(inline_small, path=path)
    due = store.claim_due(1000, 100, BIG)
    assert ids(due) == [f"{i:032X}" for i in (0, 1, 3, 4)]
    store.complete(due, None)
    stats = store.stats()
    assert stats.extra["corrupt"] == 1 and stats.pending == 0
    assert store.check()["problems"] == []
    store.close()
    store = open_store(inline_small, path=path)  # the count survives, the bytes are kept byte for byte
    assert store.stats().extra["corrupt"] == 1
    assert bytes(store.db.corrupt.get(bad_key)) == b"\x01\x00garbage"


def test_keys_never_land_behind_the_cursor(open_store, clock):
    store = open_store()
    now = clock.now_ms()
    store.schedule([rec(1, now + 100), rec(2, now + 200)], now)
    first = store.claim_due(clock.advance(150), 10, BIG)
    assert ids(first) == [f"{1:032X}"]
    late = msg(0, properties={TIMER_DELIVER_MS: str(now + 50)})  # id sorts before the claimed
    same_ms = msg(3)
    got = store.schedule([TimerRecord(now + 50, late), TimerRecord(now + 100, same_ms)],
                         clock.now_ms())
    assert [s.key_due_ms for s in got] == [now + 101, now + 101]
    store.complete(first, None)
    again = store.claim_due(clock.now_ms(), 10, BIG)
    assert ids(again) == [f"{0:032X}", f"{3:032X}"]
    assert again[0].message.get_property(TIMER_DELIVER_MS) == str(now + 50)  # user's time untouched
    assert store.check()["problems"] == []


def test_clamp_survives_reopen(tmp_path, open_store):
    path = tmp_path / "timer"
    store = open_store(path=path)
    store.schedule([rec(1, 100), rec(2, 500)], 0)
    store.complete(store.claim_due(200, 10, BIG), 7)
    store.close()
    store = open_store(path=path)
    got = store.schedule([rec(3, 50)], 300)
    assert got[0].key_due_ms == 101
    assert ids(store.claim_due(300, 10, BIG)) == [f"{3:032X}"]


def test_cancel_is_definite(tmp_path, open_store):
    path = tmp_path / "timer"
    store = open_store(path=path)
    handles = [s.handle for s in store.schedule([rec(i, 100 + i) for i in range(4)], 0)]
    assert store.cancel(handles[3], 0) is True
    assert store.cancel(handles[3], 0) is False
    in_flight = store.claim_due(100, 1, BIG)
    assert store.cancel(handles[0], 100) is False  # being delivered
    store.complete(in_flight, None)
    assert store.cancel(handles[0], 100) is False  # delivered
    assert store.cancel(encode_handle("orders", 101, "F" * 32), 100) is False  # unknown
    with pytest.raises(InvalidHandleError):
        store.cancel("not a handle!", 100)
    assert store.cancel(handles[2], 100) is True
    store.close()
    store = open_store(path=path)  # durable
    assert ids(store.claim_due(10_000, 10, BIG)) == [f"{1:032X}"]
    assert store.pending_count() == 1


def test_scan_pages_filters_and_bounds(open_store):
    store = open_store()
    records = [rec(i, 1000 + i * 10, topic=("a", "b", "c")[i % 3]) for i in range(30)]
    store.schedule(records, 0)
    all_entries, after = [], None
    while True:
        page = store.scan(limit=7, after=after)
        all_entries.extend(page)
        after = page.next_after
        if after is None:
            break
    assert [e.msg_id for e in all_entries] == [f"{i:032X}" for i in range(30)]
    first = all_entries[0]
    assert (first.deliver_at_ms, first.topic, first.size, first.queue_id, first.tags) == \
        (1000, "a", len(b"payload"), 0, "T0")
    page = store.scan(from_ms=1050, to_ms=1150, topic="b", limit=100)
    assert [e.deliver_at_ms for e in page] == [1070, 1100, 1130]
    assert page.next_after is None
    exact = store.scan(limit=30)
    assert len(exact) == 30 and exact.next_after is None
    with pytest.raises(InvalidHandleError):
        store.scan(after="garbage")


def test_scan_with_a_sparse_topic_is_bounded(open_store):
    store = open_store()
    store.schedule([rec(i, 10 + i, topic="busy") for i in range(2500)], 0)
    store.schedule([rec(10_000 + i, 5000 + i, topic="rare") for i in range(3)], 0)
    page = store.scan(topic="rare", limit=10)
    assert list(page) == [] and page.next_after is not None
    found, pages = [], 1
    while page.next_after is not None:
        page = store.scan(topic="rare", limit=10, after=page.next_after)
        found.extend(page)
        pages += 1
    assert [e.deliver_at_ms for e in found] == [5000, 5001, 5002] and pages == 3


def test_reconcile_deletes_present_keys(tmp_path, open_store):
    path = tmp_path / "timer"
    store = open_store(path=path)
    assert store.reconcile_from() is None
    store.schedule([rec(i, 10 + i) for i in range(4)], 0)
    claimed = store.claim_due(100, 2, BIG)
    found = [claimed[0].key, TimerKey(12, "orders", f"{2:032X}"), TimerKey(5, "x", "A" * 32)]
    assert store.reconcile(found, 999) == 2
    assert store.reconcile_from() == 999 and store.pending_count() == 2
    store.complete(claimed, None)  # the reconciled record is no longer in flight: no double count
    assert store.pending_count() == 1
    assert ids(store.claim_due(100, 10, BIG)) == [f"{3:032X}"]
    store.close()
    assert open_store(path=path).reconcile_from() == 999


def test_complete_persists_the_cursor(tmp_path, open_store):
    path = tmp_path / "timer"
    store = open_store(path=path)
    store.schedule([rec(i, 100 + i) for i in range(10)], 0)
    claimed = store.claim_due(105, 100, BIG)
    assert len(claimed) == 6
    store.complete([claimed[i] for i in (1, 2, 4, 5)], 42)
    store.close()
    store = open_store(path=path)
    assert store.stats().extra["cursor_due_ms"] == 100
    again = store.claim_due(1000, 100, BIG)
    assert ids(again) == [f"{i:032X}" for i in (0, 3, 6, 7, 8, 9)]
    assert store.check()["problems"] == []


def test_tombstones_do_not_slow_an_empty_claim(open_store):
    store = open_store(reclaim_after_deletes=100_000)
    n, batch = 200_000, 2000
    for start in range(0, n, batch):
        store.schedule([rec(i, 1000 + i) for i in range(start, start + batch)], 0)
    while True:
        due = store.claim_due(1000 + n, 5000, BIG)
        if not due:
            break
        store.complete(list(due), None)  # records, not the claim's batch: a tombstone per key
    assert store.pending_count() == 0
    store.schedule([rec(n + 1, 10 * n)], 0)  # a live key far beyond the tombstones

    def skipped_by(action) -> int:
        before = store.tickers().get("rocksdb.number.iter.skip", 0)
        action()
        return store.tickers().get("rocksdb.number.iter.skip", 0) - before

    assert skipped_by(lambda: store.claim_due(1000 + n + 5, 1000, BIG)) < 10

    def from_the_start():  # what a scan that ignored the cursor would pay
        it = store.db.timer.iter()
        it.seek_to_first()
        del it

    assert skipped_by(from_the_start) > n  # the test can fail: tombstones are really there
    store.maintain(0)  # starts the reclaim on a background thread
    store.wait_for_maintenance()
    assert store.stats().extra["deletes_since_reclaim"] == 0
    assert skipped_by(from_the_start) < 1000
    assert store.check()["problems"] == []


def _skipped_from_the_start(store) -> int:
    before = store.tickers().get("rocksdb.number.iter.skip", 0)
    it = store.db.timer.iter()
    it.seek_to_first()
    del it
    return store.tickers().get("rocksdb.number.iter.skip", 0) - before


def test_a_claimed_batch_is_forgotten_by_range(open_store):
    """Completing the claim's own batch writes one range tombstone per claim: no point
    tombstones pile up, so nothing is skipped even before the reclaim; a key sent after the
    claims (clamped above them) and one left pending stay, and the counts stay exact."""
    store = open_store(reclaim_after_deletes=10_000_000)
    n = 50_000
    for start in range(0, n, 1000):
        store.schedule([rec(i, 1000 + i) for i in range(start, start + 1000)], 0)
    store.schedule([rec(n + 1, 10 * n)], 0)
    while True:
        due = store.claim_due(1000 + n, 5000, BIG)
        if not due:
            break
        assert due.spans is not None and len(due.spans) == 1
        late = store.schedule([rec(n + 2 + len(due), 1000)], 0)  # due in the claimed past
        assert late[0].key_due_ms > 1000  # clamped above every claimed key
        store.complete(due, None)
    assert _skipped_from_the_start(store) < 100
    left = store.claim_due(10 * n, 100, BIG)
    assert sorted(r.key.due_ms for r in left)[-1] == 10 * n
    assert len(left) == store.pending_count()  # the far key and every clamped late send
    assert store.check()["problems"] == []


def test_cancel_races_claim_without_double_answers(open_store):
    store = open_store()
    n = 3000
    handles = [s.handle for s in store.schedule([rec(i, 10 + i) for i in range(n)], 0)]
    delivered, cancelled = [], []
    done = threading.Event()

    def deliverer():
        while not done.is_set() or store.pending_count():
            due = store.claim_due(10 + n, 37, BIG)
            store.complete(due, None)
            delivered.extend(r.handle for r in due)
            if not due and done.is_set():
                break

    def canceller(part):
        for h in part:
            if store.cancel(h, 0):
                cancelled.append(h)

    order = handles[:]
    random.Random(7).shuffle(order)
    threads = [threading.Thread(target=deliverer)] + [
        threading.Thread(target=canceller, args=(order[k::2],)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    done.set()
    threads[0].join()
    assert not set(delivered) & set(cancelled)
    assert sorted(delivered + cancelled) == sorted(handles)
    assert len(delivered) == len(set(delivered))
    assert store.pending_count() == 0


def test_stats_compact_and_wait(open_store):
    store = open_store()
    store.schedule([rec(i, 10 + i, body=os.urandom(500)) for i in range(2000)], 0)
    store.complete(store.claim_due(10_000, 1500, BIG), 1)
    stats = store.stats()
    assert stats.engine == "rocksdb" and stats.pending == 500
    assert set(stats.bytes_written) == {"wal", "flush", "compaction", "user", "vlog",
                                           "vlog_relocation"}
    body_bytes = stats.bytes_written["wal"] + stats.bytes_written["vlog"]
    assert body_bytes >= 2000 * 500
    assert stats.extra["layout"] == store.layout
    if store.layout == "vlog":  # bodies go to value segments, the WAL carries pointers
        assert stats.bytes_written["vlog"] >= 2000 * 500 > stats.bytes_written["wal"]
    for name in ("profile", "live_sst_bytes", "live_keys_estimate", "corrupt", "in_flight",
                 "cursor_due_ms", "compact_read_bytes", "num_running_compactions"):
        assert name in stats.extra
    report = store.compact()
    assert report["after_live_sst_bytes"] > 0 and "before_live_sst_bytes" in report
    assert store.wait_for_compactions(quiet_ms=50, timeout_ms=30_000)
    assert store.stats().as_dict()["engine"] == "rocksdb"
