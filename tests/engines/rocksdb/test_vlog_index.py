"""The vlog index's own compaction (``vlog_index_compaction``, format setting
``format.index_compaction``): new vlog stores compact their index universally, stores made
before keep opening as they were. Real RocksDB, real files."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from rocks_timer import BrokerConfig
from rocks_timer.errors import ConfigError
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import RocksTimerStore
from tests.support.rocks_support import BIG, T0, rec  # noqa: F401


def timer_style(path: Path, family: str = "timer") -> str:
    """The compaction style RocksDB itself ran a column family with (its newest OPTIONS file)."""
    newest = max(path.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    section = newest.read_text().split(f'[CFOptions "{family}"]', 1)[1].split("[", 1)[0]
    return re.search(r"compaction_style=(\w+)", section).group(1)


def stored(path: Path, name: bytes) -> bytes | None:
    db = Rdict(str(path), Options(raw_mode=True), column_families={
        n: Options(raw_mode=True) for n in Rdict.list_cf(str(path)) if n != "default"})
    meta = db.get_column_family("meta")
    value = meta.get(name)
    del meta
    db.close()
    return None if value is None else bytes(value)


def fill_and_drain(path: Path, config: BrokerConfig, n: int = 300) -> None:
    with RocksTimerStore.open(path, config) as store:
        store.schedule([rec(i, T0 + 1_000 + i, body=bytes(600)) for i in range(n)], T0)
        store.flush()
    with RocksTimerStore.open(path, config) as store:
        got = store.claim_due(T0 + 10_000, 10 * n, BIG)
        store.complete(got, None)
        assert len(got) == n and store.stats().pending == 0


def test_a_new_vlog_store_compacts_its_index_universally(tmp_path):
    path = tmp_path / "timer"
    fill_and_drain(path, BrokerConfig())
    with RocksTimerStore.open(path, BrokerConfig()) as store:
        assert store.stats().extra["index_compaction"] == "universal"
    assert timer_style(path) == "kCompactionStyleUniversal"
    assert stored(path, K.META_INDEX_COMPACTION) == b"universal"
    # the profile's own style is still checked as before (blob: level)
    assert stored(path, K.META_COMPACTION_STYLE) == b"level"


def test_a_vlog_store_made_before_keeps_its_leveled_index(tmp_path):
    path = tmp_path / "timer"
    before = BrokerConfig(vlog_index_compaction="profile")  # the index as older code made it
    with RocksTimerStore.open(path, before) as store:
        store.schedule([rec(i, T0 + 1_000 + i, body=bytes(600)) for i in range(50)], T0)
    db = Rdict(str(path), Options(raw_mode=True), column_families={
        n: Options(raw_mode=True) for n in Rdict.list_cf(str(path)) if n != "default"})
    db.get_column_family("meta").delete(K.META_INDEX_COMPACTION)  # what older code wrote
    db.close()
    with RocksTimerStore.open(path, BrokerConfig()) as store:  # the default says universal
        assert store.layout == "vlog" and store.stats().extra["index_compaction"] == "profile"
        got = store.claim_due(T0 + 10_000, 100, BIG)
        store.complete(got, None)
        assert len(got) == 50
    assert timer_style(path) == "kCompactionStyleLevel"
    assert stored(path, K.META_INDEX_COMPACTION) is None  # nothing rewritten


def test_the_setting_chooses_for_new_stores_only(tmp_path):
    path = tmp_path / "timer"
    fill_and_drain(path, BrokerConfig(vlog_index_compaction="profile"))
    assert stored(path, K.META_INDEX_COMPACTION) == b"profile"
    with RocksTimerStore.open(path, BrokerConfig(vlog_index_compaction="universal")) as store:
        assert store.stats().extra["index_compaction"] == "profile"
    assert timer_style(path) == "kCompactionStyleLevel"
    inline = tmp_path / "inline"
    fill_and_drain(inline, BrokerConfig(rocksdb_layout="inline"))
    assert stored(inline, K.META_INDEX_COMPACTION) is None
    assert timer_style(inline) == "kCompactionStyleLevel"


def test_an_unknown_index_compaction_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="vlog_index_compaction.*universal, profile"):
        BrokerConfig(vlog_index_compaction="fifo").validate()
    conf = tmp_path / "broker.conf"
    conf.write_text("vlogIndexCompaction=profile\n")
    assert BrokerConfig.from_broker_conf(conf).vlog_index_compaction == "profile"


@pytest.mark.parametrize("layout", ["vlog", "inline"])
def test_a_new_store_compacts_its_meta_universally(tmp_path, layout):
    """The due counters live in ``meta``: a new store of either layout compacts it
    universally and records so in ``format.meta_compaction``."""
    path = tmp_path / "timer"
    fill_and_drain(path, BrokerConfig(rocksdb_layout=layout))
    with RocksTimerStore.open(path, BrokerConfig()) as store:
        assert store.stats().extra["meta_compaction"] == "universal"
        assert store.check()["problems"] == []
    assert timer_style(path, "meta") == "kCompactionStyleUniversal"
    assert stored(path, K.META_META_COMPACTION) == b"universal"


def test_a_store_made_before_keeps_its_leveled_meta(tmp_path, monkeypatch):
    from rocks_timer.timer.rocksdb import meta as rocks_meta
    path = tmp_path / "timer"
    with monkeypatch.context() as m:  # a store as older code made it: leveled meta, no row
        m.setattr(rocks_meta, "NEW_META_COMPACTION", "level")
        with RocksTimerStore.open(path, BrokerConfig()) as store:
            store.schedule([rec(i, T0 + 1_000 + i, body=bytes(600)) for i in range(50)], T0)
    db = Rdict(str(path), Options(raw_mode=True), column_families={
        n: Options(raw_mode=True) for n in Rdict.list_cf(str(path)) if n != "default"})
    db.get_column_family("meta").delete(K.META_META_COMPACTION)
    db.close()
    with RocksTimerStore.open(path, BrokerConfig()) as store:
        assert store.stats().extra["meta_compaction"] == "level"
        got = store.claim_due(T0 + 10_000, 100, BIG)
        store.complete(got, None)
        assert len(got) == 50 and store.count_due([(None, None)]) == [0]
    assert timer_style(path, "meta") == "kCompactionStyleLevel"
    assert stored(path, K.META_META_COMPACTION) is None  # nothing rewritten


def test_a_meta_row_that_disagrees_with_the_open_is_refused(tmp_path):
    from rocks_timer.timer.rocksdb import meta as rocks_meta
    path = tmp_path / "timer"
    fill_and_drain(path, BrokerConfig())
    with RocksTimerStore.open(path, BrokerConfig()) as store:
        db = store.db
        with pytest.raises(ConfigError, match="format.meta_compaction is 'universal' on disk"):
            rocks_meta.load(db, "meta", "level", str(path), "vlog", "universal", "level")
