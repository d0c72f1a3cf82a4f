"""Group commit of the deliverer's durable puts (rocks_timer/commit_sync.py): a durable put is
done only once the CommitLog is on disk through it; puts handed over while a sync runs share
the next one; a failed sync is counted and leaves the deliverer's own sync to raise. Real
CommitLog files, a real writer thread."""
from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from rocks_timer import BrokerConfig, ManualClock, Message
from rocks_timer.commit_sync import GroupCommit
from rocks_timer.message_store import MessageStore

T0 = 1_767_225_600_000


def test_a_durable_put_is_done_only_once_the_commitlog_is_synced_through_it(tmp_path):
    store = MessageStore.open(tmp_path, BrokerConfig(), ManualClock(T0))
    seen = []
    try:
        for n in range(20):
            future = store.put_messages_async([Message("t", b"x" * 100) for _ in range(50)],
                                              durable=True)
            future.add_done_callback(lambda f: seen.append(
                (f.result().end_offset, store.commitlog._synced)))
            future.result(10)
        assert len(seen) == 20
        assert all(end <= synced for end, synced in seen)
        assert store.sync() is False  # nothing left to sync
    finally:
        store.close()


def test_a_plain_put_does_not_wait_for_a_sync(tmp_path):
    store = MessageStore.open(tmp_path, BrokerConfig(), ManualClock(T0))
    gate = threading.Event()
    real = store._group_commit._sync_to
    store._group_commit._sync_to = lambda end: (gate.wait(10), real(end))
    try:
        durable = store.put_messages_async([Message("t", b"a")], durable=True)
        plain = store.put_messages_async([Message("t", b"b")])
        plain.result(10)  # written and resolved while the sync of the first is held
        assert not durable.done()
        gate.set()
        assert durable.result(10).end_offset <= store.commitlog._synced
    finally:
        gate.set()
        store.close()


def test_groups_handed_over_during_a_sync_share_the_next_one():
    started, release = threading.Event(), threading.Event()
    synced: list[int] = []

    def sync_to(end: int) -> None:
        started.set()
        release.wait(10)
        synced.append(end)

    commit = GroupCommit(sync_to, name="test-commit")
    futures = [Future() for _ in range(6)]
    commit.submit(100, [(futures[0], "r0")])
    assert started.wait(10)  # the first sync is running: the others queue behind it
    for n in range(1, 6):
        commit.submit(100 + n * 10, [(futures[n], f"r{n}")])
    release.set()
    assert [f.result(10) for f in futures] == [f"r{n}" for n in range(6)]
    commit.close()
    assert synced == [100, 150] and commit.syncs == 2


def test_a_failed_sync_is_counted_and_still_resolves(caplog):
    def sync_to(end: int) -> None:
        raise OSError(5, "Input/output error")

    commit = GroupCommit(sync_to, name="test-commit")
    future: Future = Future()
    commit.submit(10, [(future, "landed")])
    assert future.result(10) == "landed"  # the deliverer's own MessageStore.sync raises
    commit.close()
    assert commit.failures == 1 and "Input/output error" in caplog.text


def test_close_resolves_everything_handed_over_then_refuses_more():
    commit = GroupCommit(lambda end: None, name="test-commit")
    futures = [Future() for _ in range(3)]
    for n, future in enumerate(futures):
        commit.submit(n, [(future, n)])
    commit.close()
    assert [f.result(0) for f in futures] == [0, 1, 2]
    with pytest.raises(RuntimeError):
        commit.submit(5, [(Future(), 5)])
