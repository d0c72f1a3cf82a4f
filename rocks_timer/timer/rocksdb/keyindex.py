"""``KeyIndex``: the secondary index by business key, the due counters and the per-topic
pending counters of the RocksDB timer store.

The key index maps (topic, one of the message's KEYS, due, msg id) to nothing; its entries
live in ``meta`` under their own prefix (layout in :mod:`rocks_timer.timer.keys`), beside the
due counters (:mod:`rocks_timer.timer.rocksdb.duecount`) and the topic counters
(:mod:`rocks_timer.timer.rocksdb.topiccount`). Every operation that adds or removes a timer key
collects what it did in an :class:`IndexChanges`; the transaction stages it into **its own
WriteBatch** (:meth:`KeyIndex.stage`) and commits it after the write, so the index and the
counters are exact after any crash.

Cost for messages without keys: a schedule adds them to the counters only; a removal reads a
message's keys only when the store has ever indexed one (``KeyIndex.keyed``). A delivery knows
its message already; a cancel, reconcile or reschedule decodes the stored value (in ``vlog``,
reads its segment record) to learn which entries to drop. A quarantined value cannot be
decoded: its entries are left dangling and every reader (``find``) checks the timer key first.
"""
from __future__ import annotations

import logging
from typing import Any, TYPE_CHECKING, Callable, Iterable, Iterator

from rocksdict import ReadOptions, WriteBatch

from rocks_timer.errors import (ConfigError, CorruptRecordError, InvalidHandleError,
                                 InvalidMessageError)
from rocks_timer.timer import keys as K
from rocks_timer.timer.handles import decode_handle, encode_handle
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.claim_codec import due_second_counts
from rocks_timer.timer.rocksdb.database import Database
from rocks_timer.timer.rocksdb.duecount import DueCounters, expected_counters
from rocks_timer.timer.rocksdb.meta import pack_u64, unpack_u64
from rocks_timer.timer.rocksdb import topiccount
from rocks_timer.timer.rocksdb.topiccount import TopicCounters, expected_topics
from rocks_timer.timer.rocksdb.scan import check_iterator
from rocks_timer.timer.store import PendingEntry, ScanPage, TimerKey
from rocks_timer.timer.values import decode_value

if TYPE_CHECKING:
    from rocks_timer.message import Message

log = logging.getLogger(__name__)
CHUNK = 4_096
REBUILD_CHUNK = 10_000


class IndexChanges:
    """What one batch does to the due counters, the topic counters and the key index.
    ``emptied``: due-time intervals ``(lo_ms, hi_ms)`` whose every pending key this batch
    removes, ends excluded (a delivery's claimed spans): the counters of buckets lying wholly
    inside are cleared by range (``DueCounters.stage``). The keys added and removed are kept as
    they come and counted by topic once, in one native pass, when the batch is staged
    (:meth:`topic_deltas`); ``topics`` holds counts a caller worked out already."""

    __slots__ = ("deltas", "topics", "added_raws", "removed_raws", "puts", "deletes", "emptied")

    def __init__(self) -> None:
        self.deltas: dict[int, int] = {}
        self.topics: dict[bytes, int] = {}
        self.added_raws: list[bytes] = []
        self.removed_raws: list[bytes] = []
        self.puts: list[bytes] = []
        self.deletes: list[bytes] = []
        self.emptied: list[tuple[int, int]] = []

    def added(self, raw: bytes, keys: Iterable[str] = ()) -> None:
        due = K.key_due_ms(raw)
        self.deltas[due] = self.deltas.get(due, 0) + 1
        self.added_raws.append(raw)
        for key in keys:
            self.puts.append(K.index_entry(raw, key))

    def removed(self, raw: bytes, keys: Iterable[str] = ()) -> None:
        due = K.key_due_ms(raw)
        self.deltas[due] = self.deltas.get(due, 0) - 1
        self.removed_raws.append(raw)
        for key in keys:
            self.deletes.append(K.index_entry(raw, key))

    def removed_unkeyed(self, raws: Iterable[bytes]) -> None:
        """:meth:`removed` for many keys without index entries (a delivery batch): the keys
        counted per due second in one native pass (the counters are per second at the finest,
        ``duecount``); their topics are counted with the rest at stage time."""
        if not isinstance(raws, (list, tuple, dict)):
            raws = list(raws)
        deltas = self.deltas
        for second, n in due_second_counts(raws).items():
            due = second * 1000
            deltas[due] = deltas.get(due, 0) - n
        self.removed_raws.extend(raws)

    def removed_keyed(self, raws: list[bytes], entries: list[bytes]) -> None:
        """:meth:`removed` for many keys at once, ``entries`` their key index entries (a
        delivery batch of a keyed store, ``ClaimedBatch.index_entries``): due counts in one
        native pass, no call per key (a keyed burst's deliverer spent most of its time
        completing)."""
        deltas = self.deltas
        for second, n in due_second_counts(raws).items():
            due = second * 1000
            deltas[due] = deltas.get(due, 0) - n
        self.removed_raws.extend(raws)
        self.deletes.extend(entries)

    def topic_deltas(self) -> dict[bytes, int]:
        """topic bytes -> keys added minus keys removed, over the whole batch."""
        topics = self.topics
        if self.added_raws:
            topics = dict(topics)
            for topic, n in topiccount.topic_counts(self.added_raws).items():
                topics[topic] = topics.get(topic, 0) + n
        if self.removed_raws:
            if topics is self.topics:
                topics = dict(topics)
            for topic, n in topiccount.topic_counts(self.removed_raws).items():
                topics[topic] = topics.get(topic, 0) - n
        return topics


