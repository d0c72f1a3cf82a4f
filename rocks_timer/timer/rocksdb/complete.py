"""``complete``: forget delivered records and advance the persisted cursor, in one transaction
(the keys' deletes, as one range delete per claim where the claim allows it; the pending count,
the cursor, the reconcile offset, the value segments' liveness and the key index with its
counters). A ``ClaimedBatch`` from this store's claim is completed from its columns, without a
record object per key. The caller holds the store's lock.
"""
from __future__ import annotations

from typing import Sequence

from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb.claimed import ClaimedBatch, ClaimedRecord
from rocks_timer.timer.rocksdb.claims import Claims
from rocks_timer.timer.rocksdb.keyindex import KeyIndex, message_keys
from rocks_timer.timer.rocksdb.transaction import Writer
from rocks_timer.timer.store import DueRecord


def complete(claims: Claims, keys: KeyIndex, writer: Writer, records: Sequence[DueRecord],
             commitlog_end: int | None) -> None:
    if not records and commitlog_end is None:
        return
    txn = writer.begin()
    changes = txn.index
    keyed = keys.keyed
    if type(records) is ClaimedBatch:
        # keys reconciled already or never claimed here are not in flight: skipped
        raws = dict.fromkeys(records.tokens)
        if not claims.holds_all(raws):
            raws = {raw: None for raw in raws if raw in claims}
        if keyed:
            if len(raws) == len(records.tokens):  # the whole claim, in its order
                changes.removed_keyed(records.tokens, records.index_entries())
            else:
                at = {raw: i for i, raw in enumerate(records.tokens)}
                changes.removed_keyed(list(raws), records.index_entries([at[raw]
                                                                          for raw in raws]))
    else:
        found = {}
        for record in records:
            raw = record.token if isinstance(record.token, bytes) else K.encode_key(record.key)
            if raw in claims:
                found[raw] = record
        raws = found
        if keyed:
            for raw, record in found.items():
                changes.removed(raw, record.message_keys() if type(record) is ClaimedRecord
                                else message_keys(record.message))
    if not keyed:
        changes.removed_unkeyed(raws)
    spans = records.spans if type(records) is ClaimedBatch else None
    if spans is not None and len(raws) == len(records.tokens):
        # every key of each claimed range is in this batch, and none can land there again
        # (claimed.py): one range tombstone per claim instead of one tombstone per key
        for begin, end in spans:
            txn.delete_range(begin, end)
        # keys due strictly between a span's ends are all in it, so their due counters
        # fall to 0 too (the keys at its ends' due times may have company elsewhere)
        changes.emptied = [(K.key_due_ms(begin), K.key_due_ms(end)) for begin, end in spans]
    else:
        delete = txn.delete
        for raw in raws:
            delete(raw)
    txn.pending -= len(raws)
    txn.removed += len(raws)
    txn.put_meta(K.META_CURSOR, claims.persisted(without=raws))
    txn.reconcile = commitlog_end
    if writer.vlog is not None:
        txn.drop_values(claims.index_values(raws), delivered=True)
    txn.commit()
    claims.forget(raws)
