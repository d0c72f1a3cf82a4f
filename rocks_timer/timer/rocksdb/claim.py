"""The claim walk of the RocksDB store: due keys from the cursor, never early, bounded by a
budget; in ``vlog`` each body is read from its value segment. A value that does not decode, or
a segment record that is damaged, short, missing or holds another key, is set aside in the
``corrupt`` column family (``quarantine``), counted and logged, never delivered and never a
reason to stop: the keys after it are claimed as usual.
"""
from __future__ import annotations

import logging
from typing import Any

from rocksdict import ReadOptions

from rocks_timer.errors import CorruptRecordError
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.claims import Claims
from rocks_timer.timer.rocksdb.database import Database
from rocks_timer.timer.rocksdb.scan import check_iterator
from rocks_timer.timer.delivery import delivery_copy_py
from rocks_timer.timer.rocksdb.vlog import segments as S
from rocks_timer.timer.rocksdb.claim_codec import claim_batch
from rocks_timer.timer.rocksdb.claimed import ClaimedBatch
from rocks_timer.timer.rocksdb.setaside import name_key
from rocks_timer.timer.rocksdb.transaction import Writer
from rocks_timer.timer.rocksdb.vlog import ValueLog
from rocks_timer.timer.values import decode_value

log = logging.getLogger(__name__)


class Claimer:
    """The claim: receives the database (to walk the index), the claim state (to advance),
    the value log (``vlog``: the segment descriptors the native claim reads) and the writer
    (a set-aside is one transaction). The caller holds the store's lock."""

    def __init__(self, db: Database, claims: Claims, vlog: ValueLog | None, writer: Writer,
                 where: Any) -> None:
        self._db, self._claims, self._vlog, self._writer = db, claims, vlog, writer
        self._where = where

    def claim(self, now_ms: int, max_messages: int, max_bytes: int
              ) -> "tuple[ClaimedBatch | list, bool]":
        """The due records from the cursor, and whether more may be due now (the walk or the
        byte budget filled: the reclaim waits while a backlog drains)."""
        read_opts = ReadOptions()
        read_opts.set_iterate_upper_bound(K.due_prefix(now_ms + 1))  # never early
        # each claimed entry is read once and deleted: caching its block would only evict the
        # blocks that scans, cancels and sends reuse (docs/BENCHMARKS.md has the figures)
        read_opts.fill_cache(False)
        vlog, claims = self._vlog, self._claims
        keys: list[bytes] = []
        values: list[bytes] = []
        it = self._db.timer.iter(read_opts)
        key_of, value_of, step = it.key, it.value, it.next
        add_key, add_value = keys.append, values.append
        try:
            it.seek(claims.cursor)
            for _ in range(max_messages):
                key = key_of()  # None once the iterator is no longer valid
                if key is None:
                    break
                add_key(key)
                add_value(value_of())
                step()
            check_iterator(it, f"timer store {self._where} claim")  # never a silent early end
        finally:
            del it, key_of, value_of, step
        if not keys:  # the empty tick, the common case of an idle store: nothing more to do
            return [], False
        # every in-flight key sorts below the claim cursor (claims advance it), so none is
        # read again; this stays as a guard (one C-level pass, not a lookup per key in Python)
        whole = True  # the walk took every key of its range (its span, ClaimedBatch)
        if claims.overlaps(keys):
            kept = [i for i, raw in enumerate(keys) if raw not in claims]
            keys, values = [keys[i] for i in kept], [values[i] for i in kept]
            whole = False
        backlog = len(keys) >= max_messages
        if not keys:
            return [], backlog
        fds = vlog.descriptors() if vlog is not None else None
        cut, sizes, bodies, copies, codes = claim_batch(keys, values, fds, max_bytes, now_ms)
        first, last = keys[0], keys[cut - 1]
        backlog = backlog or cut < len(keys)  # the byte budget cut it
        del keys[cut:], values[cut:]
        messages = [None] * cut
        bad = [i for i in range(cut) if copies[i] is None]
        corrupt = _fill_slow_copies(keys, values, bodies, copies, codes, messages, bad, now_ms)
        if corrupt:
            self.set_aside([(keys[i], values[i], exc) for i, exc in corrupt])
            dropped = {i for i, _ in corrupt}
            keep = [i for i in range(cut) if i not in dropped]
            keys, values, bodies, sizes, copies, messages = (
                [column[i] for i in keep]
                for column in (keys, values, bodies, sizes, copies, messages))
        # vlog: completing a key releases its record's bytes (a value kept inline is skipped:
        # drop_pointers); inline: nothing to release
        claims.claimed(keys, values if fds is not None else None, last)
        # set-aside keys stay inside the span: they left the timer family already
        spans = [(first, claims.cursor)] if whole else None
        return ClaimedBatch(keys, bodies, sizes, copies, messages, spans), backlog

    def set_aside(self, corrupt: list[tuple[bytes, bytes, CorruptRecordError]]) -> None:
        """Move undecodable values to the ``corrupt`` family (one transaction); never deliver
        them."""
        txn = self._writer.begin()
        for raw, value, exc in corrupt:
            txn.set_aside(raw, value)
            log.error("timer store %s: set aside %s (%d value bytes; rtimer set-aside list): "
                      "%s", self._where, name_key(raw), len(value), exc)
        txn.commit()


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
