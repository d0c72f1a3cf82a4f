"""Group commit of durable puts: the CommitLog's fdatasync on a thread of its own.

A durable put (the deliverer's: a timer store forgets a message only once its delivered copy is
on disk, ARCHITECTURE §4) is done when the CommitLog is synced through it. Syncing on the writer's
thread made every group wait for the disk before the next could be written, and, after each
fdatasync, for the GIL held by the timer loop (up to the 5 ms switch interval): the writer, not
the claim, bounded deliveries. Here the writer hands the written group's end offset and its
futures over and goes on writing; this thread syncs through the highest offset handed over
(one fdatasync covers every group written meanwhile, as RocketMQ's GroupCommitService does)
and then resolves them.

A failed fdatasync is logged and the futures still resolve: the deliverer syncs again before it
lets the store forget anything (``MessageStore.sync`` raises then), as when the writer synced.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import Any, Callable

log = logging.getLogger(__name__)


class GroupCommit:
    """Resolves futures once ``sync_to`` has made their end offset durable."""

    def __init__(self, sync_to: Callable[[int], Any], name: str = "commitlog-sync") -> None:
        self._sync_to = sync_to
        self._name = name
        self._cond = threading.Condition()
        self._todo: list[tuple[int, list[tuple[Future, Any]]]] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self.syncs = 0
        self.failures = 0

    def submit(self, end_offset: int, resolutions: list[tuple[Future, Any]]) -> None:
        """Set each future's result once the log is durable through ``end_offset``."""
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self._name} is closed")
            self._todo.append((end_offset, resolutions))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def close(self) -> None:
        """Sync and resolve everything submitted, then stop the thread."""
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify()
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._todo and not self._closed:
                    self._cond.wait()
                todo, self._todo = self._todo, []
                if not todo:
                    return  # closed, nothing left
            try:
                self._sync_to(max(end for end, _ in todo))
                self.syncs += 1
            except Exception as exc:  # noqa: BLE001 - the deliverer's own sync raises it again
                self.failures += 1
                log.error("%s: commitlog sync for %d delivery groups failed: %s", self._name,
                          len(todo), exc)
            for _, resolutions in todo:
                for future, result in resolutions:
                    future.set_result(result)
