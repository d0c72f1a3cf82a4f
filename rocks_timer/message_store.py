"""``MessageStore``: the CommitLog and its ConsumeQueues behind one group-commit writer.

``put_message_async`` queues a message and returns a future. One writer thread drains the queue
in groups: it assigns queue and CommitLog offsets, encodes the group into one buffer per segment,
writes it with one call (one fdatasync per group in sync-flush mode), appends the ConsumeQueue
entries, and only then resolves the futures, so a resolved put is readable through ``pull``.
A durable put's future is resolved by the group-commit thread once the CommitLog is synced
through it (``commit_sync``).

On open, CommitLog loss is recorded first (``commitlog_loss``: ConsumeQueue entries that point
into a missing or cut segment, or past the end, name messages that were written and are gone),
then the CommitLog's torn tail is truncated (a corrupt record with valid ones after it is
reported and kept in place), ConsumeQueue entries that point past the end are dropped, and
every queue that lags the CommitLog, misses a file or holds a wrong entry is rebuilt from it
(``cq_recovery``).
"""
from __future__ import annotations

import logging
import queue
import threading
from collections import defaultdict
from concurrent.futures import Future
from pathlib import Path
from typing import Callable, Iterator

from rocks_timer.clock import Clock
from rocks_timer.commit_sync import GroupCommit
from rocks_timer.commitlog import CommitLog, LostRange
from rocks_timer.commitlog_loss import LossLedger, LossRecord, find_loss, lost_entries
from rocks_timer.config import BrokerConfig
from rocks_timer.batch_encoder import encode_batch, prepare_batch, record_size_of
from rocks_timer.consume_read import CORRUPT, PulledBatch, cut_by_bytes, entry_at, read_records
from rocks_timer.consumequeue import ENTRY_SIZE, ConsumeQueue, ConsumeQueueSet, tags_code
from rocks_timer.cq_recovery import rebuild_consume_queues
from rocks_timer.errors import (CorruptRecordError, InvalidMessageError, PutFailedError,
                                RocksTimerError, StoreClosedError)
from rocks_timer.message import Message, new_msg_id
from rocks_timer.put_results import PutResult, PutResults
from rocks_timer.record import MAX_STORED_PROPERTIES, decode_record

log = logging.getLogger(__name__)
_GROUP_MAX_MESSAGES = 4096
_GROUP_MAX_BYTES = 8 << 20


