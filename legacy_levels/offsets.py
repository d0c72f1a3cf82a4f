"""The delay-level offset table and its crash-safe file ``<root>/config/delayOffset.json``.

The table maps a delay level (1-based) to the **next** ``SCHEDULE_TOPIC_XXXX`` ConsumeQueue offset
that level has to process, as RocketMQ's ``offsetTable``. Its file looks like::

    {"dataVersion": {"counter": 3, "stateVersion": 0, "timestamp": 1700000000000},
     "offsetTable": {"1": 12, "2": 0}}

RocketMQ (fastjson) writes the integer keys unquoted (``{1:12}``), which is not JSON; the reader
accepts both spellings, the writer always quotes them.
"""
from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from rocks_timer.errors import CorruptRecordError
from rocks_timer.fileio import fsync_dir, mkdir_durably

OFFSET_FILE_NAME = "delayOffset.json"
BACKUP_SUFFIX = ".bak"
CORRUPT_SUFFIX = ".corrupt"
VERSION_STEP = 200  # RocketMQ's delayOffsetUpdateVersionStep

_UNQUOTED_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


@dataclass
class DataVersion:
    """RocketMQ's DataVersion: a counter bumped every ``VERSION_STEP`` offset updates."""

    counter: int = 0
    state_version: int = 0
    timestamp_ms: int = 0

    def to_json(self) -> dict:
        return {"counter": self.counter, "stateVersion": self.state_version,
                "timestamp": self.timestamp_ms}


class DelayOffsetTable:
    """Owns the level -> next-offset map and its DataVersion (thread-safe).

    ``update`` is the counted path (the delivery loop); ``clamp`` and ``merge`` are the load path
    and do not move the DataVersion.
    """

    def __init__(self, now_ms: Callable[[], int]):
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._offsets: dict[int, int] = {}
        self.data_version = DataVersion()
        self._updates = 0

    def get(self, level: int, default: int = 0) -> int:
        with self._lock:
            return self._offsets.get(level, default)

    def __contains__(self, level: int) -> bool:
        with self._lock:
            return level in self._offsets

    def update(self, level: int, offset: int) -> None:
        with self._lock:
            self._offsets[level] = offset
            self._updates += 1
            if self._updates % VERSION_STEP == 0:
                self.data_version.counter += 1
                self.data_version.timestamp_ms = self._now_ms()

    def clamp(self, level: int, min_offset: int, max_offset: int) -> int:
        with self._lock:
            offset = min(max(self._offsets.get(level, min_offset), min_offset), max_offset)
            self._offsets[level] = offset
            return offset

    def merge(self, offsets: Mapping[int, int], version: DataVersion | None) -> None:
        with self._lock:
            self._offsets.update(offsets)
            if version is not None:
                self.data_version = version

    def snapshot(self) -> dict[int, int]:
        with self._lock:
            return dict(self._offsets)

    def encode(self) -> str:
        with self._lock:
            doc = {"dataVersion": self.data_version.to_json(),
                   "offsetTable": {str(k): v for k, v in sorted(self._offsets.items())}}
        return json.dumps(doc, indent="\t", sort_keys=True) + "\n"


def decode_offsets(text: str) -> tuple[dict[int, int], DataVersion | None]:
    """Parse a delayOffset.json document; quoted or unquoted integer keys; dataVersion optional.

    Raises ``CorruptRecordError`` when the text is not such a document.
    """
    try:
        doc = json.loads(text)
    except ValueError:
        try:
            doc = json.loads(_UNQUOTED_KEY.sub(r'\1"\2"\3', text))
        except ValueError as exc:
            raise CorruptRecordError(f"{OFFSET_FILE_NAME} is not JSON: {exc}", raw=text.encode()) \
                from None
    if not isinstance(doc, dict):
        raise CorruptRecordError(f"{OFFSET_FILE_NAME}: expected an object, got {type(doc).__name__}")
    table = doc.get("offsetTable", {})
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise CorruptRecordError(f"{OFFSET_FILE_NAME}: offsetTable is not an object")
    offsets: dict[int, int] = {}
    for key, value in table.items():
        try:
            level = int(key)
        except (TypeError, ValueError):
            raise CorruptRecordError(f"{OFFSET_FILE_NAME}: level key {key!r} is not an integer") \
                from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise CorruptRecordError(f"{OFFSET_FILE_NAME}: offset {value!r} of level {level} "
                                     "is not an integer")
        offsets[level] = value
    version = None
    raw_version = doc.get("dataVersion")
    if isinstance(raw_version, dict):
        try:
            version = DataVersion(int(raw_version.get("counter", 0)),
                                  int(raw_version.get("stateVersion", 0)),
                                  int(raw_version.get("timestamp", 0)))
        except (TypeError, ValueError):
            raise CorruptRecordError(f"{OFFSET_FILE_NAME}: dataVersion {raw_version!r} is malformed") \
                from None
    return offsets, version


@dataclass(frozen=True)
class LoadResult:
    """What ``DelayOffsetFile.load`` found: ``source`` is ``file``, ``bak`` or ``empty``."""

    offsets: dict[int, int]
    version: DataVersion | None
    source: str
    problems: tuple[str, ...] = ()


class DelayOffsetFile:
    """Owns ``<root>/config/delayOffset.json`` and its ``.bak``: crash-safe write, tolerant read.

    Write order: new content to a temp file in the same directory, fsync; the current file
    becomes ``.bak`` (``os.replace``); the temp file becomes the current file (``os.replace``);
    the directory is fsynced. A crash at any point leaves the current file, or no current file
    and a ``.bak`` with the previous content; ``load`` reads whichever exists.
    """

    def __init__(self, root: Path):
        self.dir = Path(root) / "config"
        self.path = self.dir / OFFSET_FILE_NAME
        self.bak_path = self.dir / (OFFSET_FILE_NAME + BACKUP_SUFFIX)

    def write(self, text: str) -> None:
        mkdir_durably(self.dir)
        tmp = self.dir / f"{OFFSET_FILE_NAME}.tmp.{os.getpid()}.{threading.get_ident()}"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if self.path.exists():
            os.replace(self.path, self.bak_path)
        os.replace(tmp, self.path)
        fsync_dir(self.dir)

    def load(self) -> LoadResult:
        """Current file, else ``.bak``, else an empty table; a bad file is set aside as .corrupt."""
        problems: list[str] = []
        for candidate, source in ((self.path, "file"), (self.bak_path, "bak")):
            try:
                text = candidate.read_text(encoding="utf-8")
            except FileNotFoundError:
                problems.append(f"{candidate.name} missing")
                continue
            except PermissionError:
                raise  # not damage: falling back would restart every level from its queue's start
            except (OSError, UnicodeDecodeError) as exc:
                problems.append(f"{candidate.name} unreadable: {exc}")
                self._set_aside(candidate)
                continue
            if not text.strip():
                problems.append(f"{candidate.name} empty")
                candidate.unlink(missing_ok=True)
                continue
            try:
                offsets, version = decode_offsets(text)
            except CorruptRecordError as exc:
                problems.append(f"{candidate.name} corrupt: {exc}")
                self._set_aside(candidate)
                continue
            return LoadResult(offsets, version, source, tuple(problems))
        return LoadResult({}, None, "empty", tuple(problems))

    def _set_aside(self, path: Path) -> None:
        """Keep a bad file for inspection instead of deleting it (RocketMQ deletes it)."""
        try:
            os.replace(path, path.with_name(path.name + CORRUPT_SUFFIX))
        except OSError:
            pass
