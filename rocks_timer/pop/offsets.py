"""Pop offsets: the next ConsumeQueue offset each consumer group pops from, per topic and queue.

Kept in ``<data>/config/popOffset.json`` with RocketMQ's shape ``{"offsetTable": {"<topic>@<group>":
{"<queue id>": next offset}}}`` and rewritten (temp file, ``os.replace``; fsync too when
``flush_disk_type`` is ``sync``) after every pop, *after* the invisibility records of the popped
messages are in the timer engine: a crash in between can make a message be popped twice (RocketMQ's
pop is at-least-once too), never lost. A damaged file is reported and set aside; every group then
starts again from the oldest message it can still read.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

from rocks_timer.fileio import mkdir_durably, replace_durably

log = logging.getLogger(__name__)
FILE_NAME = "popOffset.json"


class PopOffsets:
    """Owns the pop offset table of one data directory (in memory, written through)."""

    def __init__(self, data_dir: Path | str, sync: bool = False):
        self.path = Path(data_dir) / "config" / FILE_NAME
        self.sync = sync
        self._lock = threading.Lock()
        self._table: dict[str, dict[str, int]] = self._load()

    def _load(self) -> dict[str, dict[str, int]]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            table = json.loads(text)["offsetTable"]
            return {str(key): {str(q): int(o) for q, o in queues.items()}
                    for key, queues in table.items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            aside = self.path.with_name(FILE_NAME + ".corrupt")
            os.replace(self.path, aside)
            log.error("pop offset file %s is damaged; moved to %s, groups pop from their "
                      "oldest readable message again", self.path, aside)
            return {}

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        with self._lock:
            return self._table.get(f"{topic}@{group}", {}).get(str(queue_id))

    def commit(self, updates: dict[tuple[str, str, int], int]) -> None:
        """Set ``{(group, topic, queue id): next offset}`` and write the table through."""
        if not updates:
            return
        with self._lock:
            for (group, topic, queue_id), offset in updates.items():
                self._table.setdefault(f"{topic}@{group}", {})[str(queue_id)] = offset
            data = json.dumps({"offsetTable": self._table}, sort_keys=True).encode()
            mkdir_durably(self.path.parent)
            if self.sync:  # the new table, then its name, are on disk when this returns
                replace_durably(self.path, data)
                return
            tmp = self.path.with_name(FILE_NAME + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, self.path)

    def table(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {k: dict(v) for k, v in self._table.items()}
