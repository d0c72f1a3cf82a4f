"""``PopService``: RocketMQ's pop consumption on top of the broker's CommitLog and timer engine.

A pop takes messages of a topic for a consumer group, across all the topic's queues (its retry
topic first), and makes each one invisible to the group: for every popped message it parks an
**invisibility record** in the broker's timer engine, due when the invisible time ends. The record
*is* the next delivery: a copy of the message addressed to the group's retry topic
``%RETRY%<group>_<topic>`` with ``RECONSUME_TIME`` = the attempts so far (or, once the attempts
reach the group's maximum, to its dead-letter topic ``%DLQ%<group>``). So:

- ack = cancel the record (the timer engine's definite cancel: False means it already fired);
- change invisible duration = park a new record, then cancel the old one (a crash in between
  can duplicate a delivery, never lose one), and hand out a new receipt handle;
- no ack in time = the deliverer puts the copy on the retry topic, where the group pops it again
  with ``delivery_attempt`` + 1 (RocketMQ's pop revive, which also rides on timer messages).

The records are durable exactly as timer messages are (they are timer messages), so invisible
messages survive ``kill -9``. Offsets are written after the records (see :mod:`.offsets`).
Everything goes through the Broker's public methods (``park``/``unpark`` count the records and
wake the timer loop; ``pull_batch``, ``message_at``, ``queue_ranges``, ``watch_arrivals``).
"""
from __future__ import annotations

import itertools
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from rocks_timer.errors import CorruptRecordError, InvalidHandleError, RocksTimerError
from rocks_timer.message import (TIMER_DEQUEUE_MS, TIMER_ENQUEUE_MS, TIMER_OUT_MS,
                                 TIMER_ROLL_TIMES, Message)
from rocks_timer.pop.handles import ReceiptHandle, dlq_topic, retry_topic
from rocks_timer.pop.offsets import PopOffsets
from rocks_timer.record import MAX_STORED_PROPERTIES
from rocks_timer.timer.store import TimerRecord

log = logging.getLogger(__name__)

RETRY_TOPIC = "RETRY_TOPIC"          # the topic a retry copy was first consumed from
RECONSUME_TIME = "RECONSUME_TIME"    # deliveries so far
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3_600_000
DEFAULT_MAX_ATTEMPTS = 17            # RocketMQ: maxReconsumeTimes 16, plus the first delivery
SCAN_BUDGET = 1_024                  # entries looked at per queue and pop (tag filter misses)
_DROPPED = (TIMER_OUT_MS, TIMER_DEQUEUE_MS, TIMER_ENQUEUE_MS, TIMER_ROLL_TIMES)


class ReceiptExpiredError(InvalidHandleError):
    """The receipt handle's invisible time is over (the message was or is being redelivered),
    or it was already acked."""


class InvalidInvisibleTimeError(RocksTimerError, ValueError):
    """An invisible duration outside what the broker accepts."""


@dataclass(frozen=True, slots=True)
class Popped:
    """One popped message: ``message`` as stored (its topic may be the retry topic), the topic
    the group consumes, which delivery this is, and the receipt handle to ack it with."""

    message: Message
    topic: str
    delivery_attempt: int
    receipt_handle: str
    invisible_ms: int


