"""ConsumeQueues: per (topic, queue) index of the CommitLog, 20-byte entries.

    +----------------------+---------+-------------+
    | commitlog offset 8   | size 4  | tags code 8 |      entry n lives at byte 20 * n
    +----------------------+---------+-------------+

Files hold ``entries_per_file`` entries and are named by the 20-digit byte position of their first
entry, in ``consumequeue/<topic>/<queue_id>/``. A queue is an index only: it is rebuilt from the
CommitLog where it lags, where a file is missing or short, or where an entry does not match the
record it points to (see ``cq_recovery``).
"""
from __future__ import annotations

import logging
import os
import struct
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from rocks_timer.delay_levels import DelayLevelTable
from rocks_timer.fileio import create_durably, mkdir_durably
from rocks_timer.private import FILE_MODE
from rocks_timer.message import DELAY, SCHEDULE_TOPIC
from rocks_timer.record import java_string_hash

log = logging.getLogger(__name__)
ENTRY = struct.Struct(">qiq")
ENTRY_SIZE = ENTRY.size  # 20


@lru_cache(maxsize=4096)
def tags_hash(tags: str) -> int:
    """Java ``String.hashCode`` of a TAGS value (cached: a topic has few distinct tags)."""
    return java_string_hash(tags)


def tags_code(topic: str, properties: Mapping[str, str], store_ms: int,
              levels: DelayLevelTable) -> int:
    """The tags code of an entry: the deliver time for a level message (RocketMQ's rule for
    SCHEDULE_TOPIC_XXXX), else hash(TAGS), or 0 without tags."""
    if topic == SCHEDULE_TOPIC and DELAY in properties:
        try:
            level = levels.clamp(int(properties[DELAY]))
        except ValueError:
            level = 0
        if level > 0:
            return store_ms + levels.delay_ms(level)
    tags = properties.get("TAGS")
    return tags_hash(tags) if tags else 0


@dataclass(frozen=True, slots=True)
class CQEntry:
    queue_offset: int
    commitlog_offset: int
    size: int
    tags_code: int


