"""Consumer group offsets (``rtimer consume``), kept in ``<data>/config/consumerOffset.json``.

The file has RocketMQ's shape: ``{"offsetTable": {"<topic>@<group>": {"<queue id>": next offset}}}``.
Topic and group names follow the topic rules (``^[%|a-zA-Z0-9_-]{1,127}$``), so the ``@`` that
joins them is never ambiguous. The file is written crash-safely (temp file in the same directory,
fsync, ``os.replace``, then an fsync of the directory), so a crash leaves either the old table
or the new one. Only the process that holds the broker's data-dir lock reads or writes it, so no
file lock is needed here. A damaged file is a clear error naming it, never a silent reset.

When a broker opens, an offset beyond its queue's end (the CommitLog lost a torn tail the group
had consumed) is clamped to the end and reported (:meth:`ConsumerOffsets.clamp`): otherwise the
group would skip the messages stored at those offsets next, with a lag of 0.
"""
from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Callable

from rocks_timer.errors import CorruptRecordError, InvalidMessageError
from rocks_timer.fileio import replace_durably
from rocks_timer.private import private_dir
from rocks_timer.names import TOPIC_PATTERN

log = logging.getLogger(__name__)
FILE_NAME = "consumerOffset.json"


def check_group(group: str) -> str:
    """A consumer group name follows the topic rules (RocketMQ validates both alike)."""
    if not isinstance(group, str) or not TOPIC_PATTERN.match(group):
        raise InvalidMessageError(f"consumer group {group!r} is invalid; it must match "
                                  "^[%|a-zA-Z0-9_-]{1,127}$")
    return group


def _check_topic(topic: str) -> str:
    if not isinstance(topic, str) or not TOPIC_PATTERN.match(topic):
        raise InvalidMessageError(f"topic {topic!r} is invalid; it must match "
                                  "^[%|a-zA-Z0-9_-]{1,127}$")
    return topic


class ConsumerOffsets:
    """Owns the consumer offset table of one data directory."""

    def __init__(self, data_dir: Path | str):
        self.path = Path(data_dir) / "config" / FILE_NAME
        self._lock = threading.Lock()

    def _load(self) -> dict[str, dict[str, int]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            table = json.loads(raw.decode("utf-8"))["offsetTable"]
            loaded = {key: {str(int(q)): int(o) for q, o in queues.items()}
                      for key, queues in table.items()}
            for key in loaded:
                topic, _, group = key.rpartition("@")
                _check_topic(topic), check_group(group)
            return loaded
        except (ValueError, KeyError, TypeError, AttributeError, InvalidMessageError):
            raise CorruptRecordError(f"consumer offset file {self.path} is damaged; move it "
                                     "away to start every group from its queue's first offset",
                                     where=str(self.path), raw=raw) from None

    def get(self, topic: str, group: str, queue_id: int) -> int:
        """The group's next offset in ``topic``/``queue_id`` (0 if it has consumed nothing)."""
        _check_topic(topic), check_group(group)
        with self._lock:
            return self._load().get(f"{topic}@{group}", {}).get(str(queue_id), 0)

    def find(self, topic: str, group: str, queue_id: int) -> int | None:
        """The group's next offset in ``topic``/``queue_id``, or None if it never committed one
        (a RocketMQ broker answers QUERY_NOT_FOUND there, not 0)."""
        _check_topic(topic), check_group(group)
        with self._lock:
            return self._load().get(f"{topic}@{group}", {}).get(str(queue_id))

    def table(self) -> dict[tuple[str, str, int], int]:
        """Every remembered offset as {(topic, group, queue id): next offset}."""
        with self._lock:
            loaded = self._load()
        return {(*key.rsplit("@", 1), int(q)): o for key, queues in loaded.items()  # type: ignore
                for q, o in queues.items()}

    def commit(self, topic: str, group: str, queue_id: int, next_offset: int) -> None:
        _check_topic(topic), check_group(group)
        with self._lock:
            table = self._load()
            table.setdefault(f"{topic}@{group}", {})[str(queue_id)] = next_offset
            self._write(table)

    def commit_many(self, offsets: dict[tuple[str, str, int], int]) -> None:
        """Commit {(topic, group, queue id): next offset} with one write of the file."""
        for topic, group, _ in offsets:
            _check_topic(topic), check_group(group)
        if not offsets:
            return
        with self._lock:
            table = self._load()
            for (topic, group, queue_id), next_offset in offsets.items():
                table.setdefault(f"{topic}@{group}", {})[str(queue_id)] = next_offset
            self._write(table)

    def clamp(self, max_offset: Callable[[str, int], int]) -> list[str]:
        """Move every offset beyond its queue's end (``max_offset(topic, queue_id)``) back to
        it; returns one line per offset moved (empty, and nothing written, when none is)."""
        with self._lock:
            if not self.path.exists():
                return []
            table = self._load()
            moved = []
            for key, queues in table.items():
                topic, _, group = key.rpartition("@")
                for queue_id, offset in queues.items():
                    end = max_offset(topic, int(queue_id))
                    if offset > end:
                        queues[queue_id] = end
                        moved.append(f"consumer group {group} on {topic}/{queue_id}: offset "
                                     f"{offset} was beyond the queue's end {end}; clamped to it")
            if moved:
                for line in moved:
                    log.warning("%s", line)
                self._write(table)
            return moved

    def _write(self, table: dict[str, dict[str, int]]) -> None:
        private_dir(self.path.parent)
        replace_durably(self.path, json.dumps({"offsetTable": table}, indent=1,
                                              sort_keys=True).encode("utf-8"))
