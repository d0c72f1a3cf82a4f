"""``MemoryTimerStore``: the reference model of the ``TimerStore`` contract.

Pending messages live in a dict keyed by the encoded timer key, with a heap of keys for due-order
claims. Nothing is durable. Every other engine must deliver what this one delivers, given the same
trace (the seeded trace test checks it).
"""
from __future__ import annotations

import heapq
import threading
from typing import Iterable, Sequence

from rocks_timer.errors import InvalidMessageError
from rocks_timer.message import TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS
from rocks_timer.timer.handles import decode_handle, encode_handle
from rocks_timer.timer.histogram import count_in_memory
from rocks_timer.timer.keys import decode_key, encode_key, key_index_prefix
from rocks_timer.timer.store import (DueRecord, KeyCancel, PendingEntry, Rescheduled, ScanPage,
                                     Scheduled, StoreStats, TimerKey, TimerRecord, TimerStore)


class MemoryTimerStore(TimerStore):
    """Pending messages in memory, delivered in key order, never early."""

    name = "memory"
    exactly_once = True
    forgets_on_complete = False  # nothing it holds survives a restart anyway

    def __init__(self) -> None:
        self._records: dict[bytes, TimerRecord] = {}
        self._heap: list[bytes] = []
        self._in_flight: set[bytes] = set()
        self._low_watermark_ms = 0
        self._lock = threading.Lock()
        self.delivered = 0
        self.cancelled = 0

    def schedule(self, records: Sequence[TimerRecord], now_ms: int) -> list[Scheduled]:
        result = []
        with self._lock:
            for record in records:
                msg = record.message
                if not msg.msg_id:
                    raise InvalidMessageError("a timer message needs a msg_id")
                due_ms = max(record.due_ms, self._low_watermark_ms)
                raw = encode_key(TimerKey(due_ms, msg.topic, msg.msg_id))
                if raw not in self._records:
                    heapq.heappush(self._heap, raw)
                self._records[raw] = TimerRecord(due_ms, msg)
                result.append(Scheduled(encode_handle(msg.topic, due_ms, msg.msg_id), due_ms))
        return result

    def cancel(self, handle: str, now_ms: int) -> bool:
        h = decode_handle(handle)
        raw = encode_key(TimerKey(h.due_ms, h.topic, h.msg_id))
        with self._lock:
            if raw in self._in_flight or raw not in self._records:
                return False
            del self._records[raw]  # its heap entry is skipped lazily
            self.cancelled += 1
            return True

    def scan(self, *, from_ms: int | None = None, to_ms: int | None = None,
             topic: str | None = None, limit: int = 100, after: str | None = None) -> ScanPage:
        with self._lock:
            keys = sorted(self._records)
            records = dict(self._records)
        start = b""
        if after is not None:
            h = decode_handle(after)
            start = encode_key(TimerKey(h.due_ms, h.topic, h.msg_id)) + b"\x00"
        page = []
        for raw in keys:
            if raw < start:
                continue
            record = records[raw]
            if from_ms is not None and record.due_ms < from_ms:
                continue
            if to_ms is not None and record.due_ms > to_ms:
                break
            if topic is not None and record.message.topic != topic:
                continue
            if len(page) == limit:
                return ScanPage(page, next_after=page[-1].handle)
            msg = record.message
            page.append(PendingEntry(record.due_ms, msg.topic, msg.msg_id,
                                     encode_handle(msg.topic, record.due_ms, msg.msg_id),
                                     len(msg.body), msg.queue_id or 0, msg.tags))
        return ScanPage(page, next_after=None)

    # -- by business key, reschedule, due counts ------------------------------------------------
    def _keyed(self, topic: str, key: str) -> list[bytes]:
        """Keys of the pending messages of ``topic`` whose KEYS hold ``key``, in key order
        (lock held)."""
        key_index_prefix(topic, key)  # the RocksDB index's validation of topic and key
        return sorted(raw for raw, r in self._records.items()
                      if r.message.topic == topic and key in r.message.keys)

    def find(self, topic: str, key: str, *, limit: int = 100,
             after: str | None = None) -> ScanPage:
        start = b""
        if after is not None:
            h = decode_handle(after)
            start = encode_key(TimerKey(h.due_ms, h.topic, h.msg_id)) + b"\x00"
        with self._lock:
            raws = [raw for raw in self._keyed(topic, key) if raw >= start]
            records = [self._records[raw] for raw in raws]
        if limit <= 0:
            return ScanPage([], None)
        page = [PendingEntry(r.due_ms, r.message.topic, r.message.msg_id,
                             encode_handle(r.message.topic, r.due_ms, r.message.msg_id),
                             len(r.message.body), r.message.queue_id or 0, r.message.tags)
                for r in records[:limit]]
        return ScanPage(page, page[-1].handle if len(records) > limit else None)

    def cancel_by_key(self, topic: str, key: str, now_ms: int) -> KeyCancel:
        with self._lock:
            handles = []
            for raw in self._keyed(topic, key):
                if raw in self._in_flight:
                    continue
                record = self._records.pop(raw)
                self.cancelled += 1
                handles.append(encode_handle(record.message.topic, record.due_ms,
                                             record.message.msg_id))
            return KeyCancel(handles)

    def reschedule(self, handles, due_ms: int, now_ms: int) -> list[Rescheduled]:
        targets = []
        for handle in handles:
            h = decode_handle(handle)
            targets.append((handle, encode_key(TimerKey(h.due_ms, h.topic, h.msg_id))))
        with self._lock:
            return self._reschedule(targets, due_ms)

    def reschedule_by_key(self, topic: str, key: str, due_ms: int, now_ms: int
                          ) -> list[Rescheduled]:
        with self._lock:
            targets = []
            for raw in self._keyed(topic, key):
                k = decode_key(raw)
                targets.append((encode_handle(k.topic, k.due_ms, k.msg_id), raw))
            return self._reschedule(targets, due_ms)

    def _reschedule(self, targets, due_ms: int) -> list[Rescheduled]:
        new_due = max(due_ms, self._low_watermark_ms)
        results = []
        for asked, raw in targets:
            k = decode_key(raw)
            if raw in self._in_flight:
                results.append(Rescheduled("in_flight", k.topic, k.msg_id, asked, None, None))
                continue
            record = self._records.get(raw)
            if record is None:
                results.append(Rescheduled("not_found", k.topic, k.msg_id, asked, None, None))
                continue
            new_raw = encode_key(TimerKey(new_due, k.topic, k.msg_id))
            if new_raw != raw:
                del self._records[raw]
                message = record.message.with_properties(
                    {TIMER_DELIVER_MS: str(due_ms)}, remove=(TIMER_DELAY_SEC, TIMER_DELAY_MS))
                self._records[new_raw] = TimerRecord(new_due, message)
                heapq.heappush(self._heap, new_raw)
            results.append(Rescheduled("rescheduled", k.topic, k.msg_id, asked,
                                       encode_handle(k.topic, new_due, k.msg_id), new_due))
        return results

    def count_due(self, ranges) -> list[int]:
        with self._lock:
            dues = [r.due_ms for r in self._records.values()]
        return count_in_memory(dues, ranges)

    def claim_due(self, now_ms: int, max_messages: int, max_bytes: int) -> list[DueRecord]:
        claimed: list[DueRecord] = []
        taken_bytes = 0
        with self._lock:
            while self._heap and len(claimed) < max_messages and taken_bytes < max_bytes:
                raw = self._heap[0]
                record = self._records.get(raw)
                if record is None or raw in self._in_flight:  # cancelled, or a stale duplicate
                    heapq.heappop(self._heap)
                    continue
                if record.due_ms > now_ms:
                    break
                heapq.heappop(self._heap)
                self._in_flight.add(raw)
                self._low_watermark_ms = max(self._low_watermark_ms, record.due_ms + 1)
                key = decode_key(raw)
                claimed.append(DueRecord(key, record.message,
                                         encode_handle(key.topic, key.due_ms, key.msg_id),
                                         len(record.message.body), raw))
                taken_bytes += len(record.message.body)
        return claimed

    def complete(self, records: Sequence[DueRecord], commitlog_end: int | None) -> None:
        with self._lock:
            for record in records:
                self._in_flight.discard(record.token)
                if self._records.pop(record.token, None) is not None:
                    self.delivered += 1

    def reconcile_from(self) -> int | None:
        return None

    def reconcile(self, keys: Iterable[TimerKey], commitlog_end: int) -> int:
        return 0

    def maintain(self, now_ms: int) -> None:
        return None

    def next_due_ms(self) -> int | None:
        with self._lock:
            due = [r.due_ms for k, r in self._records.items() if k not in self._in_flight]
            return min(due) if due else None

    def pending_count(self) -> int:
        with self._lock:
            return len(self._records)

    def stats(self) -> StoreStats:
        with self._lock:
            return StoreStats("memory", len(self._records), {},
                              {"in_flight": len(self._in_flight), "delivered": self.delivered,
                               "cancelled": self.cancelled})

    def close(self) -> None:
        return None