def message_keys(message: "Message") -> tuple[str, ...]:
    keys = message.keys
    return tuple(dict.fromkeys(keys)) if len(keys) > 1 else keys


class KeyIndex:
    """Owns the key index entries, the due counters (``due``), the per-topic pending counters
    (``topics``) and whether any entry exists (``keyed``). The transaction stages every batch's
    :class:`IndexChanges` here (:meth:`stage`, then :meth:`commit` after the write); reads and
    builds run under the store's lock, which the caller holds.

    ``enabled=False`` (a measurement baseline, ``RocksTimerStore.open(key_index=False)``):
    nothing is staged, the reads that need the index refuse, and the open removes the build
    marker so the next ordinary open rebuilds the index and the counters from the keys."""

    def __init__(self, db: Database, read_value: Callable[[bytes, bytes], bytes], where: Any,
                 enabled: bool = True) -> None:
        self._db = db
        self._read_value = read_value  # (raw key, index value) -> the stored value's bytes
        self._where = where
        self.enabled = enabled
        self.due = DueCounters(db.meta, db.meta_h)
        self.topics = TopicCounters(db.meta, db.meta_h)
        self.keyed = False  # True once the key index may hold entries

    def close(self) -> None:
        self.due.close()
        self.topics.close()

    def require(self, what: str) -> None:
        if not self.enabled:
            raise ConfigError(f"timer store {self._where} was opened without the key index "
                              f"(a measurement baseline): {what} needs it")

    # -- writes (store lock held) -----------------------------------------------------------
    def schedule_changes(self, raw_keys: list[bytes], records: list,
                         olds: dict[bytes, bytes | None], dues: list[int] | None = None
                         ) -> tuple[IndexChanges, int]:
        """What a schedule batch does to the counters and the index, and how many keys it
        adds. A key stored already (a producer's retry) keeps its count; its entries follow
        its new KEYS. The last record of a key repeated in the batch wins, as in the timer
        column family. ``dues`` (each key's due time) lets the common batch, new distinct keys
        without KEYS, be counted without a pass over the records' keys."""
        changes = IndexChanges()
        if (dues is not None and len(olds) == len(raw_keys)
                and all(old is None for old in olds.values())
                and not any([r.message.keys for r in records])):
            deltas = changes.deltas
            if len(dues) == 1:
                deltas[dues[0]] = 1
            else:
                for due in dues:
                    deltas[due] = deltas.get(due, 0) + 1
            changes.added_raws = raw_keys  # every key new and distinct: counted by topic later
            return changes, len(raw_keys)
        if len(raw_keys) == 1:
            final = {raw_keys[0]: records[0].message}
        else:
            final = dict(zip(raw_keys, (r.message for r in records)))
        added = 0
        for raw, message in final.items():
            keys = message.keys
            if len(keys) > 1:
                keys = tuple(dict.fromkeys(keys))
            old = olds[raw]
            if old is None:
                added += 1
                changes.added(raw, keys)
                continue
            old_keys = self.stored_keys(raw, old)
            if old_keys != keys:
                changes.deletes.extend(K.index_entry(raw, k) for k in old_keys)
                changes.puts.extend(K.index_entry(raw, k) for k in keys)
        return changes, added

    def stage(self, changes: IndexChanges, batch: WriteBatch) -> tuple | None:
        """Put the index entries and counters of ``changes`` into ``batch`` (deletes before
        puts: a key re-sent with the same KEYS keeps its entries). Returns what
        :meth:`commit` takes."""
        if not self.enabled:
            return None
        keys_h = self._db.meta_h
        for entry in changes.deletes:
            batch.delete(entry, keys_h)
        for entry in changes.puts:
            batch.put(entry, b"", keys_h)
        due = self.due.stage(changes.deltas, batch, changes.emptied) if changes.deltas else None
        deltas = changes.topic_deltas()
        topics = self.topics.stage(deltas, batch) if deltas else None
        return due, topics

    def stage_new(self, raw: bytes, due_ms: int, batch: WriteBatch) -> tuple | None:
        """:meth:`stage` of one new key without KEYS (the single send), for
        :meth:`commit_new`."""
        if not self.enabled:
            return None
        topic = raw[K.DUE_SIZE + 1:-K.MSG_ID_SIZE]
        return (self.due.stage_one(due_ms, batch), topic, self.topics.stage_one(topic, batch))

    def stage_removed(self, raw: bytes, batch: WriteBatch) -> tuple | None:
        """:meth:`stage` of one removed key of a store without KEYS entries (the single
        cancel: ``keyed`` is False), for :meth:`commit_new`."""
        if not self.enabled:
            return None
        topic = raw[K.DUE_SIZE + 1:-K.MSG_ID_SIZE]
        return (self.due.stage_one(K.key_due_ms(raw), batch, -1), topic,
                self.topics.stage_one(topic, batch, -1))

    def commit_new(self, staged: tuple | None) -> None:
        if staged is not None:
            due, topic, count = staged
            self.due.commit(due)
            self.topics.commit_one(topic, count)

    def stage_retired(self, entries: Iterable[bytes], batch: WriteBatch) -> None:
        """Delete index entries of set-aside rows put back (left dangling by the set-aside)."""
        keys_h = self._db.meta_h
        for entry in entries:
            batch.delete(entry, keys_h)

    def commit(self, changes: IndexChanges, staged: tuple | None) -> None:
        """After the batch is written: counters cached, and the index knows keys exist."""
        if staged is None:
            return
        due, topics = staged
        if due:
            self.due.commit(due)
        if topics:
            self.topics.commit(topics)
        if changes.puts:
            self.keyed = True

    # -- what a stored message holds ---------------------------------------------------------
    def stored_message(self, raw: bytes, value: bytes) -> "Message":
        """The message an index value holds (in ``vlog`` read from its segment record)."""
        return decode_value(raw, self._read_value(raw, value))

    def stored_keys(self, raw: bytes, value: bytes | None) -> tuple[str, ...]:
        """The KEYS of a stored message, () when the store never indexed any (no read at all)
        or when the value does not decode (its entries then dangle; readers check the timer
        key)."""
        if not self.keyed or value is None:
            return ()
        try:
            return message_keys(self.stored_message(raw, value))
        except CorruptRecordError as exc:
            log.warning("timer store %s: keys of %s unreadable, index entries left dangling: "
                        "%s", self._where, bytes(raw).hex(), exc)
            return ()

    # -- reads (store lock held) -------------------------------------------------------------
    def _walk(self, prefix: bytes, start: bytes) -> Iterator[bytes]:
        """Timer keys named by the index entries of ``prefix`` from ``start``."""
        opts = ReadOptions()
        opts.set_iterate_upper_bound(prefix + b"\xff" * (K.DUE_SIZE + K.MSG_ID_SIZE + 1))
        it = self._db.meta.iter(opts)
        try:
            it.seek(start)
            while it.valid():
                yield K.timer_key_of_entry(it.key())
                it.next()
            check_iterator(it, f"timer store {self._where} key index")
        finally:
            del it

    def _live_chunks(self, prefix: bytes, start: bytes
                     ) -> Iterator[list[tuple[bytes, bytes]]]:
        """(timer key, index value) of the live entries, in chunks; dangling ones skipped."""
        chunk: list[bytes] = []
        walk = self._walk(prefix, start)
        timer = self._db.timer
        while True:
            raw = next(walk, None)
            if raw is not None:
                chunk.append(raw)
                if len(chunk) < CHUNK:
                    continue
            if chunk:
                values = timer.get(chunk)
                live = [(r, v) for r, v in zip(chunk, values) if v is not None]
                if live:
                    yield live
                chunk = []
            if raw is None:
                return

    def find(self, topic: str, key: str, limit: int, after: str | None) -> ScanPage:
        self.require("find by key")
        prefix = K.key_index_prefix(topic, key)
        start = _start_after(prefix, topic, key, after)
        if limit <= 0:
            return ScanPage([], None)
        entries: list[PendingEntry] = []
        for live in self._live_chunks(prefix, start):
            for raw, value in live:
                if len(entries) == limit:
                    return ScanPage(entries, entries[-1].handle)
                parsed = K.decode_key(raw)
                info = I.peek(raw, value)
                entries.append(PendingEntry(
                    parsed.due_ms, parsed.topic, parsed.msg_id,
                    encode_handle(parsed.topic, parsed.due_ms, parsed.msg_id),
                    info.body_size, info.queue_id, info.tags))
        return ScanPage(entries, None)

    def targets(self, topic: str, key: str) -> list[tuple[bytes, bytes]]:
        """Every live (timer key, index value) of (topic, key) (cancel/reschedule by key)."""
        self.require("a change by key")
        prefix = K.key_index_prefix(topic, key)
        return [pair for live in self._live_chunks(prefix, prefix) for pair in live]

    def count_due(self, ranges: list) -> list[int]:
        self.require("due counts")
        return self.due.count_many(ranges)

    def topic_counts(self) -> dict[str, int]:
        self.require("pending counts by topic")
        return self.topics.counts()

    # -- build on open, check -----------------------------------------------------------------
    def ensure_built(self) -> int:
        """On open: a store made before the key index existed gets it (and its counters) built
        by one walk of its keys; one at an older version gets its counters rewritten (due
        counters in the compact format, topic counters; a walk of the keys alone), except a
        store at version 3, whose topic counters are exact already: when they sum to its
        pending row, the row goes and the marker moves to 4 in one batch (else they are
        rewritten). The marker in ``meta`` is written last, so a crash during any of it starts
        it again. Opened without the index: the marker goes and the pending row is written,
        in one batch, so the next ordinary open rebuilds and the pending count stays durable
        meanwhile. Returns the pending count (the sum of the topic counters, or the row)."""
        meta, meta_h = self._db.meta, self._db.meta_h
        version = meta.get(K.META_KEY_INDEX)
        version = None if version is None else bytes(version)
        if version is not None and version not in K.READABLE_KEY_INDEX_VERSIONS:
            raise ConfigError(
                f"timer store {self._where}: format.key_index is "
                f"{version.decode(errors='replace')!r}, written by a newer build "
                f"(this one reads {', '.join(v.decode() for v in K.READABLE_KEY_INDEX_VERSIONS)})")
        if not self.enabled:
            pending = stored_pending(meta)
            batch = WriteBatch(raw_mode=True)
            batch.delete(K.META_KEY_INDEX, meta_h)
            batch.put(K.META_PENDING, pack_u64(pending), meta_h)
            self._db.write_synced(batch)
            return pending
        if version is None:
            self.rebuild()
            return self.topics.total()
        if version == b"3":
            row = _pending_row(meta)
            if row == self.topics.total():
                batch = WriteBatch(raw_mode=True)
                batch.delete(K.META_PENDING, meta_h)
                batch.put(K.META_KEY_INDEX, K.KEY_INDEX_VERSION, meta_h)
                self._db.write_unsynced(batch)  # lost in a crash: this upgrade runs again
            else:
                log.warning("timer store %s: the topic counters sum to %d but the pending row "
                            "says %s; rewriting the counters from the keys", self._where,
                            self.topics.total(), row)
                self.rebuild_counters()
        elif version != K.KEY_INDEX_VERSION:
            self.rebuild_counters()
        opts = ReadOptions()
        opts.set_iterate_upper_bound(K.META_KEY_INDEX_PREFIX + b"\xff")
        it = meta.iter(opts)
        try:
            it.seek(K.META_KEY_INDEX_PREFIX)
            self.keyed = it.valid()
            check_iterator(it, f"timer store {self._where} key index")
        finally:
            del it
        return self.topics.total()

    def _clear_counters(self, batch: WriteBatch) -> None:
        meta_h = self._db.meta_h
        for prefix in [p for p, _ in K.DUE_COUNTER_WIDTHS] + list(K.LEGACY_DUE_COUNTER_PREFIXES):
            batch.delete_range(prefix, prefix + b"\xff" * 9, meta_h)
        topiccount.stage_clear(batch, meta_h)

    def _put_counters(self, dues: list[int], raws: list[bytes], batch: WriteBatch) -> None:
        meta_h = self._db.meta_h
        for name, value in expected_counters(dues).items():
            batch.put(name, K.pack_count(value), meta_h)
        topics = expected_topics(raws)
        topiccount.stage_put(topics, batch, meta_h)
        return topics

    def _forget(self) -> None:
        self.due.forget()
        self.topics.reset({})

    def rebuild_counters(self) -> int:
        """Drop the due and topic counters (any format) and write them again from the timer
        keys alone; returns how many keys were counted. Refused without the key index: the
        marker it writes says the topic counters hold the pending count, which such a store
        does not keep them up to."""
        self.require("a rebuild of the counters")
        clear = WriteBatch(raw_mode=True)
        self._clear_counters(clear)
        self._db.write_unsynced(clear)
        self._forget()
        raws: list[bytes] = []
        it = self._db.timer.iter(ReadOptions())
        try:
            it.seek_to_first()
            while it.valid():
                raws.append(bytes(it.key()))
                it.next()
            check_iterator(it, f"timer store {self._where} due counters build")
        finally:
            del it
        batch = WriteBatch(raw_mode=True)
        topics = self._put_counters([K.key_due_ms(raw) for raw in raws], raws, batch)
        batch.delete(K.META_PENDING, self._db.meta_h)  # the topic counters hold it now
        batch.put(K.META_KEY_INDEX, K.KEY_INDEX_VERSION, self._db.meta_h)
        self._db.write_unsynced(batch)
        self.topics.reset(topics)
        log.warning("timer store %s: due and topic counters rewritten for %d pending keys",
                    self._where, len(raws))
        return len(raws)

    def rebuild(self) -> dict[str, int]:
        """Drop and rebuild the key index and the counters from the timer keys (refused
        without the key index, as :meth:`rebuild_counters`)."""
        self.require("a rebuild of the key index")
        meta_h = self._db.meta_h
        clear = WriteBatch(raw_mode=True)
        clear.delete_range(K.META_KEY_INDEX_PREFIX, K.META_KEY_INDEX_PREFIX + b"\xff", meta_h)
        self._clear_counters(clear)
        self._db.write_unsynced(clear)
        self._forget()
        self.keyed = True  # read every value's keys
        raws: list[bytes] = []
        entries = unreadable = 0
        batch = WriteBatch(raw_mode=True)
        it = self._db.timer.iter(ReadOptions())
        try:
            it.seek_to_first()
            while it.valid():
                raw = bytes(it.key())
                raws.append(raw)
                try:
                    keys = message_keys(self.stored_message(raw, it.value()))
                except CorruptRecordError:
                    keys, unreadable = (), unreadable + 1
                for key in keys:
                    batch.put(K.index_entry(raw, key), b"", meta_h)
                    entries += 1
                if batch.len() >= REBUILD_CHUNK:
                    self._db.write_unsynced(batch)
                    batch = WriteBatch(raw_mode=True)
                it.next()
            check_iterator(it, f"timer store {self._where} key index build")
        finally:
            del it
        topics = self._put_counters([K.key_due_ms(raw) for raw in raws], raws, batch)
        batch.delete(K.META_PENDING, meta_h)  # the topic counters hold it now
        batch.put(K.META_KEY_INDEX, K.KEY_INDEX_VERSION, meta_h)
        self._db.write_unsynced(batch)
        self.topics.reset(topics)
        self.keyed = entries > 0
        if raws:
            log.warning("timer store %s: built the key index (%d entries) and counters for %d "
                        "pending keys", self._where, entries, len(raws))
        return {"keys": len(raws), "entries": entries, "unreadable": unreadable}

    def check(self, expected_entries: set[bytes], raws: list[bytes], corrupt_count: int
              ) -> list[str]:
        """Compare the index and the counters with what a full walk of the timer keys found
        (``raws``). Entries of set-aside values may dangle; others may not. A store opened
        without the index has nothing to compare (its next ordinary open rebuilds it)."""
        if not self.enabled:
            return []
        meta = self._db.meta
        return check_index(meta, self.due.stored(), topiccount.read_stored(meta),
                           corrupt_count, self._where, expected_entries, raws)


