"""The library calls the CLI makes instead of reaching into an engine's package:
``rocks_timer.repair.repair_timer_store`` and ``ReadOnlyView.export_set_aside``."""
from __future__ import annotations

import json

import pytest

from rocks_timer import Broker, BrokerConfig, Message
from rocks_timer.errors import UnsupportedOperationError
from rocks_timer.readonly import ReadOnlyView
from rocks_timer.repair import repair_timer_store


def _listing(root):
    return sorted((p.relative_to(root).as_posix(), p.stat().st_size)
                  for p in root.rglob("*") if p.is_file())


def test_repair_refuses_a_data_dir_of_another_engine_and_changes_nothing(tmp_path):
    config = BrokerConfig(timer_engine="wheel")
    with Broker.open(tmp_path / "d", config) as broker:
        broker.send(Message(topic="t", body=b"x"), delay_ms=60_000)
    before = _listing(tmp_path / "d")
    with pytest.raises(UnsupportedOperationError, match="runs the wheel engine"):
        repair_timer_store(tmp_path / "d", config)
    assert _listing(tmp_path / "d") == before


def test_repair_leaves_a_sound_rocksdb_store_alone(tmp_path):
    config = BrokerConfig(timer_engine="rocksdb")
    with Broker.open(tmp_path / "d", config) as broker:
        broker.send(Message(topic="t", body=b"x"), delay_ms=60_000)
    report = repair_timer_store(tmp_path / "d", config).as_dict()
    assert report["ok"]
    with Broker.open(tmp_path / "d", config) as broker:
        assert broker.pending_count() == 1


def test_export_set_aside_from_a_read_only_view(tmp_path):
    with Broker.open(tmp_path / "d", BrokerConfig(timer_engine="rocksdb")) as broker:
        broker.send(Message(topic="t", body=b"x"), delay_ms=60_000)
    with ReadOnlyView(tmp_path / "d", None) as view:
        result = view.export_set_aside(tmp_path / "out")
    assert result["exported"] == 0
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["messages"] == []
