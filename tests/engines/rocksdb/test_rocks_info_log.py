"""RocksDB's info LOG files stay few: every open starts a new one (each CLI command is an open),
and RocksDB keeps 1,000 old ones by default."""
from __future__ import annotations

import pytest

from rocks_timer.config import BrokerConfig
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.rocksdb.profiles import INFO_LOG_FILES

OPENS = INFO_LOG_FILES + 7


def info_logs(path):
    return sorted(p.name for p in path.iterdir() if p.name == "LOG" or p.name.startswith("LOG."))


@pytest.mark.parametrize("profile,layout", [("default", "vlog"), ("universal", "inline")])
def test_many_opens_keep_a_few_info_logs(tmp_path, profile, layout):
    path = tmp_path / "timer-rocksdb"
    config = BrokerConfig(rocksdb_profile=profile, rocksdb_layout=layout)
    for _ in range(OPENS):
        with RocksTimerStore.open(path, config):
            pass
    logs = info_logs(path)
    assert "LOG" in logs and len(logs) <= INFO_LOG_FILES, logs