class PopService:
    """Pop, ack and change-invisible-duration over one open Broker."""

    def __init__(self, broker, data_dir: Path | str | None = None):
        self.broker = broker
        self.offsets = PopOffsets(data_dir or broker.path,
                                  sync=broker.config.flush_disk_type == "sync")
        self._lock = threading.Lock()
        self._watchers: dict[int, tuple[frozenset[str], Callable[[], None]]] = {}
        self._watch_lock = threading.Lock()
        self._ids = itertools.count()
        self.popped = self.acked = self.expired_acks = self.callback_errors = 0
        broker.watch_arrivals(self._arrived)

    def close(self) -> None:
        self.broker.unwatch_arrivals(self._arrived)

    # -- long polling -------------------------------------------------------------------------
    def watched_topics(self, group: str, topic: str) -> frozenset[str]:
        return frozenset((topic, retry_topic(group, topic)))

    def watch(self, topics: Iterable[str], callback: Callable[[], None]) -> int:
        """Call ``callback`` (on the writing thread) whenever a message lands on ``topics``."""
        token = next(self._ids)
        with self._watch_lock:
            self._watchers[token] = (frozenset(topics), callback)
        return token

    def unwatch(self, token: int) -> None:
        with self._watch_lock:
            self._watchers.pop(token, None)

    def _arrived(self, topics: set[str]) -> None:
        if not self._watchers:
            return
        with self._watch_lock:
            watchers = list(self._watchers.values())
        for watched, callback in watchers:
            if watched.isdisjoint(topics):
                continue
            try:
                callback()
            except Exception:  # noqa: BLE001 - never break the CommitLog writer
                self.callback_errors += 1
                log.exception("pop arrival callback failed")

    # -- pop ----------------------------------------------------------------------------------
    def check_invisible(self, invisible_ms: int) -> int:
        top = min(MAX_INVISIBLE_MS, self.broker.config.max_delay_ms)
        if not MIN_INVISIBLE_MS <= invisible_ms <= top:
            raise InvalidInvisibleTimeError(f"invisible duration {invisible_ms} ms is outside "
                                            f"{MIN_INVISIBLE_MS}..{top} ms")
        return invisible_ms

    def pop(self, group: str, topic: str, max_messages: int, invisible_ms: int,
            tags: frozenset[str] | None = None,
            max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> list[Popped]:
        """Up to ``max_messages`` messages of ``topic`` (retry copies first) whose tag is in
        ``tags`` (None: any), each invisible to ``group`` for ``invisible_ms``."""
        self.check_invisible(invisible_ms)
        with self._lock:
            taken: list[tuple[Message, int]] = []
            updates: dict[tuple[str, str, int], int] = {}
            for source, queue_id in self._queues(group, topic):
                if len(taken) >= max_messages:
                    break
                self._take(group, source, queue_id, tags, max_messages - len(taken), taken,
                           updates)
            if not taken:
                self.offsets.commit(updates)  # skipped (filtered or expired) entries
                return []
            now = self.broker.clock.now_ms()
            due_at = now + invisible_ms
            targets = self._targets(group, topic)
            records, seen = [], set()
            for msg, _ in taken:
                due = due_at
                target = self._target(targets, msg, max_attempts)
                while (due, target, msg.msg_id) in seen:
                    due += 1  # two copies of one id: keep their keys apart
                seen.add((due, target, msg.msg_id))
                records.append(TimerRecord(due, self._revive_copy(topic, msg, target)))
            scheduled = self.broker.park(records, now)
            self.offsets.commit(updates)
            self.popped += len(taken)
        return [Popped(msg, topic, msg.reconsume_times + 1,
                       ReceiptHandle(group, topic, msg.commitlog_offset or 0, size,
                                     s.handle).encode(), invisible_ms)
                for (msg, size), s in zip(taken, scheduled)]

    def _queues(self, group: str, topic: str) -> list[tuple[str, int]]:
        retry = retry_topic(group, topic)
        found = [tq for tq in self.broker.queue_ranges() if tq[0] in (topic, retry)]
        return sorted(found, key=lambda tq: (tq[0] != retry, tq[1]))

    def _take(self, group: str, topic: str, queue_id: int, tags: frozenset[str] | None,
              want: int, taken: list[tuple[Message, int]], updates: dict) -> None:
        first = self.broker.min_offset(topic, queue_id)
        end = self.broker.max_offset(topic, queue_id)
        offset = self.offsets.get(group, topic, queue_id)
        offset = first if offset is None else max(offset, first)
        start, budget = offset, SCAN_BUDGET
        while want > 0 and budget > 0 and offset < end:
            # one read of the page into one buffer (consume_read); a Message only for what
            # passes the tag filter's look
            batch = self.broker.pull_batch(topic, queue_id, offset, min(budget, max(want, 32)),
                                           what="pop")
            if batch.next_offset == batch.offset:
                break
            budget -= batch.next_offset - offset
            offset = batch.next_offset
            for j, view in enumerate(batch):
                if tags is not None and view.tags not in tags:
                    continue
                taken.append((view.to_message(), batch.size(j)))
                want -= 1
                if want == 0:
                    offset = batch.entry(j) + 1
                    break
        if offset != start:
            updates[(group, topic, queue_id)] = offset

    @staticmethod
    def _targets(group: str, topic: str) -> tuple[str, str]:
        return retry_topic(group, topic), dlq_topic(group)

    @staticmethod
    def _target(targets: tuple[str, str], msg: Message, max_attempts: int) -> str:
        """Where the next delivery of ``msg`` goes: the retry topic of ``targets`` (retry,
        dead-letter), or the dead-letter topic once this delivery is the last attempt."""
        return targets[1] if msg.reconsume_times + 1 >= max_attempts else targets[0]

    @staticmethod
    def _revive_copy(topic: str, msg: Message, target: str) -> Message:
        attempt = msg.reconsume_times + 1
        props = dict(msg.properties)
        for name in _DROPPED:
            props.pop(name, None)
        props[RETRY_TOPIC] = topic
        props[RECONSUME_TIME] = str(attempt)
        return Message(topic=target, body=msg.body, flag=msg.flag, properties=props,
                       queue_id=0, born_ms=msg.born_ms, reconsume_times=attempt)

    # -- ack and change invisible duration ------------------------------------------------------
    def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        """Forget a popped message. Raises ReceiptExpiredError if its invisible time is over
        (it was or is being delivered again) or it was acked already."""
        receipt, timer = ReceiptHandle.parse(receipt_handle)
        receipt.check(group, topic, timer)
        # the handle as the client gave it: every engine decodes a handle to the key it names
        # (a re-encoded copy would name the same key)
        if not self.broker.unpark(receipt.timer_handle):
            self.expired_acks += 1
            raise ReceiptExpiredError("receipt handle expired: the message is being delivered "
                                      "again, or was acked already")
        self.acked += 1

    def change_invisible(self, group: str, topic: str, receipt_handle: str, invisible_ms: int,
                         max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> str:
        """Make a popped message invisible for ``invisible_ms`` from now; returns the new
        receipt handle (the old one stops working)."""
        self.check_invisible(invisible_ms)
        receipt = ReceiptHandle.decode(receipt_handle)
        old = receipt.check(group, topic)
        if receipt.size > self.broker.config.max_message_size + MAX_STORED_PROPERTIES + 4096:
            raise InvalidHandleError("receipt handle names a record larger than any message")
        try:
            msg = self.broker.message_at(receipt.commitlog_offset, receipt.size)
        except (KeyError, CorruptRecordError, ValueError, OSError):
            raise ReceiptExpiredError("receipt handle names a message that is gone") from None
        if msg.msg_id != old.msg_id:
            raise InvalidHandleError("receipt handle does not match the stored message")
        now = self.broker.clock.now_ms()
        due = now + invisible_ms
        if due == old.due_ms:
            due += 1  # the new key must differ from the one cancelled below
        target = self._target(self._targets(group, topic), msg, max_attempts)
        [fresh] = self.broker.park([TimerRecord(due, self._revive_copy(topic, msg, target))],
                                   now)
        if not self.broker.unpark(old.encode(), now):
            self.broker.unpark(fresh.handle, now)
            raise ReceiptExpiredError("receipt handle expired: the message is being delivered "
                                      "again, or was acked already")
        return ReceiptHandle(group, topic, receipt.commitlog_offset, receipt.size,
                             fresh.handle).encode()

    def stats(self) -> dict:
        return {"popped": self.popped, "acked": self.acked, "expired_acks": self.expired_acks,
                "watchers": len(self._watchers), "callback_errors": self.callback_errors,
                "offsets": self.offsets.table()}
