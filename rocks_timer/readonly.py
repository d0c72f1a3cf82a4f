"""``ReadOnlyView``: a data directory opened for reading only (``rtimer check`` and the set-aside
list and export when no broker runs).

A ``Broker`` open is recovery: it cuts torn tails, rebuilds ConsumeQueue entries, creates missing
stores and records what it found. A check must see the data dir as it is and change nothing, so
this view opens every part without a writable descriptor: the CommitLog and the ConsumeQueues
``O_RDONLY`` (``ReadOnlyCommitLog``, ``ReadOnlyConsumeQueue``: a torn tail is reported, not cut),
the RocksDB timer store through RocksDB's read-only mode (``ReadOnlyRocksStore``), and the state
files (consumer offsets, delay-level offsets, the loss record) by plain reads. It holds the data
dir's lock shared for its lifetime, so no broker opens (and recovers) the directory meanwhile;
a running broker holds it exclusively, and then the commands ask that broker instead.

It exposes what :func:`rocks_timer.check.check_view` walks; its own write path is none.
"""
from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from typing import Any

from rocks_timer import datadir
from rocks_timer.commitlog import ReadOnlyCommitLog
from rocks_timer.commitlog_loss import LossLedger, LossRecord, find_loss
from rocks_timer.config import BrokerConfig
from rocks_timer.consumequeue import ReadOnlyConsumeQueue
from rocks_timer.consumer_offsets import ConsumerOffsets
from rocks_timer.errors import CorruptRecordError, RocksTimerError, StoreLockedError

log = logging.getLogger(__name__)


