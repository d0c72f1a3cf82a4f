"""``repair_timer_store``: ``rtimer repair`` as one library call, so the CLI never reaches
into an engine's package (docs/DECISIONS.md "Import contracts").

The caller holds the data dir (no broker runs on it: ``cli.session``'s lock). Only the RocksDB
engine has a repair (``rocks_timer.timer.rocksdb.recovery``); a data dir that runs another
engine is refused and nothing changes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rocks_timer import datadir
from rocks_timer.config import BrokerConfig
from rocks_timer.errors import UnsupportedOperationError


def repair_timer_store(data_dir: Path | str, config: BrokerConfig, *, rebuild: bool = False
                       ) -> Any:
    """Repair ``data_dir``'s RocksDB timer store crash-safely and name what is lost; a store
    that opens and passes its check is left alone unless ``rebuild``. Returns the engine's
    repair report (``.as_dict()``, ``ok``)."""
    data_dir = Path(data_dir)
    stored = datadir.read_format(data_dir) or {}
    engine = stored.get("timer_engine", "rocksdb")
    if engine != "rocksdb":
        raise UnsupportedOperationError(f"data dir {data_dir} runs the {engine} engine; "
                                        "`repair` repairs the rocksdb engine's store")
    from rocks_timer.timer.rocksdb import RocksTimerStore
    return RocksTimerStore.repair(data_dir / "timer-rocksdb", config,
                                  data_dir_in_use=stored.get("timer_engine") == "rocksdb",
                                  rebuild=rebuild)
