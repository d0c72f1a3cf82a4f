"""The background fdatasync of value segments (``syncer.py``): what is requested gets synced,
``take`` hands over what the thread has not started and waits for what it is syncing, a
released segment is skipped, and a store's ``sync`` leaves nothing requested unsynced. Real
files; the count of fdatasync calls per file is read from a wrapper around ``SegmentFile``."""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from rocks_timer import BrokerConfig
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.rocksdb.vlog.segments import SegmentFile
from rocks_timer.timer.rocksdb.vlog import syncer as syncer_module
from rocks_timer.timer.rocksdb.vlog.syncer import BackgroundSync
from tests.support.rocks_support import T0, rec


class CountingFile(SegmentFile):
    def __init__(self, directory, segment_id, gate: threading.Event | None = None):
        super().__init__(directory, segment_id)
        self.syncs = 0
        self.gate = gate

    def sync(self) -> None:
        if self.gate is not None:
            self.gate.wait(5)
        super().sync()
        self.syncs += 1


@dataclass
class Seg:
    id: int
    file: CountingFile | None


def test_requested_segments_are_synced_and_close_finishes_them(tmp_path):
    syncer = BackgroundSync("test-sync")
    segs = [Seg(i, CountingFile(tmp_path, i)) for i in range(5)]
    for seg in segs:
        seg.file.append(b"x" * 100)
    syncer.request(segs[:3])
    syncer.request(segs[3:])
    syncer.close()
    assert [seg.file.syncs for seg in segs] == [1] * 5
    syncer.request(segs[:1])  # after close: synced at once by the caller
    assert segs[0].file.syncs == 2


def test_take_waits_for_the_batch_in_progress_and_hands_over_the_rest(tmp_path):
    gate = threading.Event()
    syncer = BackgroundSync("test-sync")
    slow = Seg(1, CountingFile(tmp_path, 1, gate))
    syncer.request([slow])
    while not syncer._running.locked():  # the thread has taken it and waits at the gate
        threading.Event().wait(0.001)
    later = Seg(2, CountingFile(tmp_path, 2))
    syncer.request([later])
    taken: list = []
    taker = threading.Thread(target=lambda: taken.extend(syncer.take()))
    taker.start()
    taker.join(0.2)
    assert taker.is_alive()  # waits for the batch in progress
    gate.set()
    taker.join(5)
    assert slow.file.syncs == 1 and taken == [later] and later.file.syncs == 0
    syncer.close()
    assert later.file.syncs == 0  # handed over: the caller syncs it


def test_a_released_segment_is_skipped(tmp_path):
    syncer = BackgroundSync("test-sync")
    gone = Seg(1, CountingFile(tmp_path, 1))
    gone.file.close()
    kept = Seg(2, CountingFile(tmp_path, 2))
    syncer.request([gone, Seg(3, None), kept])
    syncer.close()
    assert kept.file.syncs == 1 and syncer.failures == 0


def test_a_store_sync_covers_what_maintain_handed_to_the_thread(tmp_path, monkeypatch):
    """maintain requests the sync; the broker's flush (store.sync) must not return before
    those segments are on disk, even when the thread has not got to them."""
    synced: list[int] = []
    real = SegmentFile.sync

    def counting(self):
        real(self)
        synced.append(self.id)

    monkeypatch.setattr(SegmentFile, "sync", counting)
    with RocksTimerStore.open(tmp_path / "t", BrokerConfig(rocksdb_layout="vlog")) as store:
        store.schedule([rec(i, T0 + 10_000 + i, body=os.urandom(600)) for i in range(200)], T0)
        dirty = set(store.vlog.dirty)
        assert dirty
        gate = threading.Event()
        real_sync = syncer_module.sync_segments

        def held(segs):  # the thread cannot finish its batch until released
            gate.wait(5)
            real_sync(segs)

        monkeypatch.setattr(syncer_module, "sync_segments", held)
        store.maintain(T0 + 5_000)
        assert not store.vlog.dirty  # handed to the thread, which is held back
        releaser = threading.Timer(0.3, gate.set)
        releaser.start()
        store.sync()  # returns only once those segments are on disk
        assert dirty <= set(synced)
        releaser.join()
        assert store.stats().extra["vlog_sync_failures"] == 0


def test_a_release_closing_a_segment_waits_for_its_sync_in_progress(tmp_path):
    """The release thread closes a segment's file while the sync thread may be syncing it: the
    close waits for the fdatasync, and a sync after the close does nothing (never a stale or
    reused descriptor, never EBADF)."""
    seg = SegmentFile(tmp_path, 1)
    seg.append(b"x" * 4096)
    entered, release = threading.Event(), threading.Event()
    real = os.fdatasync

    def slow_fdatasync(fd):
        entered.set()
        release.wait(10)
        real(fd)

    os.fdatasync = slow_fdatasync
    try:
        syncing = threading.Thread(target=seg.sync)
        syncing.start()
        assert entered.wait(10)
        closing = threading.Thread(target=seg.close)
        closing.start()
        closing.join(0.2)
        assert closing.is_alive() and seg.fd >= 0  # waits for the sync in progress
        release.set()
        syncing.join(10)
        closing.join(10)
    finally:
        os.fdatasync = real
        release.set()
    assert seg.fd == -1
    seg.sync()  # closed: nothing to do
