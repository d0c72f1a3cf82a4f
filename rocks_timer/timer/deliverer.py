"""The deliverer: moves due records from a ``TimerStore`` into the CommitLog.

Each ``step(now_ms)`` harvests finished puts, completes the ones that landed (the store deletes
their keys and advances its cursor in one atomic write), re-issues failed puts whose backoff has
passed (100 ms steps up to ``timer_put_retry_max_backoff_ms``; a failed record stays in flight
so the cursor never passes it), and claims new due records up to the budget and the in-flight
limit, issuing asynchronous puts. It knows nothing of RocksDB or of the wheel's files.

Every delivered copy carries ``TIMER_OUT_MS`` (its key's due time) and ``TIMER_DEQUEUE_MS`` (when
it was claimed; a retried put keeps the copy it was first given);
``reconcile()`` uses the first to drop keys whose delivery landed just before a crash.
"""
from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Sequence

from rocks_timer.clock import Clock
from rocks_timer.config import BrokerConfig
from rocks_timer.errors import RocksTimerError
from rocks_timer.health import DELIVER_PUT, Health
from rocks_timer.message import TIMER_OUT_MS, UNIQ_KEY, is_system_topic
from rocks_timer.message_store import MessageStore
from rocks_timer.timer.delivery import delivery_copy_py
from rocks_timer.timer.store import (DueRecord, TimerKey, TimerStore, is_column_claim,
                                     join_records)
from rocks_timer.timer.tally import DeliveryTally

log = logging.getLogger(__name__)
_RECONCILE_CHUNK = 10_000


@dataclass(slots=True)
class _Put:
    """One claimed batch and its CommitLog put (one future for the whole batch)."""

    records: Sequence[DueRecord]
    future: Future | None
    attempts: int = 1
    retry_at_ms: int = 0