def _pending_row(meta: Any) -> int | None:
    raw = meta.get(K.META_PENDING)
    return unpack_u64(K.META_PENDING, None if raw is None else bytes(raw))


def stored_pending(meta: Any) -> int:
    """The durable pending count in ``meta`` (an open, a read-only check, a repair's
    salvage): the sum of the topic counters when the key index is at the current version
    (the pending row is absent then), else the pending row (0 when there is none: a new
    store)."""
    version = meta.get(K.META_KEY_INDEX)
    if version is not None and bytes(version) == K.KEY_INDEX_VERSION:
        return sum(topiccount.read_stored(meta).values())
    return _pending_row(meta) or 0


def _start_after(prefix: bytes, topic: str, key: str, after: str | None) -> bytes:
    if after is None:
        return prefix
    parsed = decode_handle(after)
    if parsed.topic != topic:
        raise InvalidHandleError(f"after={after!r} is a handle of topic {parsed.topic!r}, "
                                 f"not {topic!r}")
    try:
        raw = K.encode_key(TimerKey(parsed.due_ms, parsed.topic, parsed.msg_id))
    except InvalidMessageError as exc:
        raise InvalidHandleError(f"after={after!r} names no possible key: {exc}") from None
    return K.key_successor(K.index_entry(raw, key))


