"""Consumer group offsets of ``rtimer consume``, kept in ``<data>/config/consumerOffset.json``.

The file has RocketMQ's shape: ``{"offsetTable": {"<topic>@<group>": {"<queue id>": next offset}}}``.
It is written crash-safely (temp file in the same directory, fsync, ``os.replace``, then an fsync
of the directory), so a crash leaves either the old table or the new one. Only the process that
holds the broker's data-dir lock reads or writes it, so no file lock is needed here.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from rocks_timer.errors import CorruptRecordError

FILE_NAME = "consumerOffset.json"


class ConsumerOffsets:
    """Owns the consumer offset table of one data directory."""

    def __init__(self, data_dir: Path | str):
        self.path = Path(data_dir) / "config" / FILE_NAME
        self._lock = threading.Lock()

    def _load(self) -> dict[str, dict[str, int]]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            table = json.loads(text)["offsetTable"]
            return {key: {str(q): int(o) for q, o in queues.items()}
                    for key, queues in table.items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            raise CorruptRecordError(f"consumer offset file {self.path} is not valid; move it "
                                     "away to start every group from offset 0",
                                     where=str(self.path)) from None

    def get(self, topic: str, group: str, queue_id: int) -> int:
        """The group's next offset in ``topic``/``queue_id`` (0 if it has consumed nothing)."""
        with self._lock:
            return self._load().get(f"{topic}@{group}", {}).get(str(queue_id), 0)

    def table(self) -> dict[tuple[str, str, int], int]:
        """Every remembered offset as {(topic, group, queue id): next offset}."""
        with self._lock:
            loaded = self._load()
        return {(*key.rsplit("@", 1), int(q)): o for key, queues in loaded.items()  # type: ignore
                for q, o in queues.items() if "@" in key}

    def commit(self, topic: str, group: str, queue_id: int, next_offset: int) -> None:
        with self._lock:
            table = self._load()
            table.setdefault(f"{topic}@{group}", {})[str(queue_id)] = next_offset
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(FILE_NAME + ".tmp")
            with open(tmp, "w", encoding="utf-8") as out:
                json.dump({"offsetTable": table}, out, indent=1, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
