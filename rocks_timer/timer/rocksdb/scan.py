"""The listing walk of the RocksDB store's ``scan``: pending entries from an iterator, bounded."""
from __future__ import annotations

import logging

from rocks_timer.errors import CorruptRecordError, InvalidHandleError, InvalidMessageError
from rocks_timer.timer import keys as K
from rocks_timer.timer.handles import decode_handle, encode_handle
from rocks_timer.timer.store import PendingEntry, TimerKey
from rocks_timer.timer.rocksdb.index import peek

log = logging.getLogger(__name__)


def check_iterator(it, where: str) -> None:
    """Raise CorruptRecordError (naming ``where`` and RocksDB's message, which names the file)
    if the iterator stopped on an error rather than at the end of its range: a corrupt block
    must never read as "no more keys"."""
    try:
        it.status()
    except Exception as exc:  # rocksdict raises plain Exception for RocksDB status errors
        raise CorruptRecordError(f"{where}: RocksDB read failed: {exc}; the store is damaged "
                                 f"(run `rtimer repair` on a copy)", where=where) from None


def scan_start(from_ms: int | None, after: str | None) -> bytes:
    """The first key a scan may list: from ``from_ms``, and strictly after the ``after`` handle."""
    start = K.due_prefix(from_ms) if from_ms is not None else b""
    if after is not None:
        parsed = decode_handle(after)
        try:
            after_key = K.encode_key(TimerKey(parsed.due_ms, parsed.topic, parsed.msg_id))
        except InvalidMessageError as exc:
            raise InvalidHandleError(f"after={after!r} names no possible key: {exc}") from None
        start = max(start, K.key_successor(after_key))
    return start


def resume_handle(resume: bytes | None) -> str | None:
    """The ``next_after`` handle of a page cut short after key ``resume``."""
    if resume is None:
        return None
    key = K.decode_key(resume)
    return encode_handle(key.topic, key.due_ms, key.msg_id)


def collect_pending(it, topic: str | None, limit: int, examine_budget: int
                    ) -> tuple[list[PendingEntry], bytes | None, int]:
    """Walk a positioned iterator: up to ``limit`` entries (optionally of one topic), examining
    at most ``examine_budget`` keys. Returns the entries, the key to resume after when the page
    was cut short (None at the end), and how many corrupt entries were skipped (``claim_due``
    quarantines them later)."""
    entries: list[PendingEntry] = []
    resume: bytes | None = None
    last_examined: bytes | None = None
    corrupt = 0
    while it.valid():
        if examine_budget <= 0:
            return entries, last_examined, corrupt
        examine_budget -= 1
        raw = it.key()
        try:
            key = K.decode_key(raw)
            last_examined = raw
            if topic is None or key.topic == topic:
                if len(entries) >= limit:  # one more match exists: the page is full
                    last = entries[-1]
                    resume = K.encode_key(TimerKey(last.deliver_at_ms, last.topic, last.msg_id))
                    return entries, resume, corrupt
                info = peek(raw, it.value())
                entries.append(PendingEntry(
                    deliver_at_ms=key.due_ms, topic=key.topic, msg_id=key.msg_id,
                    handle=encode_handle(key.topic, key.due_ms, key.msg_id),
                    size=info.body_size, queue_id=info.queue_id, tags=info.tags))
        except CorruptRecordError as exc:
            corrupt += 1
            log.warning("timer store scan skipped a corrupt entry: %s", exc)
        it.next()
    check_iterator(it, "timer store scan")  # a corrupt block is an error, never a short page
    return entries, None, corrupt


def count_topics_page(it, counts: dict[bytes, int], budget: int) -> bytes | None:
    """Count the keys of a positioned iterator per raw topic, at most ``budget`` of them, reading
    keys only (no value is decoded). Returns the last key counted when the budget ran out
    (resume after it), None at the end."""
    key_of, step = it.key, it.next
    last = None
    for _ in range(budget):
        raw = key_of()  # None once the iterator is no longer valid
        if raw is None:
            check_iterator(it, "timer store topic count")
            return None
        topic = raw[K.DUE_SIZE + 1:K.DUE_SIZE + 1 + raw[K.DUE_SIZE]]
        counts[topic] = counts.get(topic, 0) + 1
        last = raw
        step()
    if key_of() is None:
        check_iterator(it, "timer store topic count")
        return None
    return last
