"""The operations by business key, reschedule and the due histogram, shared by the direct path
and the running broker's socket (registered into :data:`cli.ops.OPS`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rocks_timer import Broker, InvalidMessageError
from rocks_timer.timer.handles import decode_handle
from rocks_timer.timer.histogram import MAX_DAYS

from .bounds import SCAN_PAGE, check_topic

MAX_FIND = 1_000_000


def _entry(e) -> dict[str, Any]:
    return {"deliver_at_ms": e.deliver_at_ms, "topic": e.topic, "msg_id": e.msg_id,
            "handle": e.handle, "size": e.size, "queue_id": e.queue_id, "tags": e.tags}


def find(broker: Broker, data_dir: Path, *, topic: str, key: str, limit: int = 100
         ) -> dict[str, Any]:
    """Up to ``limit`` pending entries of ``topic`` with ``key``, in due order."""
    check_topic(topic)
    if not 0 <= limit <= MAX_FIND:
        raise InvalidMessageError(f"limit {limit} is outside 0..{MAX_FIND}")
    entries: list[dict[str, Any]] = []
    after = None
    while len(entries) < limit:
        page = broker.find(topic, key, limit=min(SCAN_PAGE, limit - len(entries)), after=after)
        entries.extend(_entry(e) for e in page)
        after = page.next_after
        if after is None:
            break
    return {"topic": topic, "key": key, "entries": entries, "more": after is not None}


def cancel_by_key(broker: Broker, data_dir: Path, *, topic: str, key: str) -> dict[str, Any]:
    check_topic(topic)
    cancelled = broker.cancel_by_key(topic, key)
    return {"topic": topic, "key": key, "cancelled": int(cancelled),
            "handles": list(cancelled.handles)}


def reschedule(broker: Broker, data_dir: Path, *, handles: list[str] | None = None,
               topic: str | None = None, key: str | None = None,
               deliver_at_ms: int | None = None, delay_ms: int | None = None
               ) -> list[dict[str, Any]]:
    """Reschedule by handles or by (topic, key) to an absolute time or a delay from the
    broker's now. A malformed handle stops it before anything changes."""
    if (deliver_at_ms is None) == (delay_ms is None):
        raise InvalidMessageError("give exactly one of deliver_at_ms and delay_ms")
    if bool(handles) == (key is not None):
        raise InvalidMessageError("give handles, or a topic and a key, not both")
    due = deliver_at_ms if deliver_at_ms is not None else broker.clock.now_ms() + delay_ms
    if key is not None:
        check_topic(topic or "")
        results = broker.reschedule_by_key(topic, key, due)
    else:
        for handle in handles:
            decode_handle(handle)
        results = [broker.reschedule(handle, due) for handle in handles]
    return [r._asdict() for r in results]


def due(broker: Broker, data_dir: Path, *, first_day_ms: int | None = None, days: int = 7
        ) -> dict[str, Any]:
    """``Broker.due_histogram``: buckets and per-day counts."""
    if not 0 <= days <= MAX_DAYS:
        raise InvalidMessageError(f"days {days} is outside 0..{MAX_DAYS}")
    return {"engine": broker.engine, "pending": broker.pending_count(),
            **broker.due_histogram(first_day_ms, days)}


OPS = {"find": find, "cancel_by_key": cancel_by_key, "reschedule": reschedule, "due": due}
