"""Set-aside (quarantined) timer messages: what they are, told by message, and their export.

The RocksDB engine moves a pending message whose value does not decode, or whose value-segment
record is damaged, short, missing or holds another key, out of the ``timer`` column family into
``corrupt`` (key and index value byte for byte, ``Transaction.set_aside``). It is never delivered and
never dropped: it stays there until an operator decides (ARCHITECTURE §9). This module names
each one by message and exports what can be read of it; listing and export read only, so they
run on a live store and on a ``ReadOnlyView`` alike. ``restore`` puts back (live store only)
what decodes now, in the same WriteBatch as the schedule that re-indexes it.

The timer key always survives (it is the row's key): msg_id, topic and due time are known for
every set-aside message. KEYS, tags and the body are known when the value decodes; the reason is
why it does not decode now (so a cause fixed meanwhile, such as a segment file put back, shows
as "restorable").
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from rocks_timer.errors import CorruptRecordError, InvalidMessageError
from rocks_timer.fileio import fsync_dir
from rocks_timer.message import Message
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.vlog import segments as S
from rocks_timer.timer.rocksdb.scan import check_iterator
from rocks_timer.timer.store import TimerRecord
from rocks_timer.timer.values import decode_value

MANIFEST = "manifest.json"


@dataclass(frozen=True, slots=True)
class SetAsideMessage:
    """One set-aside message, as far as it can be read."""

    msg_id: str | None
    topic: str | None
    due_ms: int | None
    keys: list[str] | None  # None: the value does not decode, so its KEYS are unknown
    tags: str | None
    reason: str
    restorable: bool        # the value decodes now: ``restore`` would put it back
    key_hex: str            # the raw timer key (the row's name in ``corrupt``)
    value_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        keys = "unknown" if self.keys is None else (",".join(self.keys) or "-")
        return (f"set-aside msg_id {self.msg_id} topic {self.topic} keys {keys} due_ms "
                f"{self.due_ms}: {self.reason}")


@dataclass(frozen=True, slots=True)
class Examined:
    """A set-aside row read: its description, the raw bytes found and the message if any."""

    info: SetAsideMessage
    raw_key: bytes
    index_value: bytes
    record: bytes | None   # vlog: the segment bytes the pointer names, as they are on disk
    message: Message | None


class SegmentReader:
    """Reads value-segment records by pointer through ``O_RDONLY`` descriptors (never creates,
    cuts or syncs a file), for the set-aside list and the read-only check."""

    def __init__(self, vlog_dir: Path):
        self.dir = Path(vlog_dir)
        self._fds: dict[int, int | None] = {}

    def _fd(self, segment: int) -> int | None:
        if segment not in self._fds:
            try:
                self._fds[segment] = os.open(self.dir / S.segment_name(segment), os.O_RDONLY)
            except FileNotFoundError:
                self._fds[segment] = None
        return self._fds[segment]

    def raw(self, pointer: I.Pointer) -> bytes | None:
        """The bytes at the pointer as they are on disk (None: no such segment file)."""
        fd = self._fd(pointer.segment)
        return None if fd is None else os.pread(fd, pointer.length, pointer.offset)

    def value(self, raw_key: bytes, pointer: I.Pointer) -> bytes:
        """The checked value the pointer names (as ``ValueLog.read``)."""
        where = f"vlog segment {pointer.segment} offset {pointer.offset}"
        data = self.raw(pointer)
        if data is None:
            raise CorruptRecordError(f"{where}: the segment is missing", where=where)
        if len(data) < pointer.length:
            raise CorruptRecordError(f"{where}: {len(data)} of {pointer.length} bytes on disk "
                                     f"(the segment ends early)", where=where, raw=data)
        stored_key, value, _ = S.parse(data, 0, where)
        if stored_key != raw_key:
            raise CorruptRecordError(f"{where}: record holds key {stored_key.hex()}, the index "
                                     f"expected {bytes(raw_key).hex()}", where=where, raw=data)
        return value

    def close(self) -> None:
        for fd in self._fds.values():
            if fd is not None:
                os.close(fd)
        self._fds.clear()


def examine(raw_key: bytes, index_value: bytes, segments: SegmentReader | None) -> Examined:
    """Name one set-aside row and read what can be read of it."""
    raw_key, index_value = bytes(raw_key), bytes(index_value)
    try:
        key = K.decode_key(raw_key)
        msg_id, topic, due = key.msg_id, key.topic, key.due_ms
    except CorruptRecordError:
        msg_id = topic = due = None
    record = message = None
    try:
        pointer = I.pointer_or_none(index_value) if segments is not None else None
        if pointer is not None:
            record = segments.raw(pointer)
            body = segments.value(raw_key, pointer)
        else:
            body = index_value
        message = decode_value(raw_key, body)
        reason, restorable = "decodes now: restorable", True
    except CorruptRecordError as exc:
        reason, restorable = str(exc), False
    info = SetAsideMessage(
        msg_id=msg_id, topic=topic, due_ms=due,
        keys=list(message.keys) if message is not None else None,
        tags=message.tags if message is not None else None, reason=reason,
        restorable=restorable, key_hex=raw_key.hex(), value_bytes=len(index_value))
    return Examined(info, raw_key, index_value, record, message)


def name_key(raw: bytes) -> str:
    """A timer key told by message: msg_id, topic and due time (hex if it does not parse)."""
    try:
        key = K.decode_key(raw)
    except CorruptRecordError:
        return f"timer key {bytes(raw).hex()}"
    return f"message {key.msg_id} (topic {key.topic}, due_ms {key.due_ms})"


def select(examined: Iterable[Examined], msg_ids: Iterable[str] | None) -> list[Examined]:
    """The rows naming ``msg_ids`` (all rows when None); an id that names none is an error."""
    rows = list(examined)
    if msg_ids is None:
        return rows
    wanted = [m.upper() for m in msg_ids]
    have = {e.info.msg_id for e in rows}
    unknown = [m for m in wanted if m not in have]
    if unknown:
        raise InvalidMessageError(f"no set-aside message has msg_id {', '.join(unknown)} "
                                  "(rtimer set-aside list shows them)")
    return [e for e in rows if e.info.msg_id in set(wanted)]


def export(examined: Iterable[Examined], directory: Path) -> dict[str, Any]:
    """Write what is readable of each message into ``directory`` (new or empty): per message
    ``<n>.index`` (the index value as stored), ``<n>.record`` (vlog: the segment bytes the
    pointer names, as on disk, when the file exists) and ``<n>.body`` (when it decodes), plus
    ``manifest.json`` describing each. Files are owner-only; nothing in the store changes."""
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise InvalidMessageError(f"export directory {directory} exists and is not empty; "
                                  "give a new or empty directory")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    entries = []
    for n, e in enumerate(examined, 1):
        stem = f"{n:06d}"
        files = {"index": _write(directory / f"{stem}.index", e.index_value)}
        if e.record is not None:
            files["record"] = _write(directory / f"{stem}.record", e.record)
        if e.message is not None:
            files["body"] = _write(directory / f"{stem}.body", e.message.body)
        entries.append({**e.info.as_dict(), "files": files,
                        "properties": dict(e.message.properties) if e.message else None})
    manifest = {"exported": len(entries), "messages": entries}
    _write(directory / MANIFEST, json.dumps(manifest, indent=1).encode("utf-8"))
    fsync_dir(directory)
    return {"directory": str(directory), "exported": len(entries),
            "with_body": sum(1 for e in entries if "body" in e["files"])}


def _write(path: Path, data: bytes) -> str:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    return path.name


def read_rows(family: Any) -> list[tuple[bytes, bytes]]:
    """(key, value) of every row of the ``corrupt`` column family, the iterator's status
    checked (a damaged block is an error, never a shorter list)."""
    rows = []
    it = family.iter()
    try:
        it.seek_to_first()
        while it.valid():
            rows.append((bytes(it.key()), bytes(it.value())))
            it.next()
        check_iterator(it, "set-aside rows")
    finally:
        del it
    return rows


def examine_rows(rows: list[tuple[bytes, bytes]], vlog_dir: Path | None) -> list[Examined]:
    """Name every set-aside row of a live store (``vlog_dir``: its value segments, read
    through descriptors of their own; None in ``inline``)."""
    reader = SegmentReader(vlog_dir) if vlog_dir is not None else None
    try:
        return [examine(raw, value, reader) for raw, value in rows]
    finally:
        if reader is not None:
            reader.close()


def restore(examined: list[Examined], msg_ids: Iterable[str] | None,
            schedule: Callable[..., Any], now_ms: int) -> dict[str, Any]:
    """Put back the chosen set-aside messages that decode now: each is scheduled again (its
    due time kept, or raised to the low watermark if it has passed, as any send's), and its
    ``corrupt`` row, the set-aside count and its old key's KEYS entries go in the same
    transaction, so a crash leaves it either set aside or pending, never both. The ones that
    still do not decode are refused, with the reason. ``schedule`` is the store's."""
    chosen = select(examined, msg_ids)
    good = [e for e in chosen if e.info.restorable]
    refused = [e.info.as_dict() for e in chosen if not e.info.restorable]
    if good:
        # message keys decoded now: the old key's KEYS index entries (left dangling by the
        # set-aside) go too; a restored key equal to the old one puts them back after this
        stale = [K.index_entry(e.raw_key, key) for e in good for key in dict.fromkeys(
            e.message.keys)]
        schedule([TimerRecord(e.info.due_ms, e.message) for e in good], now_ms,
                 retire=[(e.raw_key, e.index_value) for e in good],
                 retire_index_entries=stale)
    return {"restored": [e.info.as_dict() for e in good], "refused": refused}


def count_pointers(seen: dict[int, list[int]], rows: list[tuple[bytes, bytes]]) -> None:
    """Add the segment records set-aside rows point at to ``seen`` (segment -> [count, bytes]):
    a quarantine keeps them counted live, so checks count them with the index's."""
    for _, value in rows:
        pointer = I.pointer_or_none(value) if I.is_pointer(value) else None
        if pointer is not None:
            entry = seen.setdefault(pointer.segment, [0, 0])
            entry[0] += 1
            entry[1] += pointer.length