class ConsumeQueue:
    """One (topic, queue): append-only entries, random reads by queue offset."""

    _OPEN_FLAGS = os.O_RDWR

    def __init__(self, directory: Path, topic: str, queue_id: int, entries_per_file: int):
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self._file_bytes = entries_per_file * ENTRY_SIZE
        self._lock = threading.Lock()
        self._files: dict[int, int] = {}  # first byte position -> fd
        self._min_offset = 0
        self._max_offset = 0
        self.bytes_written = 0
        self._prepare_directory()
        self._load()

    def _prepare_directory(self) -> None:
        mkdir_durably(self.directory)

    # -- state ---------------------------------------------------------------------------
    def _load(self) -> None:
        starts = sorted(int(p.name) for p in self.directory.iterdir() if p.name.isdigit())
        for start in starts:
            self._files[start] = os.open(self.directory / f"{start:020d}", self._OPEN_FLAGS)
        if starts:
            last = starts[-1]
            # a longer file is kept as it is and reported by file_problems
            length = min(os.fstat(self._files[last]).st_size, self._file_bytes)
            whole = length - length % ENTRY_SIZE
            if whole != length:  # torn entry: drop it
                self._cut_torn_entry(self._files[last], whole)
            self._min_offset = starts[0] // ENTRY_SIZE
            self._max_offset = (last + whole) // ENTRY_SIZE
        self.damaged_files = self.file_problems()  # as found on open
        for problem in self.damaged_files:
            log.error("consume queue %s/%d: file %s; entries are rebuilt from the CommitLog",
                      self.topic, self.queue_id, problem)

    def _cut_torn_entry(self, fd: int, whole: int) -> None:
        os.ftruncate(fd, whole)

    def file_problems(self) -> list[str]:
        """Files missing or short before the last one, or longer than a file holds."""
        with self._lock:
            files = dict(self._files)
        if not files:
            return []
        problems = []
        first, last = min(files), max(files)
        for start in range(first, last + self._file_bytes, self._file_bytes):
            fd = files.get(start)
            size = os.fstat(fd).st_size if fd is not None else -1
            if size > self._file_bytes:
                problems.append(f"{start:020d} is {size} bytes (at most {self._file_bytes})")
            elif start != last and size != self._file_bytes:
                what = "missing" if fd is None else f"{size} bytes, not {self._file_bytes}"
                problems.append(f"{start:020d} is {what}")
        return problems

    @property
    def min_offset(self) -> int:
        return self._min_offset

    @property
    def max_offset(self) -> int:
        """The next queue offset to write (the entry count, counting expired ones)."""
        return self._max_offset

    # -- writes (one writer: the CommitLog's dispatch) --------------------------------------
    def append(self, entries: list[tuple[int, int, int]], first_queue_offset: int) -> None:
        """Append (commitlog offset, size, tags code) entries, the first at ``first_queue_offset``
        (which must be max_offset, or any offset when the queue is empty: an index rebuilt after
        its head expired)."""
        self.append_packed(b"".join(ENTRY.pack(*entry) for entry in entries), first_queue_offset)

    def append_packed(self, data: bytes, first_queue_offset: int) -> None:
        """``append`` for entries already packed (the writer's hot path)."""
        size = len(data)
        if size % ENTRY_SIZE:
            raise ValueError(f"{size} bytes are not whole {ENTRY_SIZE}-byte entries")
        with self._lock:
            if first_queue_offset != self._max_offset:
                if self._max_offset != self._min_offset:
                    raise ValueError(f"{self.topic}/{self.queue_id}: append at {first_queue_offset},"
                                     f" expected {self._max_offset}")
                self._reset_empty(first_queue_offset)
            position, file_bytes = self._max_offset * ENTRY_SIZE, self._file_bytes
            start = position - position % file_bytes
            if position + size <= start + file_bytes:  # within one file (most)
                os.pwrite(self._fd_for(start), data, position - start)
                self.bytes_written += size
            else:
                for start, here, chunk in self._chunks(data, position):
                    os.pwrite(self._fd_for(start), chunk, here - start)
                    self.bytes_written += len(chunk)
            self._max_offset += size // ENTRY_SIZE

    def _chunks(self, data: bytes, position: int):
        """Packed entries split at file boundaries: (file start, absolute position, bytes)."""
        done = 0
        while done < len(data):
            here = position + done
            start = here - here % self._file_bytes
            n = min(len(data) - done, start + self._file_bytes - here)
            yield start, here, data[done:done + n]
            done += n

    def _fd_for(self, start: int) -> int:
        fd = self._files.get(start)
        if fd is None:
            fd = create_durably(self.directory / f"{start:020d}", os.O_RDWR, FILE_MODE)
            self._files[start] = fd
        return fd

    def put_at(self, queue_offset: int, entry: tuple[int, int, int]) -> None:
        """Rewrite one entry below ``max_offset`` (recovery repairs a missing, short or
        mismatched one; an entry below ``min_offset`` lowers it)."""
        with self._lock:
            if queue_offset >= self._max_offset:
                raise ValueError(f"{self.topic}/{self.queue_id}: put_at {queue_offset} is not "
                                 f"below max offset {self._max_offset}")
            position = queue_offset * ENTRY_SIZE
            start = position - position % self._file_bytes
            os.pwrite(self._fd_for(start), ENTRY.pack(*entry), position - start)
            self.bytes_written += ENTRY_SIZE
            self._min_offset = min(self._min_offset, queue_offset)

    def raw_entries(self, offset: int, count: int) -> bytes:
        """``count`` packed entries from ``offset``, with zeros where a file is missing or
        short (recovery and ``check`` compare them with the CommitLog)."""
        with self._lock:
            files = dict(self._files)
        out = bytearray()
        position, end = offset * ENTRY_SIZE, (offset + count) * ENTRY_SIZE
        while position < end:
            start = position - position % self._file_bytes
            n = min(end - position, start + self._file_bytes - position)
            fd = files.get(start)
            data = os.pread(fd, n, position - start) if fd is not None else b""
            out += data + bytes(n - len(data))
            position += n
        return bytes(out)

    def _reset_empty(self, queue_offset: int) -> None:
        for fd in self._files.values():
            os.close(fd)
        for p in self.directory.iterdir():
            if p.name.isdigit():
                p.unlink()
        self._files.clear()
        self._min_offset = self._max_offset = queue_offset
        start = queue_offset * ENTRY_SIZE
        file_start = start - start % self._file_bytes
        fd = self._fd_for(file_start)
        os.ftruncate(fd, start - file_start)

    def truncate(self, queue_offset: int) -> None:
        """Drop entries at ``queue_offset`` and after (they point past a truncated CommitLog)."""
        with self._lock:
            if queue_offset >= self._max_offset:
                return
            position = max(queue_offset, self._min_offset) * ENTRY_SIZE
            for start in sorted(self._files, reverse=True):
                if start > position:
                    os.close(self._files.pop(start))
                    (self.directory / f"{start:020d}").unlink()
                else:
                    os.ftruncate(self._files[start], position - start)
                    break
            self._max_offset = max(queue_offset, self._min_offset)

    # -- reads -------------------------------------------------------------------------------
    def entries(self, offset: int, max_entries: int) -> list[CQEntry]:
        """Entries from ``offset`` (at least ``min_offset``), at most ``max_entries``; a missing
        or short file reads as zero entries (``pull`` reports and skips them), never as the end
        of the queue."""
        offset, data = self.page(offset, max_entries)
        return [CQEntry(offset + i, *fields) for i, fields in enumerate(ENTRY.iter_unpack(data))]

    def page(self, offset: int, max_entries: int) -> tuple[int, bytes]:
        """``entries`` still packed: the offset they start at (at least ``min_offset``) and at
        most ``max_entries`` of them (the consumer read path, ``consume_read``)."""
        with self._lock:
            offset = max(offset, self._min_offset)
            end = min(self._max_offset, offset + max(0, max_entries))
        return offset, self.raw_entries(offset, end - offset) if end > offset else b""

    def get(self, offset: int) -> CQEntry | None:
        found = self.entries(offset, 1)
        return found[0] if found and found[0].queue_offset == offset else None

    # -- maintenance -------------------------------------------------------------------------
    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete whole files whose entries all point below the CommitLog's minimum offset."""
        removed = 0
        with self._lock:
            starts = sorted(self._files)
            for start in starts[:-1]:
                last_byte = start + self._file_bytes - ENTRY_SIZE
                data = os.pread(self._files[start], ENTRY_SIZE, last_byte - start)
                if len(data) < ENTRY_SIZE or ENTRY.unpack(data)[0] >= commitlog_min_offset:
                    break
                os.close(self._files.pop(start))
                (self.directory / f"{start:020d}").unlink()
                removed += 1
            if self._files:
                self._min_offset = max(self._min_offset, min(self._files) // ENTRY_SIZE)
        return removed

    def flush(self) -> None:
        with self._lock:
            for fd in self._files.values():
                os.fsync(fd)

    def close(self) -> None:
        with self._lock:
            for fd in self._files.values():
                os.close(fd)
            self._files.clear()


class ReadOnlyConsumeQueue(ConsumeQueue):
    """A queue opened for reading only (``ReadOnlyView``): ``O_RDONLY``, nothing created or cut
    (a torn last entry is just not counted); the write methods are refused."""

    _OPEN_FLAGS = os.O_RDONLY

    def _prepare_directory(self) -> None:
        pass

    def _cut_torn_entry(self, fd: int, whole: int) -> None:
        pass

    def append_packed(self, data: bytes, first_queue_offset: int) -> None:
        raise PermissionError("a read-only consume queue takes no writes")

    def put_at(self, queue_offset: int, entry: tuple[int, int, int]) -> None:
        raise PermissionError("a read-only consume queue takes no writes")

    def truncate(self, queue_offset: int) -> None:
        raise PermissionError("a read-only consume queue takes no writes")

    def delete_expired(self, commitlog_min_offset: int) -> int:
        return 0

    def flush(self) -> None:
        pass

    @classmethod
    def all_under(cls, root: Path, entries_per_file: int) -> list["ReadOnlyConsumeQueue"]:
        """Every queue found under ``<data>/consumequeue`` (none if it is missing)."""
        if not root.is_dir():
            return []
        return [cls(queue_dir, topic_dir.name, int(queue_dir.name), entries_per_file)
                for topic_dir in sorted(root.iterdir()) if topic_dir.is_dir()
                for queue_dir in sorted(topic_dir.iterdir()) if queue_dir.name.isdigit()]


class ConsumeQueueSet:
    """All ConsumeQueues under ``<root>/consumequeue``."""

    def __init__(self, root: Path, entries_per_file: int):
        self.root = root
        self._entries_per_file = entries_per_file
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()
        mkdir_durably(root)
        for topic_dir in sorted(root.iterdir()):
            for queue_dir in sorted(topic_dir.iterdir()) if topic_dir.is_dir() else ():
                if queue_dir.name.isdigit():
                    self.get_or_create(topic_dir.name, int(queue_dir.name))

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            with self._lock:
                queue = self._queues.get((topic, queue_id))
                if queue is None:
                    queue = ConsumeQueue(self.root / topic / str(queue_id), topic, queue_id,
                                         self._entries_per_file)
                    self._queues[(topic, queue_id)] = queue
        return queue

    def all(self) -> list[ConsumeQueue]:
        return list(self._queues.values())

    @property
    def bytes_written(self) -> int:
        return sum(q.bytes_written for q in self.all())

    def close(self) -> None:
        for queue in self.all():
            queue.close()
