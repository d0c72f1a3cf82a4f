"""The operations behind the commands, shared by the direct path and the running broker's socket.

Each operation takes an open :class:`~rocks_timer.Broker` and JSON arguments, makes the library
call and returns a JSON document. ``rtimer send`` on its own and ``rtimer send`` talking to
``rtimer run`` therefore run the same code and print the same output.
"""
from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Callable

from rocks_timer import Broker, Message
from rocks_timer.errors import InvalidArgumentError, RocksTimerError
from rocks_timer.message import is_system_topic
from rocks_timer.timer.handles import decode_handle

from . import bounds, ops_keys
from .bounds import SCAN_PAGE, check_topic
from .offsets import ConsumerOffsets, check_group

STATS_PENDING_LIMIT = 200_000  # entries walked to count pending per topic
PENDING_BY_TOPIC = "stats: pending by topic"  # a failure kind of Broker.health
MAX_TICKS = 10_000


def message_dict(msg: Message) -> dict[str, Any]:
    """A pulled message as JSON: ``body`` is the UTF-8 text, or, when the body is not UTF-8,
    ``body`` is the text with replacement characters and ``body_base64`` holds the bytes."""
    out: dict[str, Any] = {
        "msg_id": msg.msg_id, "topic": msg.topic, "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset, "commitlog_offset": msg.commitlog_offset,
        "born_ms": msg.born_ms, "store_ms": msg.store_ms, "tags": msg.tags,
        "keys": list(msg.keys), "properties": dict(msg.properties)}
    try:
        out["body"] = msg.body.decode("utf-8")
    except UnicodeDecodeError:
        out["body"] = msg.body.decode("utf-8", errors="replace")
        out["body_base64"] = base64.b64encode(msg.body).decode("ascii")
    return out


def send(broker: Broker, data_dir: Path, *, topic: str, body: str | None = None,
         body_base64: str | None = None, delay_ms: int | None = None,
         deliver_at_ms: int | None = None, delay_level: int | None = None, tags: str | None = None,
         keys: list[str] | None = None, properties: dict[str, str] | None = None,
         count: int = 1) -> list[dict[str, Any]]:
    """``body`` is text (stored as UTF-8); ``body_base64`` carries exact bytes (binary bodies,
    ``rtimer send --body-file``). Exactly one of them."""
    if (body is None) == (body_base64 is None):
        raise InvalidArgumentError("send: give exactly one of body and body_base64")
    if body is not None:
        raw = body.encode("utf-8")
    else:
        try:
            raw = base64.b64decode(body_base64, validate=True)
        except ValueError:
            raise InvalidArgumentError("send: body_base64 is not valid base64") from None
    messages = [Message(topic=topic, body=raw, tags=tags, keys=tuple(keys or ()),
                        properties=dict(properties or {})) for _ in range(count)]
    results = broker.send_batch(messages, delay_ms=delay_ms, deliver_at_ms=deliver_at_ms,
                                delay_level=delay_level)
    return [{"msg_id": r.msg_id, "handle": r.handle, "deliver_at_ms": r.deliver_at_ms,
             "topic": r.topic, "queue_id": r.queue_id, "route": r.route} for r in results]


def scan(broker: Broker, data_dir: Path, *, from_ms: int | None = None, to_ms: int | None = None,
         topic: str | None = None, limit: int = 100) -> dict[str, Any]:
    """Up to ``limit`` pending entries in due order (an engine page may come back short, so
    pages are followed until the limit or the end)."""
    if topic is not None:
        check_topic(topic)
    entries: list[dict[str, Any]] = []
    after = None
    while len(entries) < limit:
        page = broker.scan(from_ms=from_ms, to_ms=to_ms, topic=topic,
                           limit=min(SCAN_PAGE, limit - len(entries)), after=after)
        entries.extend({"deliver_at_ms": e.deliver_at_ms, "topic": e.topic, "msg_id": e.msg_id,
                        "handle": e.handle, "size": e.size, "queue_id": e.queue_id,
                        "tags": e.tags} for e in page)
        after = page.next_after
        if after is None:
            break
    return {"entries": entries, "more": after is not None}


def cancel(broker: Broker, data_dir: Path, *, handles: list[str]) -> list[dict[str, Any]]:
    for handle in handles:  # a malformed handle stops the command before anything is cancelled
        decode_handle(handle)
    return [{"handle": h, "cancelled": broker.cancel(h)} for h in handles]


def deliver_due(broker: Broker) -> int:
    """Without a running broker nobody delivers: run ticks until nothing more is due."""
    total = 0
    for _ in range(MAX_TICKS):
        moved = broker.tick()
        total += moved
        if not moved:
            break
    return total


