"""The ``TimerStore`` contract at the store level (no Broker, no deliverer thread), one suite for
every engine: the memory reference, RocksDB in both layouts and the file wheel. The legacy delay
levels (``legacy_levels``) are not a TimerStore and are not here.

- a claim is never early: nothing due after ``now`` is handed out (injected clock);
- a record in flight (claimed, not completed) is not claimed again;
- ``cancel`` of a record in flight is refused: the protocol's answer is False (not an error;
  only a malformed handle raises), and the record is then delivered once;
- ``complete`` is atomic: after it every record it was given is gone, or none is, also when its
  write fails (a file-size limit in a child process) and across a reopen;
- reconcile: records whose copies reached the CommitLog before a crash, but were not completed,
  are dropped by ``reconcile`` and never handed out again; the others come back.

What an engine may choose (durable or not, exact or best-effort cancel, exactly or at least once)
is in ``store_harness.TRAITS``; each test asks an engine only for what it promises.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocks_timer.message import TIMER_OUT_MS
from rocks_timer.timer.store import TimerKey
from tests.contract.store_harness import (DURABLE, ENGINES, RECONCILING, StoreHarness, ids,
                                          users)

ROOT = Path(__file__).resolve().parents[2]
CHILD = "tests.contract.store_child"
every_engine = pytest.mark.parametrize("engine", ENGINES)
# examples per engine: an open costs ~20 ms for RocksDB and ~0.3 s for the wheel (its slot file)
EXAMPLES = {"memory": 100, "rocksdb": 30, "rocksdb-inline": 30, "wheel": 12}


@pytest.fixture
def harness(engine, tmp_path):
    h = StoreHarness(engine, tmp_path)
    yield h
    try:
        assert h.problems() == []
    finally:
        h.close()


def drain(h: StoreHarness, until_ms: int, step_ms: int = 50) -> list[str]:
    """Advance to ``until_ms`` in steps, claiming and delivering at each; the ids delivered."""
    out: list[str] = []
    while True:
        records = h.claim()
        out += ids(records)
        h.deliver(records)
        if h.now >= until_ms:
            return out
        h.clock.advance(min(step_ms, until_ms - h.now))


# -- claim never early -----------------------------------------------------------------------------
@every_engine
def test_a_claim_is_never_early_and_hands_out_each_record_once(harness):
    h = harness
    start = h.now
    offsets = [300, 1000, 1000, 1001, 2500, -5_000]  # the last one is already due
    due = {h.schedule(start + off)[0]: start + off for off in offsets}
    # the clock stops 1 ms before each due time, then at it (plus the engine's lateness)
    stops = sorted({t for d in due.values() if d > start
                    for t in (d - 1, d + h.traits.late_ms)})
    seen: list[str] = []
    for stop in stops:
        h.clock.set(stop)
        while records := h.claim(max_messages=2):
            for record in users(records):
                assert due[record.key.msg_id] <= h.now, "claimed before its due time"
                assert record.key.due_ms <= h.now, "a key due after now was claimed"
            seen += ids(records)
            h.deliver(records)
        assert set(seen) >= {m for m, d in due.items() if d + h.traits.late_ms <= h.now}
    assert sorted(seen) == sorted(due)  # each exactly once, none lost


@every_engine
def test_nothing_due_after_now_is_claimed_even_with_room_in_the_budget(harness):
    h = harness
    msg_id, _ = h.schedule(h.now + 1_000)
    h.clock.advance(999)
    assert ids(h.claim()) == []
    h.clock.advance(1 + h.traits.late_ms)
    assert ids(h.claim()) == [msg_id]


# -- in flight: not claimed twice, cancel refused ---------------------------------------------------
@every_engine
def test_a_record_in_flight_is_not_claimed_again(harness):
    h = harness
    want = {h.schedule(h.now + 10 * i)[0] for i in range(12)}
    h.clock.advance(1_000)
    rounds = [h.claim(max_messages=5) for _ in range(4)]
    got = [i for records in rounds for i in ids(records)]
    assert len(got) == len(set(got)), "a record in flight was claimed twice"
    assert set(got) == want
    h.clock.advance(60_000)  # time going on does not release them
    assert ids(h.claim()) == []
    h.deliver([r for records in rounds[:1] for r in records])
    assert ids(h.claim()) == []  # neither does completing others
    h.deliver([r for records in rounds[1:] for r in records])
    assert ids(h.claim()) == [] and h.store.pending_count() == 0


@every_engine
def test_cancel_of_a_record_in_flight_is_refused_and_it_is_delivered_once(harness):
    h = harness
    flying, flying_handle = h.schedule(h.now + 100)
    later, later_handle = h.schedule(h.now + 60_000)
    h.clock.advance(100 + h.traits.late_ms)
    records = h.claim()
    assert ids(records) == [flying]
    assert h.store.cancel(flying_handle, h.now) is False  # the protocol's refusal: False
    if h.traits.keyed:
        [moved] = h.store.reschedule([flying_handle], h.now + 5_000, h.now)
        assert moved.status == "in_flight" and moved.handle is None
    h.deliver(records)
    assert h.store.cancel(flying_handle, h.now) is False  # delivered: still False
    if h.traits.exact_cancel:
        assert h.store.cancel(later_handle, h.now) is True
        assert drain(h, h.now + 70_000, step_ms=5_000) == []
        assert h.store.pending_count() == 0
    else:
        assert drain(h, h.now + 70_000, step_ms=5_000) == [later]


@every_engine
def test_a_cancel_that_said_true_is_never_delivered(harness):
    h = harness
    sent = [h.schedule(h.now + 500 + 10 * i) for i in range(20)]
    cancelled = {msg_id for msg_id, handle in sent[::3] if h.store.cancel(handle, h.now)}
    if h.traits.exact_cancel:
        assert len(cancelled) == len(sent[::3])
    got = drain(h, h.now + 2_000)
    assert sorted(got) == sorted(m for m, _ in sent if m not in cancelled)


# -- the same promises under a random trace ---------------------------------------------------------
# due times on a 100 ms grid and steps of 1 and 99 ms, so the clock often stands 1 ms before one
OPS = st.lists(st.one_of(
    st.tuples(st.just("send"), st.integers(-20, 50).map(lambda n: 100 * n)),
    st.tuples(st.just("advance"), st.sampled_from([0, 1, 99, 100, 300, 1_000])),
    st.tuples(st.just("claim"), st.integers(1, 6)),
    st.tuples(st.just("complete"), st.integers(0, 6)),
    st.tuples(st.just("cancel"), st.integers(0, 40)),
), min_size=1, max_size=40)


def run_trace(engine: str, ops) -> None:
    """Run ``ops`` against ``engine``, holding it to the model after every step."""
    with tempfile.TemporaryDirectory(prefix="store-contract-") as tmp:
        h = StoreHarness(engine, Path(tmp))
        try:
            sent: list[tuple[str, str, int]] = []  # msg_id, handle, due
            due, in_flight, done, cancelled = {}, {}, set(), set()
            for op, arg in ops:
                if op == "send":
                    msg_id, handle = h.schedule(h.now + arg)
                    sent.append((msg_id, handle, h.now + arg))
                    due[msg_id] = h.now + arg
                elif op == "advance":
                    h.clock.advance(arg)
                elif op == "claim":
                    records = h.claim(max_messages=arg)
                    for record in records:
                        msg_id = record.key.msg_id
                        if record in users(records):
                            assert due[msg_id] <= h.now, "claimed early"
                            assert msg_id not in in_flight, "claimed twice while in flight"
                            assert msg_id not in done, "delivered twice"
                            assert msg_id not in cancelled, "delivered after a true cancel"
                        in_flight[msg_id] = record
                elif op == "complete":
                    chosen = list(in_flight)[:arg]
                    h.deliver([in_flight.pop(m) for m in chosen])
                    done.update(chosen)
                elif op == "cancel" and sent:
                    msg_id, handle, _ = sent[arg % len(sent)]
                    answer = h.store.cancel(handle, h.now)
                    if msg_id in in_flight or msg_id in done:
                        assert answer is False, "cancel of a record in flight or delivered"
                    elif h.traits.exact_cancel:  # True exactly when pending and not in flight
                        assert answer is (msg_id not in cancelled), "cancel not exact"
                    if answer:
                        cancelled.add(msg_id)
                if h.traits.keyed:  # the pending count, the listing and the due counters agree
                    listed = len(h.store.scan(limit=1_000))
                    assert h.store.pending_count() == listed, f"pending count after {op}"
                    assert h.store.count_due([(None, None)]) == [listed], f"counters after {op}"
            h.deliver(list(in_flight.values()))
            done.update(in_flight)
            end = max(due.values(), default=h.now) + 1_000
            rest = drain(h, max(end, h.now), step_ms=500)
            assert len(rest) == len(set(rest)) and not set(rest) & done, "delivered twice"
            assert done.isdisjoint(cancelled) and cancelled.isdisjoint(rest)
            assert done | set(rest) | cancelled == set(due), "lost"
            assert h.store.pending_count() == 0
            assert h.problems() == []
        finally:
            h.close()


@every_engine
def test_a_random_trace_keeps_every_promise(engine):
    check = settings(max_examples=EXAMPLES[engine], deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])(given(ops=OPS)(
                         lambda ops: run_trace(engine, ops)))
    check()


# -- complete is atomic ----------------------------------------------------------------------------
@pytest.mark.parametrize("engine", DURABLE)
def test_complete_holds_across_a_reopen_and_what_was_not_completed_comes_back(engine, tmp_path):
    h = StoreHarness(engine, tmp_path)
    try:
        want = [h.schedule(h.now + 10 * i)[0] for i in range(30)]
        h.clock.advance(1_000)
        records = h.claim()
        assert sorted(ids(records)) == sorted(want)
        completed = users(records)[:12]
        end = h.deliver(completed)
        h.reopen()
        if h.traits.reconciles:
            assert h.store.reconcile_from() == end
        again = drain(h, h.now + 2_000)
        assert not set(again) & {r.key.msg_id for r in completed}, "a completed record came back"
        assert sorted(again) == sorted(set(want) - {r.key.msg_id for r in completed}), "lost"
        assert h.problems() == []
    finally:
        h.close()


def run_child(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", CHILD, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("engine", ["rocksdb", "rocksdb-inline"])
@pytest.mark.parametrize("shape", ["whole", "part"])
def test_complete_is_atomic_when_its_write_fails(engine, shape, tmp_path):
    """Twin stores in a child (store_child.py): A completes and measures the WAL bytes that
    took; B's complete may grow no file, C's the WAL by half of A's. Both must raise, change
    nothing in memory, and leave every claimed record on disk (none completed)."""
    done = run_child("complete-fails", engine, str(tmp_path), shape)
    assert done.returncode == 0, done.stderr
    out = {}
    for line in done.stdout.splitlines():
        name, word, rest = line.split(" ", 2)
        out[name, word] = rest
    assert int(out["A", "GROWTH"]) > 0
    for name in "BC":
        assert out[name, "COMPLETE"].startswith("raised"), done.stdout  # the write did fail
        # in the same process, nothing was applied that is not on disk
        assert (out[name, "PENDING"], out[name, "SCAN"]) == ("200", "200"), done.stdout
    for name in "ABC":
        claimed, given = out[name, "CLAIMED"].split(), out[name, "GIVEN"].split()
        h = StoreHarness(engine, tmp_path / name)
        try:
            completed = set(given) if name == "A" else set()
            assert h.store.pending_count() == 200 - len(completed)
            assert (h.store.reconcile_from() == 4242) is (name == "A")
            assert h.problems() == []
            got = drain(h, h.now + 10_000, step_ms=1_000)
            assert sorted(got) == sorted(set(claimed) - completed), \
                f"store {name}: not all or none of the complete held"
        finally:
            h.close()


# -- reconcile -------------------------------------------------------------------------------------
def reconcile_case(engine: str, delivered_mask: list[bool]) -> None:
    with tempfile.TemporaryDirectory(prefix="store-contract-") as tmp:
        h = StoreHarness(engine, Path(tmp))
        try:
            first, _ = h.schedule(h.now)  # one full delivery: the store has a reconcile point
            assert ids(first_records := h.claim()) == [first]
            start = h.deliver(first_records)
            sent = [h.schedule(h.now + 10 * i)[0] for i in range(len(delivered_mask))]
            h.clock.advance(1_000)
            records = {r.key.msg_id: r for r in users(h.claim())}
            assert sorted(records) == sorted(sent)
            reached = [m for m, hit in zip(sent, delivered_mask) if hit]
            # their copies reach the CommitLog, and nothing is completed: a crash
            end = h.put([records[m] for m in reached])
            h.reopen()
            assert h.store.reconcile_from() == start
            assert h.store.reconcile([records[m].key for m in reached], end) == len(reached)
            assert h.store.reconcile_from() == end
            assert h.store.reconcile([records[m].key for m in reached], end) == 0  # once
            h.reopen()  # a crash before any complete: the next open starts where it ended
            assert h.store.reconcile_from() == end
            assert h.store.reconcile([records[m].key for m in reached], end) == 0
            again = drain(h, h.now + 2_000)
            assert sorted(again) == sorted(set(sent) - set(reached))
            last = h.messages.max_offset  # the drain's completes recorded it
            h.reopen()
            assert h.store.reconcile_from() == last >= end
            assert drain(h, h.now + 2_000) == [] and h.store.pending_count() == 0
            assert h.problems() == []
        finally:
            h.close()


@pytest.mark.parametrize("engine", RECONCILING)
def test_reconcile_drops_what_reached_the_commitlog_and_only_that(engine):
    check = settings(max_examples=10, deadline=None)(
        given(mask=st.lists(st.booleans(), min_size=1, max_size=12))(
            lambda mask: reconcile_case(engine, mask)))
    check()


@pytest.mark.parametrize("engine", RECONCILING)
def test_reconcile_after_kill9_between_the_put_and_the_complete(engine, tmp_path):
    """A child claims 40 records, puts the copies of the even ones into the CommitLog, says
    which, and is killed with SIGKILL before it completes anything."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-m", CHILD, "crash-before-complete", engine,
                              str(tmp_path), "0"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = {}
        for line in child.stdout:
            word, _, rest = line.strip().partition(" ")
            lines[word] = rest
            if word == "READY":
                break
        assert "READY" in lines, child.stderr.read()
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(30)
    claimed, reached = lines["CLAIMED"].split(), lines["REACHED"].split()
    start, end = int(lines["START"]), int(lines["END"])
    h = StoreHarness(engine, tmp_path)
    try:
        assert h.store.reconcile_from() == start
        keys = [key for key in reached_keys(h) if key.msg_id in reached]
        assert sorted(k.msg_id for k in keys) == sorted(reached)
        assert h.store.reconcile(keys, end) == len(reached)
        again = drain(h, h.now + 2_000)
        assert sorted(again) == sorted(set(claimed) - set(reached)), "twice, or lost"
        assert h.problems() == []
    finally:
        h.close()


def reached_keys(h: StoreHarness):
    """The timer keys of the delivered copies in the CommitLog, as the deliverer finds them."""
    return [TimerKey(int(m.properties[TIMER_OUT_MS]), m.topic, m.msg_id)
            for m in h.messages.iter_messages(0) if TIMER_OUT_MS in m.properties]
