"""The periodic fdatasync of the value segments (async mode), on a thread of its own.

The store's ``maintain`` runs on the broker's timer loop, the thread that claims and completes
deliveries. Syncing there made every delivery wait for the disk to take the bodies of every
send since the last sync: a burst sent just before it fell due stalled its first claim for the
whole write-back (docs/BENCHMARKS.md has the figure). ``maintain`` now hands the
segments to this thread and goes on; ``RocksTimerStore.sync`` (the broker's flush, whose return
promises durability) takes over what the thread has not started and waits for what it is
syncing, so nothing acknowledged before a flush is left out of it.

A segment released while queued is skipped (its file is gone and nothing in it was live); a
failed fdatasync is logged and counted (``vlog_sync_failures`` in ``stats``), never retried: after an
I/O error Linux reports success for pages it dropped, so a retry would prove nothing.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Iterable

log = logging.getLogger(__name__)


def sync_segments(segs: Iterable[Any]) -> None:
    """fdatasync each segment; one released meanwhile is skipped (``SegmentFile.sync`` does
    nothing on a closed file, and a close waits for a sync in progress)."""
    for seg in segs:
        if seg.file is not None:
            seg.file.sync()


class BackgroundSync:
    """One daemon thread that fdatasyncs the segments handed to it, started on first use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._running = threading.Lock()  # held while a batch is being synced
        self._wake = threading.Event()
        self._todo: dict[int, Any] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        self.failures = 0

    def request(self, segs: Iterable[Any]) -> None:
        """Sync these segments soon (returns at once)."""
        with self._lock:
            if self._closed:
                sync_segments(segs)  # closing: nobody will pick them up
                return
            for seg in segs:
                self._todo[seg.id] = seg
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        self._wake.set()

    def take(self) -> list[Any]:
        """The segments not started yet (the caller syncs them), after the batch in progress,
        if any, has finished."""
        with self._lock:
            todo = list(self._todo.values())
            self._todo.clear()
        with self._running:
            pass
        return todo

    def close(self) -> None:
        """Finish what was requested, then stop the thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._running:
                with self._lock:
                    todo = list(self._todo.values())
                    self._todo.clear()
                    closed = self._closed
                try:
                    sync_segments(todo)
                except OSError:
                    self.failures += 1
                    log.exception("%s: fdatasync of a value segment failed", self._name)
            if closed:
                with self._lock:
                    if not self._todo:
                        return
                self._wake.set()  # requested while this batch ran: one more round