def consume(broker: Broker, data_dir: Path, *, topic: str, group: str, queue_id: int = 0,
            max_messages: int = 32, deliver: bool = False) -> dict[str, Any]:
    """Pull from the group's remembered offset and remember the next one. An offset beyond
    the queue's end is clamped to it and reported (``clamped_from``)."""
    check_topic(topic)
    check_group(group)
    if deliver:
        deliver_due(broker)
    offsets = ConsumerOffsets(data_dir)
    offset = stored = offsets.get(topic, group, queue_id)
    first, end = broker.min_offset(topic, queue_id), broker.max_offset(topic, queue_id)
    if offset < first:
        offset = first  # the oldest messages expired with their CommitLog segment
    if offset > end:
        offset = end
    messages, next_offset = broker.pull_page(topic, queue_id, offset, max_messages)
    offsets.commit(topic, group, queue_id, next_offset)
    result = {"topic": topic, "group": group, "queue_id": queue_id, "offset": offset,
              "next_offset": next_offset, "messages": [message_dict(m) for m in messages]}
    if stored > end:
        result["clamped_from"] = stored
    return result


def stats(broker: Broker, data_dir: Path) -> dict[str, Any]:
    """``Broker.stats()`` plus pending counts per topic (``Broker.pending_by_topic``, bounded)."""
    figures = broker.stats()
    try:
        per_topic, complete = broker.pending_by_topic(STATS_PENDING_LIMIT)
    except RocksTimerError as exc:  # a damaged store: no per-topic counts, and why
        broker.health.failed(PENDING_BY_TOPIC, exc, quiet=True)
        figures["health"] = broker.health.as_dict()
        per_topic, complete = {}, False
    else:
        broker.health.recovered(PENDING_BY_TOPIC)
    figures["pending_by_topic"] = per_topic
    figures["pending_by_topic_complete"] = complete
    figures["data_dir"] = str(data_dir)
    queues = {tq: ends for tq, ends in broker.queue_ranges().items() if not is_system_topic(tq[0])}
    figures["topics"] = {f"{topic}/{qid}": {"min_offset": first, "max_offset": end}
                         for (topic, qid), (first, end) in sorted(queues.items())}
    figures["consumer_lag"] = []
    for (topic, group, qid), offset in sorted(ConsumerOffsets(data_dir).table().items()):
        end = queues[(topic, qid)][1] if (topic, qid) in queues else 0
        row = {"group": group, "topic": topic, "queue_id": qid, "next_offset": offset,
               "max_offset": end, "lag": max(0, end - offset)}
        if offset > end:
            row["beyond_end"] = True  # clamped by the next consume (and by the next open)
        figures["consumer_lag"].append(row)
    return figures


def compact(broker: Broker, data_dir: Path) -> dict[str, Any]:
    """Manual compaction of the timer store, if the engine has one."""
    return broker.compact()


def check(broker: Broker, data_dir: Path) -> dict[str, Any]:
    """``Broker.check()``: the invariant walk's report (read-only)."""
    return broker.check().as_dict()


def set_aside_list(broker: Broker, data_dir: Path) -> list[dict[str, Any]]:
    return [row.as_dict() for row in broker.set_aside()]


def set_aside_export(broker: Broker, data_dir: Path, *, directory: str,
                     msg_ids: list[str] | None = None) -> dict[str, Any]:
    return broker.export_set_aside(Path(directory), msg_ids or None)


def set_aside_restore(broker: Broker, data_dir: Path, *, msg_ids: list[str] | None = None
                      ) -> dict[str, Any]:
    return broker.restore_set_aside(msg_ids or None)


def lost_list(broker: Broker, data_dir: Path) -> dict[str, Any]:
    return broker.lost().as_dict()


def lost_accept(broker: Broker, data_dir: Path) -> dict[str, Any]:
    return broker.accept_loss().as_dict()


OPS: dict[str, Callable[..., Any]] = {
    "send": send, "scan": scan, "cancel": cancel, "consume": consume, "stats": stats,
    "compact": compact, "check": check, "set_aside_list": set_aside_list,
    "set_aside_export": set_aside_export, "set_aside_restore": set_aside_restore,
    "lost_list": lost_list, "lost_accept": lost_accept,
}

OPS.update(ops_keys.OPS)


def run(name: str, broker: Broker, data_dir: Path, args: dict[str, Any]) -> Any:
    """Run one op after holding its arguments to the CLI's bounds (:mod:`cli.bounds`): the
    direct path and the socket server both come through here."""
    bounds.check(name, args)
    return OPS[name](broker, data_dir, **args)
