"""Asynchronous delivery (``enable_schedule_async_deliver``): per-level pending queues of puts.

Each level keeps a FIFO of :class:`PutResultProcess` records, one per issued put. The head is
resolved in order, so the level's offset never passes a put that has not landed:

======== ========================================================================
status   what the head does
======== ========================================================================
RUNNING  its future is not done: stop (later SUCCESS records wait behind it)
SUCCESS  offset = record offset + 1, pop
SKIP     pop, offset unchanged (a later SUCCESS moves the offset past it)
EXCEPTION resend k = resend_count + 1 after min(k x 100 ms, 60 s) of clock time; the message
         is read again: unreadable -> SKIP once resend_count > 6, else EXCEPTION again;
         readable -> put again (RUNNING)
======== ========================================================================

Unlike RocketMQ's handler, the backoff never sleeps a thread: the head remembers when its resend
is due (``resend_due_ms``, injected clock) and the handler returns until then.
"""
from __future__ import annotations

import enum
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

RESEND_STEP_MS = 100
RESEND_MAX_BACKOFF_MS = 60_000


class PutStatus(enum.Enum):
    RUNNING = "running"
    SUCCESS = "success"
    EXCEPTION = "exception"
    SKIP = "skip"


def resend_backoff_ms(resend_count: int) -> int:
    """Wait before resend ``k``: min(k x 100 ms, 60 s)."""
    return min(resend_count * RESEND_STEP_MS, RESEND_MAX_BACKOFF_MS)


@dataclass
class PutResultProcess:
    """One issued put of a level: the CQ unit it delivers and the future of its CommitLog put."""

    level: int
    queue_offset: int
    commitlog_offset: int
    size: int
    msg_id: str | None
    future: Future | None
    status: PutStatus = PutStatus.RUNNING
    resend_count: int = 0
    resend_due_ms: int | None = None

    def poll(self) -> PutStatus:
        """Move RUNNING to SUCCESS / EXCEPTION once the future is done."""
        if self.status is PutStatus.RUNNING and self.future is not None and self.future.done():
            self.status = (PutStatus.EXCEPTION if self.future.exception() is not None
                           else PutStatus.SUCCESS)
            self.future = None
        return self.status


@dataclass
class HandleOutcome:
    """What one pass over a level's pending queue did."""

    committed: int = 0      # SUCCESS records popped
    skipped: int = 0        # SKIP records popped
    resends: int = 0        # puts issued again
    failures: int = 0       # failed puts (or unreadable resends) seen at the head
    committed_offset: int | None = None  # offset the level may now commit, if it moved


# A resend: the pending record to deliver again; returns a future of the new put, or None when
# the message cannot be read (the caller counts that).
Resend = Callable[[PutResultProcess], "Future | None"]


@dataclass
class PendingQueue:
    """The FIFO of one level's in-flight puts and the in-order commit rule above."""

    level: int
    max_resend_blocked: int = 3
    records: deque = field(default_factory=deque)

    def __len__(self) -> int:
        return len(self.records)

    def append(self, record: PutResultProcess) -> None:
        self.records.append(record)

    def head_blocks(self) -> bool:
        """The level may not issue new puts while its head has been resent too often."""
        return bool(self.records) and self.records[0].resend_count > self.max_resend_blocked

    def handle(self, now_ms: int, resend: Resend, *, stopped: bool = False,
               max_skip_resends: int | None = None) -> HandleOutcome:
        """Resolve heads in order until one is RUNNING or waiting for its resend."""
        max_skip = 2 * self.max_resend_blocked if max_skip_resends is None else max_skip_resends
        out = HandleOutcome()
        while self.records:
            head: PutResultProcess = self.records[0]
            status = head.poll()
            if status is PutStatus.RUNNING:
                break
            if status is PutStatus.SUCCESS:
                out.committed += 1
                out.committed_offset = head.queue_offset + 1
                self.records.popleft()
                continue
            if status is PutStatus.SKIP:
                out.skipped += 1
                self.records.popleft()
                continue
            # EXCEPTION
            if stopped:
                break
            if head.resend_due_ms is None:
                out.failures += 1
                head.resend_count += 1
                head.resend_due_ms = now_ms + resend_backoff_ms(head.resend_count)
            if now_ms < head.resend_due_ms:
                break
            head.resend_due_ms = None
            future = resend(head)
            if future is None:
                if head.resend_count > max_skip:
                    head.status = PutStatus.SKIP
                # else stays EXCEPTION: the next pass schedules the next backoff
                continue
            out.resends += 1
            head.future = future
            head.status = PutStatus.RUNNING
        return out
