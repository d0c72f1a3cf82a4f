"""``Database``: one open RocksDB of the timer store and its column families.

The store's parts never hold an ``Rdict`` of their own: they receive this object and read its
families (``timer``, ``meta``, ``corrupt``) and handles, and every write goes through
:meth:`Database.write` with the store's write options (sync mode: a write returns once it is on
disk). The key index and the counters live in ``meta`` (``keys`` is the same family), so a
store keeps the column families it was created with.

Opening, the refusal to create a database over damaged files and RocksDB's repair live in
:mod:`rocks_timer.timer.rocksdb.opening`; this object is what an open yields.
"""
from __future__ import annotations

from typing import Any, Sequence

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from rocks_timer.timer.rocksdb.profiles import parse_tickers

TIMER_CF, META_CF, CORRUPT_CF = "timer", "meta", "corrupt"


class Database:
    """Owns the ``Rdict``, its options (they hold the statistics tickers), the three column
    families with their handles, and the write options. ``close`` drops every handle before
    the DB: a live handle would keep the RocksDB LOCK held."""

    def __init__(self, db: Rdict, db_options: Options, sync_writes: bool) -> None:
        self._db: Rdict | None = db
        self._db_options = db_options
        self.timer: Any = db.get_column_family(TIMER_CF)
        self.meta: Any = db.get_column_family(META_CF)
        self.corrupt: Any = db.get_column_family(CORRUPT_CF)
        self.timer_h: Any = db.get_column_family_handle(TIMER_CF)
        self.meta_h: Any = db.get_column_family_handle(META_CF)
        self.corrupt_h: Any = db.get_column_family_handle(CORRUPT_CF)
        self._write_opts = WriteOptions()
        # a send returns once its batch is on disk in sync mode
        self._write_opts.sync = sync_writes

    @property
    def sync_writes(self) -> bool:
        return self._write_opts.sync

    def write(self, batch: WriteBatch) -> None:
        """Write ``batch`` atomically with the store's write options."""
        self._db.write(batch, self._write_opts)

    def write_unsynced(self, batch: WriteBatch) -> None:
        """Write with RocksDB's default options (builds on open: redone from scratch if lost)."""
        self._db.write(batch)

    def write_synced(self, batch: WriteBatch) -> None:
        opts = WriteOptions()
        opts.sync = True
        self._db.write(batch, opts)

    def flush_wal(self) -> None:
        self._db.flush_wal(True)

    def flush(self, families: Sequence[str], wait: bool) -> None:
        """Flush the memtables of the named families."""
        for name in families:
            self._db.get_column_family(name).flush(wait)

    def get_column_family(self, name: str) -> Any:
        """A column family by name (``meta.load`` reads through this, as through an Rdict)."""
        return self._db.get_column_family(name)

    def get_column_family_handle(self, name: str) -> Any:
        return self._db.get_column_family_handle(name)

    def property_int(self, name: str) -> int:
        return self._db.property_int_value(name) or 0

    def timer_property_int(self, name: str) -> int:
        """An integer property of the ``timer`` family, 0 where this build reports it as text
        or not at all."""
        try:
            return self.timer.property_int_value(name) or 0
        except Exception:  # noqa: BLE001 - a property this RocksDB build does not report as int
            return 0

    def statistics(self) -> str | None:
        """RocksDB's statistics dump of this DB (tickers and histograms, since open)."""
        return self._db_options.get_statistics()

    def tickers(self) -> dict[str, int]:
        """All RocksDB statistics tickers of this DB (cumulative since open)."""
        return parse_tickers(self.statistics())

    def close(self) -> None:
        db = self._db
        if db is None:
            return
        self.timer = self.meta = self.corrupt = None
        self.timer_h = self.meta_h = self.corrupt_h = None
        self._db = None
        db.close()
        del db
