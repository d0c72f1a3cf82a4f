"""The claim walk of the RocksDB store: due keys from the cursor, never early, bounded by a
budget; in ``vlog`` each body is read from its value segment. A value that does not decode, or
a segment record that is damaged, short, missing or holds another key, is set aside in the
``corrupt`` column family (``quarantine``), counted and logged, never delivered and never a
reason to stop: the keys after it are claimed as usual.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rocksdict import ReadOptions, WriteBatch

from rocks_timer.errors import CorruptRecordError
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb import keyindex
from rocks_timer.timer.rocksdb.keyindex import IndexChanges
from rocks_timer.timer.rocksdb.scan import check_iterator
from rocks_timer.timer.rocksdb import meta as rocks_meta
from rocks_timer.timer.delivery import delivery_copy_py
from rocks_timer.timer.rocksdb import segments as S
from rocks_timer.timer.rocksdb.claim_codec import claim_batch
from rocks_timer.timer.rocksdb.claimed import ClaimedBatch
from rocks_timer.timer.rocksdb.setaside import name_key
from rocks_timer.timer.values import decode_value

if TYPE_CHECKING:
    from rocks_timer.timer.rocksdb.store import RocksTimerStore

log = logging.getLogger(__name__)


def claim_due(store: "RocksTimerStore", now_ms: int, max_messages: int,
              max_bytes: int) -> "ClaimedBatch | list":
    if max_messages <= 0:
        return []
    with store._lock:
        store._check_open()
        read_opts = ReadOptions()
        read_opts.set_iterate_upper_bound(K.due_prefix(now_ms + 1))  # never early
        # each claimed entry is read once and deleted: caching its block would only evict the
        # blocks that scans, cancels and sends reuse (a 1,000,000 burst: 7.0 s -> 5.8-6.3 s
        # inline, docs/BENCHMARKS.md)
        read_opts.fill_cache(False)
        vlog = store.vlog
        keys: list[bytes] = []
        values: list[bytes] = []
        it = store._timer.iter(read_opts)
        in_flight = store._in_flight
        key_of, value_of, step = it.key, it.value, it.next
        add_key, add_value = keys.append, values.append
        try:
            it.seek(store._claim_cursor)
            for _ in range(max_messages):
                key = key_of()  # None once the iterator is no longer valid
                if key is None:
                    break
                add_key(key)
                add_value(value_of())
                step()
            check_iterator(it, f"timer store {store.path} claim")  # never a silent early end
        finally:
            del it, key_of, value_of, step
        # every in-flight key sorts below the claim cursor (claims advance it), so none is
        # read again; this stays as a guard (one C-level pass, not a lookup per key in Python)
        whole = True  # the walk took every key of its range (its span, ClaimedBatch)
        if in_flight and not in_flight.keys().isdisjoint(keys):
            kept = [i for i, raw in enumerate(keys) if raw not in in_flight]
            keys, values = [keys[i] for i in kept], [values[i] for i in kept]
            whole = False
        store._backlog = len(keys) >= max_messages  # more may be due now (maint)
        if not keys:
            return []
        fds = None
        if vlog is not None:
            fds = {sid: seg.file.fd for sid, seg in vlog.segments.items() if seg.file is not None}
        cut, sizes, bodies, copies, codes = claim_batch(keys, values, fds, max_bytes, now_ms)
        first, last = keys[0], keys[cut - 1]
        store._backlog = store._backlog or cut < len(keys)  # the byte budget cut it
        del keys[cut:], values[cut:]
        messages = [None] * cut
        bad = [i for i in range(cut) if copies[i] is None]
        corrupt = _fill_slow_copies(keys, values, bodies, copies, codes, messages, bad, now_ms)
        if corrupt:
            quarantine(store, [(keys[i], values[i], exc) for i, exc in corrupt])
            dropped = {i for i, _ in corrupt}
            keep = [i for i in range(cut) if i not in dropped]
            keys, values, bodies, sizes, copies, messages = (
                [column[i] for i in keep]
                for column in (keys, values, bodies, sizes, copies, messages))
        if fds is not None:  # vlog: completing a key releases its record's bytes (a value
            in_flight.update(zip(keys, values))  # kept inline is skipped: drop_pointers)
        else:
            in_flight.update(dict.fromkeys(keys))
        store._claim_cursor = K.key_successor(last)
        # quarantined keys stay inside the span: they left the timer family already
        spans = [(first, store._claim_cursor)] if whole else None
    return ClaimedBatch(keys, bodies, sizes, copies, messages, spans)


def _fill_slow_copies(keys, values, bodies, copies, codes, messages, slow, now_ms):
    """Copies for the entries the native path left to the reference (``slow``): the value is
    decoded into a ``Message`` (kept in ``messages``) and copied; entries refused by the claim
    or failing to decode come back as ``[(index, CorruptRecordError)]``."""
    corrupt = []
    for i in slow:
        raw = keys[i]
        try:
            if codes[i] is not None:
                raise _refusal(raw, values[i], codes[i])
            message = decode_value(raw, bodies[i])  # the reference decides, or reports
        except CorruptRecordError as exc:
            corrupt.append((i, exc))
            continue
        messages[i] = message
        copies[i] = delivery_copy_py(message, K.key_due_ms(raw), now_ms)
    return corrupt


def _refusal(raw: bytes, index_value: bytes, code: str) -> CorruptRecordError:
    """The error of an entry ``claim_batch`` refused (``code``)."""
    if code == "bad-key":
        K.decode_key(raw)  # raises, naming what is wrong
    if code == "short-pointer":
        I.decode_pointer(raw, index_value)  # raises
    pointer = I.pointer_or_none(index_value)
    where = (f"vlog segment {pointer.segment} offset {pointer.offset}" if pointer is not None
             else f"timer key {raw.hex()}")
    reason = "the segment is missing" if code == "missing" else S.REFUSED.get(code, code)
    return CorruptRecordError(f"{where}: {reason}", where=where, raw=bytes(index_value))


def quarantine(store: "RocksTimerStore", corrupt: list[tuple[bytes, bytes, CorruptRecordError]]) -> None:
    """Move undecodable values to the ``corrupt`` family (one batch); never deliver them."""
    batch = WriteBatch(raw_mode=True)
    for raw, value, exc in corrupt:
        batch.put(raw, value, store._corrupt_h)
        batch.delete(raw, store._timer_h)
        log.error("timer store %s: set aside %s (%d value bytes; rtimer set-aside list): %s",
                  store.path, name_key(raw), len(value), exc)
    pending = store._pending - len(corrupt)
    count = store._corrupt_count + len(corrupt)
    batch.put(K.META_PENDING, rocks_meta.pack_u64(pending), store._meta_h)
    batch.put(K.META_CORRUPT, rocks_meta.pack_u64(count), store._meta_h)
    changes = IndexChanges()  # its KEYS cannot be read: its index entries dangle (keyindex)
    for raw, _, _ in corrupt:
        changes.removed(raw)
    # the set-aside row still points at its segment record: its bytes stay counted live, so
    # the segment is not released under it (export and restore read them; setaside.py)
    new_counts = keyindex.stage(store, changes, batch)
    store._write(batch)
    if store.vlog is not None:
        store.vlog.note_lost(sum(1 for _, value, _ in corrupt if I.is_pointer(value)))
    keyindex.commit(store, changes, new_counts)
    store._pending, store._corrupt_count = pending, count
    store._deletes_since_reclaim += len(corrupt)