class ReadOnlyView:
    """One data directory, read only. Use as a context manager."""

    def __init__(self, path: Path | str, config: BrokerConfig | None = None):
        self.path = Path(path)
        self.config = config or datadir.adopt(self.path, BrokerConfig())
        self.problems: list[str] = []  # what opening found that the walks cannot show
        self.notes: list[str] = []  # what this view could not look at
        self._lock_fd = self._lock_shared()
        self.timer: Any = None
        try:
            self.commitlog = ReadOnlyCommitLog(self.path / "commitlog",
                                               self.config.commitlog_segment_size,
                                               sync_flush=False)
            self.queue_list = ReadOnlyConsumeQueue.all_under(
                self.path / "consumequeue", self.config.consume_queue_entries_per_file)
            self.timer_name = self.config.timer_engine
            self.timer = self._open_timer()
            self.problems += self._unwritable()
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------------
    def _lock_shared(self) -> int:
        lock = self.path / "broker.lock"
        try:
            fd = os.open(lock, os.O_RDONLY)
        except FileNotFoundError:
            raise RocksTimerError(f"{self.path} is not an rtimer data dir (no broker.lock)"
                                  ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(f"data dir {self.path} is in use by a running broker; ask "
                                   "it (rtimer commands do)") from None
        return fd

    def _open_timer(self) -> Any:
        engine = self.config.timer_engine
        if engine == "wheel":
            from rocks_timer.timer.wheel.readonly import ReadOnlyWheel
            self.notes.append("timer engine wheel: its pending count is not taken read-only "
                              "(the TimerLog's units, the wheel file, the checkpoint are checked)")
            return ReadOnlyWheel(self.path / "wheel", self.config)
        if engine != "rocksdb":
            return None
        store_dir = self.path / "timer-rocksdb"
        if not store_dir.is_dir():
            if self._shows_use():
                self.problems.append(f"timer store {store_dir} is missing, but the data dir "
                                     "shows use (engine record, CommitLog): its pending "
                                     "messages are gone with it")
            return None
        if not (store_dir / "CURRENT").exists():
            self.problems.append(f"timer store {store_dir} has no CURRENT file: RocksDB "
                                 "cannot open it (rtimer repair)")
            return None
        from rocks_timer.timer.rocksdb.readonly import ReadOnlyRocksStore
        try:
            return ReadOnlyRocksStore(store_dir)
        except CorruptRecordError as exc:
            self.problems.append(str(exc))
            return None

    def _unwritable(self) -> list[str]:
        """Files and directories a broker must write but this user may not (``access(2)``, which
        opens nothing; it also sees the immutable attribute, which stops root)."""
        found = []
        for top, dirs, files in os.walk(self.path):
            for name in [*dirs, *files]:
                full = os.path.join(top, name)
                if name != "rtimer.sock" and not os.path.islink(full) and \
                        not os.access(full, os.W_OK):
                    found.append(f"{full} is not writable by this user: a broker cannot open "
                                 "the data dir until that is fixed")
        return found[:20]

    def _shows_use(self) -> bool:
        return (self.path / datadir.FILE).exists() or any(
            p.name.isdigit() for p in (self.path / "commitlog").glob("*"))

    def close(self) -> None:
        if self.timer is not None:
            self.timer.close()
            self.timer = None
        for queue in getattr(self, "queue_list", []):
            queue.close()
        if getattr(self, "commitlog", None) is not None:
            self.commitlog.close()
            self.commitlog = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "ReadOnlyView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- what check_view walks -----------------------------------------------------------------
    def ends(self) -> tuple[int, dict[tuple[str, int], int]]:
        return (self.commitlog.max_offset,
                {(q.topic, q.queue_id): q.max_offset for q in self.queue_list})

    def queues(self) -> list[ReadOnlyConsumeQueue]:
        return list(self.queue_list)

    def timer_check(self) -> dict[str, Any]:
        if self.timer is None:
            return {"engine": self.timer_name, "pending": None, "problems": []}
        return self.timer.check()

    def consumer_offsets(self) -> dict[tuple[str, str, int], int]:
        return ConsumerOffsets(self.path).table()

    def level_offsets(self) -> dict[int, int]:
        """Delay-level offsets as the level service would load them (file, else ``.bak``),
        read without the loader's clean-up."""
        try:
            from legacy_levels.offsets import BACKUP_SUFFIX, OFFSET_FILE_NAME, decode_offsets
        except ImportError:
            return {}
        base = self.path / "config" / OFFSET_FILE_NAME
        for candidate in (base, base.with_name(base.name + BACKUP_SUFFIX)):
            try:
                text = candidate.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            if not text.strip():
                continue
            try:
                return decode_offsets(text)[0]
            except CorruptRecordError as exc:
                self.problems.append(f"{candidate.name}: {exc}")
        return {}

    def reconcile_from(self) -> int | None:
        return self.timer.reconcile_from() if self.timer is not None else None

    def wheel_queue_offset(self) -> int | None:
        return None

    def loss(self) -> LossRecord:
        """The loss record, plus what the files show now and no open has recorded yet."""
        record = LossLedger(self.path).load()
        known = {(m.topic, m.queue_id, m.queue_offset) for m in record.messages}
        ranges, found = find_loss(self.commitlog, self.queue_list)
        found = [m for m in found if (m.topic, m.queue_id, m.queue_offset) not in known]
        have = {(r.start, r.end) for r in record.ranges}
        return LossRecord(record.ranges + [r for r in ranges if (r.start, r.end) not in have],
                          record.messages + found, record.more_messages, record.accepted,
                          record.accepted_ranges)

    def set_aside(self) -> list[Any]:
        return self.timer.set_aside() if self.timer is not None else []

    def export_set_aside(self, directory: Path | str, msg_ids: list[str] | None = None
                         ) -> dict[str, Any]:
        """``Broker.export_set_aside`` on the files as they are (``rtimer set-aside export``
        while no broker runs): what is readable of the set-aside messages (all, or
        ``msg_ids``) into a new or empty ``directory``. Changes nothing in the data dir."""
        from rocks_timer.timer.rocksdb import setaside
        return setaside.export(setaside.select(self.set_aside(), msg_ids), Path(directory))
