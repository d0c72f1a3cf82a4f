"""``complete``: forget delivered records and advance the persisted cursor, in one WriteBatch
(the keys' deletes, as one range delete per claim where the claim allows it; the pending
counter, the cursor, the reconcile offset, the value segments' liveness rows and the key index).
A ``ClaimedBatch`` from this store's claim is completed from its columns, without a record
object per key.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from rocksdict import WriteBatch

from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import keyindex
from rocks_timer.timer.rocksdb import meta as rocks_meta
from rocks_timer.timer.rocksdb.claimed import ClaimedBatch, ClaimedRecord
from rocks_timer.timer.rocksdb.keyindex import IndexChanges
from rocks_timer.timer.store import DueRecord

if TYPE_CHECKING:
    from rocks_timer.timer.rocksdb.store import RocksTimerStore


def complete(store: "RocksTimerStore", records: Sequence[DueRecord],
             commitlog_end: int | None) -> None:
    with store._lock:
        store._check_open()
        if not records and commitlog_end is None:
            return
        in_flight = store._in_flight
        changes = IndexChanges()
        if type(records) is ClaimedBatch:
            # keys reconciled already or never claimed here are not in flight: skipped
            raws = dict.fromkeys(records.tokens)
            if not in_flight.keys() >= raws.keys():
                raws = {raw: None for raw in raws if raw in in_flight}
            if store._keyed:
                at = {raw: i for i, raw in enumerate(records.tokens)}
                for raw in raws:
                    changes.removed(raw, records.message_keys(at[raw]))
        else:
            found = {}
            for record in records:
                raw = record.token if isinstance(record.token, bytes) else \
                    K.encode_key(record.key)
                if raw in in_flight:
                    found[raw] = record
            raws = found
            if store._keyed:
                for raw, record in found.items():
                    changes.removed(raw, record.message_keys() if type(record) is ClaimedRecord
                                    else keyindex.message_keys(record.message))
        if not store._keyed:
            keyindex.removed_unkeyed(changes, raws)
        batch = WriteBatch(raw_mode=True)
        timer_h = store._timer_h
        spans = records.spans if type(records) is ClaimedBatch else None
        if spans is not None and len(raws) == len(records.tokens):
            # every key of each claimed range is in this batch, and none can land there again
            # (claimed.py): one range tombstone per claim instead of one tombstone per key
            for begin, end in spans:
                batch.delete_range(begin, end, timer_h)
            # keys due strictly between a span's ends are all in it, so their due counters
            # fall to 0 too (the keys at its ends' due times may have company elsewhere)
            changes.emptied = [(K.key_due_ms(begin), K.key_due_ms(end)) for begin, end in spans]
        else:
            delete = batch.delete
            for raw in raws:
                delete(raw, timer_h)
        pending = store._pending - len(raws)
        batch.put(K.META_PENDING, rocks_meta.pack_u64(pending), store._meta_h)
        batch.put(K.META_CURSOR, store._cursor(without=raws), store._meta_h)
        if commitlog_end is not None:
            batch.put(K.META_RECONCILE_OFFSET, rocks_meta.pack_u64(commitlog_end),
                      store._meta_h)
        new = store._stage_removed([in_flight[raw] for raw in raws], batch, delivered=True)
        new_counts = keyindex.stage(store, changes, batch)
        store._write(batch)
        store._commit_removed(new)
        keyindex.commit(store, changes, new_counts)
        store._pending = pending
        if commitlog_end is not None:
            store._reconcile_offset = commitlog_end
        for raw in raws:
            del in_flight[raw]
        store._deletes_since_reclaim += len(raws)