class MessageStore:
    """CommitLog + ConsumeQueues with group commit; the only writer of both."""

    def __init__(self, root: Path, config: BrokerConfig, clock: Clock):
        self.root = Path(root)
        self.config = config
        self.clock = clock
        self._levels = config.delay_levels
        self.commitlog = CommitLog(self.root / "commitlog", config.commitlog_segment_size,
                                   sync_flush=config.flush_disk_type == "sync")
        self.queues = ConsumeQueueSet(self.root / "consumequeue",
                                      config.consume_queue_entries_per_file)
        self._bytes_by_topic: dict[str, int] = defaultdict(int)
        self.corrupt_reads = 0
        self.groups_written = 0
        self.messages_written = 0
        self.messages_read = 0  # by pulls (pull_page, Broker.pull_batch)
        self._recover()
        self._next_queue_offset = {(q.topic, q.queue_id): q.max_offset for q in self.queues.all()}
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._write_lock = threading.Lock()  # one group write at a time: the writer's or a caller's
        self._queued = 0  # puts handed to the writer thread and not yet written
        self._queued_lock = threading.Lock()
        self._closed = False
        # called with the set of topics a group wrote, after their ConsumeQueues grew (pop long
        # polling wakes on it); keep listeners quick: they run on the writing thread
        self.arrival_listeners: list[Callable[[set[str]], None]] = []
        self._group_commit = GroupCommit(self.commitlog.sync_to)
        self._writer = threading.Thread(target=self._writer_loop, name="commitlog-writer",
                                        daemon=True)
        self._writer.start()

    @classmethod
    def open(cls, root: Path | str, config: BrokerConfig, clock: Clock) -> "MessageStore":
        return cls(Path(root), config, clock)

    # -- recovery -------------------------------------------------------------------------
    def _recover(self) -> None:
        self.loss = LossLedger(self.root)
        ranges, found = find_loss(self.commitlog, self.queues.all())
        if ranges or found:  # evidence first: recovery then drops the entries that name it
            self.loss.add(ranges, found)
        self.commitlog.cut_torn_tail()
        self.recovery = rebuild_consume_queues(self.commitlog, self.queues, self._levels)
        self.rebuilt_entries = self.recovery.rebuilt_entries

    def record_loss(self, ranges: list[LostRange]) -> LossRecord:
        """Record CommitLog ranges found lost by another owner (the timer engine's reconcile
        checkpoint beyond the end), naming what the ConsumeQueues still point into them."""
        found = [m for cq in self.queues.all()
                 for m in lost_entries(cq, ranges, self.commitlog.max_offset)]
        return self.loss.add(ranges, found)

    def consistent_ends(self) -> tuple[int, dict[tuple[str, int], int]]:
        """The CommitLog end and every queue's end at one instant between group writes (no
        group half written), for ``check``."""
        with self._write_lock:
            return (self.commitlog.max_offset,
                    {(q.topic, q.queue_id): q.max_offset for q in self.queues.all()})

    # -- puts -----------------------------------------------------------------------------
    def put_message_async(self, msg: Message) -> "Future[PutResult]":
        """Queue one message for the next group write; the future gives its PutResult."""
        return self._submit([msg], single=True)

    def put_messages_async(self, messages: list[Message], durable: bool = False
                           ) -> "Future[list[PutResult]]":
        """Queue messages to be written together in one group (contiguous, in order); one
        future for all of them, so a batch pays for one wake-up instead of one per message.
        ``durable``: the future is done only once the CommitLog is fdatasync'd through them
        (the deliverer's puts: synced by the group-commit thread, ``commit_sync``, while the
        writer writes the next group and the deliverer claims the next batch)."""
        messages = list(messages)
        return self._queue(messages, False, self._prepare(messages), durable)

    def put_message(self, msg: Message, timeout: float | None = 30.0) -> PutResult:
        """Store one message and wait for it (see ``put_messages``)."""
        return self._put([msg], timeout)[0]

    def put_messages(self, messages: list[Message], timeout: float | None = 30.0
                     ) -> list[PutResult]:
        """Store messages as one group and wait for them. When nothing is queued for the writer
        thread and no group is being written, the caller writes its group itself: the same
        write, without the two thread wake-ups of a hand-off (their cost: docs/BENCHMARKS.md)."""
        return self._put(list(messages), timeout)

    def _put(self, messages: list[Message], timeout: float | None) -> list[PutResult]:
        """``put_messages`` of a list this store may keep (a copy, or one made for the call)."""
        body_bytes = self._prepare(messages)
        results = self._write_if_idle(messages)
        if results is None:
            results = self.wait(self._queue(messages, False, body_bytes), timeout)
        return results

    @staticmethod
    def wait(future: Future, timeout: float | None = 30.0):
        try:
            return future.result(timeout)
        except RocksTimerError:
            raise
        except Exception as exc:  # noqa: BLE001 - anything else is a failed put
            raise PutFailedError(f"commitlog put failed: {exc}") from exc

    def _submit(self, messages: list[Message], single: bool) -> Future:
        return self._queue(messages, single, self._prepare(messages))

    def _prepare(self, messages: list[Message]) -> int:
        """Check limits, give id-less messages an id (in the list), cache property strings;
        returns the bytes of the bodies. Raises before anything is stored."""
        if self._closed:
            raise StoreClosedError("the message store is closed")
        body_bytes, clean = prepare_batch(messages, self.config.max_message_size,
                                          MAX_STORED_PROPERTIES)
        if not clean:
            for i, msg in enumerate(messages):
                if type(msg) is bytes:  # a prepared record, checked when it was prepared
                    continue
                self._check(msg)  # raises, naming the value and the limit
                if msg.msg_id is None:
                    messages[i] = msg.with_properties({"UNIQ_KEY": new_msg_id()})
        return body_bytes

    def _queue(self, messages: list[Message], single: bool, body_bytes: int,
               durable: bool = False) -> Future:
        future: Future = Future()
        with self._queued_lock:
            self._queued += 1
        self._inbox.put((messages, future, single, body_bytes, durable))
        return future

    def _write_if_idle(self, messages: list[Message]) -> PutResults | None:
        """Write ``messages`` in the caller's thread if no put is queued (so none can be
        overtaken) and no group is being written; None otherwise."""
        if self._queued or not self._write_lock.acquire(blocking=False):
            return None
        try:
            if self._queued or self._closed:
                return None
            try:
                return self._append(messages)
            except Exception as exc:  # noqa: BLE001 - as the writer thread reports it
                log.error("commitlog write of %d messages failed: %s", len(messages), exc)
                raise PutFailedError(f"commitlog write failed: {exc}") from exc
        finally:
            self._write_lock.release()

    def _check(self, msg: Message) -> None:
        if len(msg.body) > self.config.max_message_size:
            raise InvalidMessageError(f"body of {len(msg.body)} bytes exceeds max_message_size "
                                      f"{self.config.max_message_size}")
        if len(msg.encoded_properties) > MAX_STORED_PROPERTIES:
            raise InvalidMessageError(f"properties of {len(msg.encoded_properties)} bytes exceed "
                                      f"the limit of {MAX_STORED_PROPERTIES} bytes")

    def _writer_loop(self) -> None:
        """Drain the inbox into groups of at most _GROUP_MAX_MESSAGES messages or about
        _GROUP_MAX_BYTES of bodies, and write each group with one call per segment."""
        stop = False
        while not stop:
            item = self._inbox.get()
            if item is None:
                return
            group, count, size = [item], len(item[0]), item[3]
            while count < _GROUP_MAX_MESSAGES and size < _GROUP_MAX_BYTES:
                try:
                    nxt = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                group.append(nxt)
                count += len(nxt[0])
                size += nxt[3]
            self._write_group(group)

    def _write_group(self, group: list[tuple[list[Message], Future, bool, int, bool]]) -> None:
        live = [item for item in group if item[1].set_running_or_notify_cancel()]
        try:
            with self._write_lock:
                results = self._append([m for messages, *_ in live for m in messages])
        except Exception as exc:  # noqa: BLE001 - fail the group, keep the writer alive
            log.error("commitlog write of %d puts failed: %s", len(live), exc)
            self._written(len(group))
            for _, future, *_ in live:
                future.set_exception(PutFailedError(f"commitlog write failed: {exc}"))
            return
        self._written(len(group))
        at, durable = 0, []
        for messages, future, single, _, wants_sync in live:
            result = results[at] if single else results[at:at + len(messages)]
            at += len(messages)
            if wants_sync:
                durable.append((future, result))
            else:
                future.set_result(result)
        if durable:  # resolved once synced, on the group-commit thread (commit_sync.py)
            self._group_commit.submit(results.end_offset, durable)

    def _written(self, puts: int) -> None:
        with self._queued_lock:
            self._queued -= puts

    def _append(self, messages: list[Message]) -> PutResults:
        """Encode and write one group, one write per segment it touches; queue offsets advance
        and ConsumeQueues grow only once every write succeeded."""
        store_ms = self.clock.now_ms()
        levels = self._levels

        def schedule_tags(msg: Message) -> int:  # a level message's tags code: its deliver time
            return tags_code(msg.topic, msg.properties, store_ms, levels)

        commitlog, assigned, batches, i = self.commitlog, {}, [], 0
        while i < len(messages):
            start = commitlog.position_for(record_size_of(messages[i]))
            batch = encode_batch(messages, i, start, commitlog.segment_limit(), store_ms,
                                 assigned, self._queue_offset, schedule_tags)
            if batch.count == 0:
                raise ValueError(f"a record of {record_size_of(messages[i])} bytes does "
                                 f"not fit in a CommitLog segment of {commitlog.segment_size}")
            commitlog.write(start, batch.data, store_ms)
            batches.append(batch)
            i += batch.count
        self._next_queue_offset.update(assigned)
        for batch in batches:
            for run in batch.queues:
                self.queues.get_or_create(*run.key).append_packed(run.entries,
                                                                  run.first_queue_offset)
                self._bytes_by_topic[run.key[0]] += run.record_bytes
        meta = batches[0].meta if len(batches) == 1 else b"".join(b.meta for b in batches)
        if self.arrival_listeners:
            topics = {run.key[0] for batch in batches for run in batch.queues}
            for listener in self.arrival_listeners:
                listener(topics)
        self.groups_written += 1
        self.messages_written += len(messages)
        return PutResults(messages, meta, store_ms)

    def _queue_offset(self, key: tuple[str, int]) -> int:
        """The next offset of a queue the current group has not touched yet."""
        offset = self._next_queue_offset.get(key)
        return self.queues.get_or_create(*key).max_offset if offset is None else offset

    # -- reads ----------------------------------------------------------------------------
    def get_message(self, commitlog_offset: int, size: int | None = None) -> Message:
        return decode_record(self.commitlog.read(commitlog_offset, size), commitlog_offset)

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get(topic, queue_id)

    def pull(self, topic: str, queue_id: int = 0, offset: int = 0, max_messages: int = 32
             ) -> list[Message]:
        return self.pull_page(topic, queue_id, offset, max_messages)[0]

    def pull_page(self, topic: str, queue_id: int = 0, offset: int = 0, max_messages: int = 32
                  ) -> tuple[list[Message], int]:
        """Messages from ``offset`` and the queue offset to pull from next: past every entry
        looked at, including corrupt (reported, skipped) and expired ones, so a consumer never
        stalls on a record that cannot be read."""
        batch = self.read_batch(topic, queue_id, offset, max_messages)
        return batch.messages(), batch.next_offset

    def read_batch(self, topic: str, queue_id: int = 0, offset: int = 0,
                   max_messages: int = 32, max_bytes: int | None = None, what: str = "pull"
                   ) -> PulledBatch:
        """A page of ``topic``/``queue_id`` from ``offset`` as one buffer (``consume_read``):
        at most ``max_messages`` entries, cut where their records pass ``max_bytes`` (at least
        one). Entries whose record expired with its segment are skipped; corrupt ones are
        counted, logged (``what`` names the reader) and skipped."""
        cq = self.queues.get(topic, queue_id)
        if cq is None or max_messages <= 0:
            return PulledBatch(topic, queue_id, offset, offset)
        first, entries = cq.page(offset, max_messages)
        if max_bytes is not None:
            entries = cut_by_bytes(entries, max_bytes)
        if not entries:
            return PulledBatch(topic, queue_id, first, first)
        # after the page: every record its entries point to is written (the writer appends
        # the ConsumeQueue entries after the CommitLog write)
        segments = self.commitlog.segments()
        blob, index, problems = read_records(entries, [s.start for s in segments],
                                             [s.fd for s in segments],
                                             [s.written for s in segments])
        for i, code in problems:
            if code == CORRUPT:
                self._report_corrupt(topic, queue_id, first + i, *entry_at(entries, i), what)
        batch = PulledBatch(topic, queue_id, first, first + len(entries) // ENTRY_SIZE, blob,
                            index)
        if what == "pull":  # pops are counted by the pop service (metrics add the two)
            self.messages_read += len(batch)
        return batch

    def _report_corrupt(self, topic: str, queue_id: int, queue_offset: int,
                        commitlog_offset: int, size: int, what: str) -> None:
        """Count and log a record a page could not read, with the reason ``get_message``
        gives (read again: the rare path)."""
        self.corrupt_reads += 1
        try:
            self.get_message(commitlog_offset, size)
            reason = f"record at commitlog offset {commitlog_offset} could not be read"
        except (CorruptRecordError, KeyError, OSError) as exc:
            reason = str(exc)
        log.error("%s %s/%d offset %d: %s", what, topic, queue_id, queue_offset, reason)

    def iter_messages(self, from_offset: int = 0) -> Iterator[Message]:
        for raw in self.commitlog.iter_raw(from_offset):
            try:
                yield decode_record(raw.data, raw.offset)
            except CorruptRecordError as exc:
                self.corrupt_reads += 1
                log.error("commitlog scan: %s", exc)

    @property
    def min_offset(self) -> int:
        return self.commitlog.min_offset

    @property
    def max_offset(self) -> int:
        return self.commitlog.max_offset

    def bytes_written_by_topic(self) -> dict[str, int]:
        return dict(self._bytes_by_topic)

    # -- maintenance ----------------------------------------------------------------------
    def delete_expired(self, now_ms: int) -> int:
        """Retention: drop CommitLog segments older than file_reserved_hours, then their index."""
        removed = self.commitlog.delete_expired(now_ms, self.config.file_reserved_hours * 3_600_000)
        if removed:
            floor = self.commitlog.min_offset
            for cq in self.queues.all():
                cq.delete_expired(floor)
        return removed

    def stats(self) -> dict:
        return {"min_offset": self.min_offset, "max_offset": self.max_offset,
                "segments": len(self.commitlog.segments()),
                "commitlog_bytes": self.commitlog.bytes_written,
                "consumequeue_bytes": self.queues.bytes_written,
                "bytes_by_topic": self.bytes_written_by_topic(),
                "messages_written": self.messages_written, "groups_written": self.groups_written,
                "messages_read": self.messages_read,
                "corrupt_reads": self.corrupt_reads,
                "truncated_bytes": self.commitlog.truncated_bytes,
                "corrupt_regions": [d.describe() for d in self.commitlog.damage[:20]],
                "corrupt_region_count": len(self.commitlog.damage),
                "short_segments": list(self.commitlog.short_segments),
                "missing_segments": list(self.commitlog.missing_segments),
                "recovery": self.recovery.as_dict(),
                "lost": self._loss_figures(),
                "synced_offset": self.commitlog.synced_offset, "syncs": self.commitlog.syncs}

    def _loss_figures(self) -> dict:
        try:
            return self.loss.load().as_dict(limit=20)
        except CorruptRecordError as exc:
            return {"error": str(exc)}

    def sync(self, offset: int | None = None) -> bool:
        """fdatasync the CommitLog up to ``offset`` (default: everything written); False when it
        was on disk already. ConsumeQueues are not synced here: they are rebuilt from the
        CommitLog on open wherever they lag."""
        return self.commitlog.sync_to(self.commitlog.max_offset if offset is None else offset)

    def flush(self) -> None:
        self.commitlog.flush()
        for cq in self.queues.all():
            cq.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._inbox.put(None)
        self._writer.join()
        self._group_commit.close()
        with self._write_lock:  # a caller's write in progress finishes first
            self.flush()
            self.commitlog.close()
            self.queues.close()