def check_index(keys_family: Any, stored_counters: dict[bytes, int],
                stored_topics: dict[bytes, int] | None, corrupt_count: int, where: Any,
                expected_entries: set[bytes], raws: list[bytes]) -> list[str]:
    """:meth:`KeyIndex.check` on the parts it reads (a read-only open passes its own;
    ``stored_topics`` None: a store written before the topic counters, not compared)."""
    problems: list[str] = []
    found: set[bytes] = set()
    dangling = 0
    opts = ReadOptions()
    opts.set_iterate_upper_bound(K.META_KEY_INDEX_PREFIX + b"\xff")
    it = keys_family.iter(opts)
    try:
        it.seek(K.META_KEY_INDEX_PREFIX)
        while it.valid():
            entry = bytes(it.key())
            if entry in expected_entries:
                found.add(entry)
            else:
                dangling += 1
            it.next()
        check_iterator(it, f"timer store {where} key index check")
    finally:
        del it
    missing = len(expected_entries) - len(found)
    if missing:
        problems.append(f"{missing} keyed messages lack their key index entry")
    if dangling and not corrupt_count:
        problems.append(f"{dangling} key index entries name no pending key")
    want, have = expected_counters([K.key_due_ms(raw) for raw in raws]), stored_counters
    if want != have:
        wrong = sorted(set(want) ^ set(have) | {k for k in want if want[k] != have.get(k)})
        problems.append(f"{len(wrong)} due counters differ from the keys, first "
                        f"{wrong[0]!r}: {have.get(wrong[0], 0)} stored, {want.get(wrong[0], 0)} keys")
    if stored_topics is not None:
        want_t = expected_topics(raws)
        if want_t != stored_topics:
            wrong = sorted(set(want_t) ^ set(stored_topics)
                           | {k for k in want_t if want_t[k] != stored_topics.get(k)})
            problems.append(f"{len(wrong)} topic counters differ from the keys, first "
                            f"{wrong[0].decode('utf-8', 'replace')!r}: "
                            f"{stored_topics.get(wrong[0], 0)} stored, "
                            f"{want_t.get(wrong[0], 0)} keys")
    return problems
