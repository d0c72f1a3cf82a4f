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
from rocks_timer.timer.handles import encode_handle
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb import keyindex
from rocks_timer.timer.rocksdb.keyindex import IndexChanges
from rocks_timer.timer.rocksdb.scan import check_iterator
from rocks_timer.timer.rocksdb import meta as rocks_meta
from rocks_timer.timer.rocksdb.layout import commit_removed, stage_removed
from rocks_timer.message import Message
from rocks_timer.timer.delivery import delivery_copy_py
from rocks_timer.timer.rocksdb import segments as S
from rocks_timer.timer.rocksdb.claim_codec import claim_batch
from rocks_timer.timer.store import DueRecord, TimerKey
from rocks_timer.timer.values import decode_value, peek_keys

if TYPE_CHECKING:
    from rocks_timer.timer.rocksdb.store import RocksTimerStore

log = logging.getLogger(__name__)


def claim_due(store: "RocksTimerStore", now_ms: int, max_messages: int, max_bytes: int) -> list[DueRecord]:
    claimed: list[DueRecord] = []
    if max_messages <= 0:
        return claimed
    with store._lock:
        store._check_open()
        read_opts = ReadOptions()
        read_opts.set_iterate_upper_bound(K.due_prefix(now_ms + 1))  # never early
        corrupt: list[tuple[bytes, bytes, CorruptRecordError]] = []
        in_flight_new: dict[bytes, bytes | None] = {}
        vlog = store.vlog
        keys: list[bytes] = []
        values: list[bytes] = []
        it = store._timer.iter(read_opts)
        in_flight = store._in_flight
        key_of, value_of, step, valid = it.key, it.value, it.next, it.valid
        try:
            it.seek(store._claim_cursor)
            while valid() and len(keys) < max_messages:
                raw = key_of()
                if raw not in in_flight:
                    keys.append(raw)
                    values.append(value_of())
                step()
            check_iterator(it, f"timer store {store.path} claim")  # never a silent early end
        finally:
            del it, key_of, value_of, step, valid
        fds = None
        if vlog is not None:
            fds = {sid: seg.file.fd for sid, seg in vlog.segments.items() if seg.file is not None}
        cut, sizes, bodies, copies, codes = claim_batch(keys, values, fds, max_bytes, now_ms)
        pointed, version = fds is not None, I.POINTER_VERSION
        for i in range(cut):
            raw, index_value, copy = keys[i], values[i], copies[i]
            message = None
            if copy is None:
                try:
                    if codes[i] is not None:
                        raise _refusal(raw, index_value, codes[i])
                    message = decode_value(raw, bodies[i])  # the reference decides, or reports
                except CorruptRecordError as exc:
                    corrupt.append((raw, index_value, exc))
                    continue
                copy = delivery_copy_py(message, K.key_due_ms(raw), now_ms)
            claimed.append(ClaimedRecord(raw, bodies[i], sizes[i], copy, message))
            in_flight_new[raw] = index_value if pointed and index_value[0] == version else None
        last = keys[cut - 1] if cut else None
        if corrupt:
            quarantine(store, corrupt)
        in_flight.update(in_flight_new)
        if last is not None:
            store._claim_cursor = K.key_successor(last)
    return claimed

class ClaimedRecord(DueRecord):
    """A claimed record whose key, message and handle are decoded only if someone reads them
    (the deliverer reads only ``copy``, ``size`` and ``token``)."""

    __slots__ = ("_key", "_message", "_value")

    def __init__(self, raw: bytes, value: bytes, size: int, copy, message=None):
        self.token, self.size, self.copy = raw, size, copy
        self._value, self._message, self._key = value, message, None

    @property
    def key(self) -> TimerKey:
        if self._key is None:
            self._key = K.decode_key(self.token)
        return self._key

    @property
    def message(self) -> Message:
        if self._message is None:
            self._message = decode_value(self.token, self._value)
        return self._message

    def message_keys(self) -> tuple[str, ...]:
        """Its distinct KEYS (``keyindex.message_keys``), read without decoding the message."""
        keys = self._message.keys if self._message is not None else \
            peek_keys(self.token, self._value)
        return tuple(dict.fromkeys(keys)) if len(keys) > 1 else keys

    @property
    def handle(self) -> str:
        key = self.key
        return encode_handle(key.topic, key.due_ms, key.msg_id)


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
        log.error("timer store %s: quarantined key %s (%d value bytes): %s",
                  store.path, raw.hex(), len(value), exc)
    pending = store._pending - len(corrupt)
    count = store._corrupt_count + len(corrupt)
    batch.put(K.META_PENDING, rocks_meta.pack_u64(pending), store._meta_h)
    batch.put(K.META_CORRUPT, rocks_meta.pack_u64(count), store._meta_h)
    changes = IndexChanges()  # its KEYS cannot be read: its index entries dangle (keyindex)
    for raw, _, _ in corrupt:
        changes.removed(raw)
    new = stage_removed(store, [value for _, value, _ in corrupt], batch, lost=True)
    new_counts = keyindex.stage(store, changes, batch)
    store._write(batch)
    commit_removed(store, new)
    keyindex.commit(store, changes, new_counts)
    store._pending, store._corrupt_count = pending, count
    store._deletes_since_reclaim += len(corrupt)