class Deliverer:
    """Due records → CommitLog, with bounded in-flight puts and retries that never drop."""

    def __init__(self, store: TimerStore, messages: MessageStore, config: BrokerConfig,
                 clock: Clock, health: Health | None = None):
        self.store = store
        self.health = health or Health(clock, config.failure_log_interval_ms,
                                       config.service_retry_max_backoff_ms)
        self.messages = messages
        self.config = config
        self.clock = clock
        self._puts: deque[_Put] = deque()
        self.delivered = 0
        self.failed_puts = 0
        self.last_lateness_ms = 0
        self.tally = DeliveryTally()  # lateness, early and per-topic counts, per batch
        # True for an engine whose ``complete`` durably deletes (RocksDB); the wheel forgets at
        # its checkpoint, which syncs the CommitLog first; the memory store forgets everything
        self._forgets_on_complete = store.forgets_on_complete
        # the CommitLog's writer syncs those puts itself, beside the next claim; ``_harvest``
        # still syncs (a no-op then) for any other MessageStore-like object it is given
        self._durable_puts = self._forgets_on_complete and isinstance(messages, MessageStore)

    # -- restart reconciliation ----------------------------------------------------------
    def reconcile(self) -> int:
        """Drop keys whose delivered copy is already in the CommitLog (crash after the put,
        before the delete). Returns how many keys it dropped."""
        start = self.store.reconcile_from()
        end = self.messages.max_offset
        if start is None:
            self.store.reconcile([], end)  # first open: nothing before here was delivered
            return 0
        dropped, keys = 0, []
        for msg in self.messages.iter_messages(start):
            out = msg.properties.get(TIMER_OUT_MS)
            if out is None or is_system_topic(msg.topic) or UNIQ_KEY not in msg.properties:
                continue
            try:
                keys.append(TimerKey(int(out), msg.topic, msg.msg_id))
            except ValueError:
                continue
            if len(keys) >= _RECONCILE_CHUNK:
                dropped += self.store.reconcile(keys, msg.commitlog_offset)
                keys = []
        dropped += self.store.reconcile(keys, end)
        if dropped:
            log.warning("reconciled %d deliveries that landed before a crash", dropped)
        return dropped

    # -- one step --------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return sum(len(p.records) for p in self._puts)

    def step(self, now_ms: int, wait_for_puts: bool = True) -> int:
        """One delivery step at ``now_ms``; returns how many deliveries it completed."""
        done = self._harvest(now_ms)
        self._retry(now_ms)
        room = self.config.timer_max_in_flight - self.in_flight
        if room > 0:
            records = self.store.claim_due(now_ms, min(room, self.config.timer_deliver_batch),
                                           self.config.timer_deliver_max_bytes)
            if records:
                self._puts.append(_Put(records, self._issue(records, now_ms)))
        if wait_for_puts and self._puts:
            wait([p.future for p in self._puts if p.future is not None], timeout=30)
            done += self._harvest(now_ms)
        return done

    def wait_oldest(self, timeout_s: float) -> None:
        """Block until the oldest put in flight finishes (pipelined mode: the background loop
        claims the next batch while the writer writes this one, and waits here when it has
        nothing else to do)."""
        for put in self._puts:
            if put.future is not None:
                wait([put.future], timeout=timeout_s)
                return

    def _issue(self, records: Sequence[DueRecord], now_ms: int) -> Future | None:
        if is_column_claim(records):  # the claim built its copies in bulk
            copies = records.copies
        else:
            copies = []
            for record in records:
                copy = record.copy
                if copy is None:
                    copy = record.copy = delivery_copy_py(record.message, record.key.due_ms,
                                                          now_ms)
                copies.append(copy)
        try:
            if self._durable_puts:
                return self.messages.put_messages_async(copies, durable=True)
            return self.messages.put_messages_async(copies)
        except RocksTimerError as exc:
            self.health.failed(DELIVER_PUT, exc)  # retried by ``_retry``, never dropped
            return None

    def _harvest(self, now_ms: int) -> int:
        """Complete the landed puts at the head of the issue order.

        Puts reach the writer in issue order, so stopping at the first unfinished one keeps
        every completed delivery before every landed-but-unharvested one: ``end`` (the
        reconcile offset) never passes a delivery whose key is still in the store.
        """
        landed: list[Sequence[DueRecord]] = []
        finished: set[int] = set()
        end = None
        for put in self._puts:
            if put.future is None:
                continue  # waiting for its retry: nothing of it is in flight
            if not put.future.done():
                break
            exc = put.future.exception()
            if exc is None:
                results = put.future.result()
                landed.append(put.records)
                finished.add(id(put))
                end = max(end or 0, results.end_offset)  # written contiguously, in order
                self.last_lateness_ms = now_ms - put.records[-1].key.due_ms
                if results:
                    self.tally.add(put.records, results[-1].store_ms)
            else:
                self.failed_puts += 1
                backoff = min(100 * put.attempts, self.config.timer_put_retry_max_backoff_ms)
                self.health.failed(DELIVER_PUT, exc)  # logged once, then once per interval
                put.future, put.retry_at_ms = None, now_ms + backoff
                put.attempts += 1
        if landed:
            self.health.recovered(DELIVER_PUT)
            if end is not None and self._forgets_on_complete:
                # ARCHITECTURE §4: a store never forgets a message before its delivered copy is on
                # disk (a no-op in sync mode, where every group was fdatasync'd as written)
                self.messages.sync(end)
            self.store.complete(join_records(landed), end)
            self._puts = deque(p for p in self._puts if id(p) not in finished)
            count = sum(len(records) for records in landed)
            self.delivered += count
            return count
        return 0

    def _retry(self, now_ms: int) -> None:
        """Re-issue failed puts whose backoff has passed, moving them to the back of the issue
        order (see ``_harvest``)."""
        due = [p for p in self._puts if p.future is None and p.retry_at_ms <= now_ms]
        if not due:
            return
        self._puts = deque(p for p in self._puts if not (p.future is None
                                                         and p.retry_at_ms <= now_ms))
        for put in due:
            put.future = self._issue(put.records, now_ms)
            if put.future is None:
                put.retry_at_ms = now_ms + min(100 * put.attempts,
                                               self.config.timer_put_retry_max_backoff_ms)
                put.attempts += 1
            self._puts.append(put)
