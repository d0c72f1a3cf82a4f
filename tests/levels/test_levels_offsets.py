"""delayOffset.json: shape, lenient reading, .bak fallback, clamping, DataVersion (behaviours 19-25)."""
from __future__ import annotations

import json
import os

import pytest

from legacy_levels.offsets import (VERSION_STEP, DataVersion, DelayOffsetFile, DelayOffsetTable,
                                   decode_offsets)
from legacy_levels.service import ScheduleMessageService
from tests.support.levels_support import T0_MS, open_store, park
from rocks_timer.clock import ManualClock
from rocks_timer.errors import CorruptRecordError


def table_with(clock, offsets):
    table = DelayOffsetTable(clock.now_ms)
    table.merge(offsets, None)
    return table


def test_persisted_shape_and_round_trip(tmp_path):
    clock = ManualClock(T0_MS)
    table = table_with(clock, {1: 12, 2: 0, 18: 7})
    table.data_version = DataVersion(3, 0, T0_MS)
    file = DelayOffsetFile(tmp_path)
    file.write(table.encode())
    assert file.path == tmp_path / "config" / "delayOffset.json"
    doc = json.loads(file.path.read_text())
    assert doc == {"dataVersion": {"counter": 3, "stateVersion": 0, "timestamp": T0_MS},
                   "offsetTable": {"1": 12, "2": 0, "18": 7}}
    loaded = file.load()
    assert loaded.source == "file"
    assert loaded.offsets == {1: 12, 2: 0, 18: 7}
    assert loaded.version == DataVersion(3, 0, T0_MS)


def test_unquoted_integer_keys_are_accepted():
    text = '{"dataVersion":{"counter":1,"stateVersion":0,"timestamp":5},"offsetTable":{1:3,2:5}}'
    offsets, version = decode_offsets(text)
    assert offsets == {1: 3, 2: 5}
    assert version == DataVersion(1, 0, 5)
    # fastjson's pretty form, tabs and newlines, keys unquoted
    offsets, _ = decode_offsets('{\n\t"offsetTable":{\n\t\t1:3,\n\t\t17:-2\n\t}\n}')
    assert offsets == {1: 3, 17: -2}


def test_data_version_is_optional_and_empty_wrapper_decodes():
    assert decode_offsets('{"offsetTable":{"4":9}}') == ({4: 9}, None)
    assert decode_offsets("{}") == ({}, None)


@pytest.mark.parametrize("text", ["not json", "[1,2]", '{"offsetTable":[1]}',
                                  '{"offsetTable":{"a":1}}', '{"offsetTable":{"1":"x"}}',
                                  '{"offsetTable":{"1":1.5}}'])
def test_malformed_documents_raise(text):
    with pytest.raises(CorruptRecordError):
        decode_offsets(text)


def test_missing_file_loads_empty(tmp_path):
    loaded = DelayOffsetFile(tmp_path).load()
    assert loaded.source == "empty"
    assert loaded.offsets == {}


def test_second_persist_moves_first_to_bak(tmp_path):
    clock = ManualClock(T0_MS)
    file = DelayOffsetFile(tmp_path)
    file.write(table_with(clock, {1: 1}).encode())
    file.write(table_with(clock, {1: 2}).encode())
    assert decode_offsets(file.bak_path.read_text())[0] == {1: 1}
    assert decode_offsets(file.path.read_text())[0] == {1: 2}
    assert not [p for p in file.dir.iterdir() if ".tmp" in p.name]


@pytest.mark.parametrize("damage", ["corrupt", "empty", "missing"])
def test_damaged_file_falls_back_to_bak(tmp_path, damage):
    clock = ManualClock(T0_MS)
    file = DelayOffsetFile(tmp_path)
    file.write(table_with(clock, {1: 4, 2: 6}).encode())
    file.write(table_with(clock, {1: 5, 2: 7}).encode())
    if damage == "corrupt":
        file.path.write_text('{"offsetTable":{1:5,')
    elif damage == "empty":
        file.path.write_text("")
    else:
        file.path.unlink()
    loaded = file.load()
    assert loaded.source == "bak"
    assert loaded.offsets == {1: 4, 2: 6}
    if damage == "corrupt":  # set aside for inspection, not deleted
        assert (file.dir / "delayOffset.json.corrupt").read_text() == '{"offsetTable":{1:5,'


def test_corrupt_file_and_corrupt_bak_load_empty(tmp_path):
    file = DelayOffsetFile(tmp_path)
    file.dir.mkdir(parents=True)
    file.path.write_text("garbage")
    file.bak_path.write_text("{also garbage")
    loaded = file.load()
    assert loaded.source == "empty"
    assert len(loaded.problems) == 2


def test_crash_between_renames_keeps_previous_content(tmp_path):
    """A crash after the current file moved to .bak but before the new one landed."""
    clock = ManualClock(T0_MS)
    file = DelayOffsetFile(tmp_path)
    file.write(table_with(clock, {1: 9}).encode())
    os.replace(file.path, file.bak_path)  # the state such a crash leaves
    (file.dir / "delayOffset.json.tmp.1.2").write_text('{"offsetTable":{"1":10}}')
    assert file.load().offsets == {1: 9}


def test_data_version_counter_steps_every_200_updates():
    clock = ManualClock(T0_MS)
    table = DelayOffsetTable(clock.now_ms)
    for i in range(VERSION_STEP - 1):
        table.update(1, i)
    assert table.data_version.counter == 0
    clock.advance(5)
    table.update(1, 500)
    assert table.data_version.counter == 1
    assert table.data_version.timestamp_ms == T0_MS + 5
    for i in range(VERSION_STEP):
        table.update(2, i)
    assert table.data_version.counter == 2
    table.clamp(1, 0, 0)  # the load path does not count
    assert table.data_version.counter == 2


def test_clamp_below_inside_above():
    table = table_with(ManualClock(0), {1: 2, 2: 50, 3: 500})
    assert table.clamp(1, 10, 100) == 10
    assert table.clamp(2, 10, 100) == 50
    assert table.clamp(3, 10, 100) == 100
    assert table.clamp(4, 10, 100) == 10  # a level never seen starts at the queue's head


def test_load_clamps_into_empty_queues(tmp_path):
    """testLoad: offsets {1:3, 2:5} persisted, both schedule queues empty -> {1:0, 2:0}."""
    clock = ManualClock(T0_MS)
    store, cfg = open_store(tmp_path, clock, message_delay_level="5s 8s")
    try:
        DelayOffsetFile(tmp_path).write(table_with(clock, {1: 3, 2: 5}).encode())
        service = ScheduleMessageService(tmp_path, store, cfg, clock)
        service.load()
        # no schedule queue holds anything yet: every level starts at 0
        assert (service.offset(1), service.offset(2)) == (0, 0)
        # a message parked after the load is still delivered (the stale 3 did not skip it)
        park(store, 1)
        clock.advance(5_000)
        assert service.tick() == 1
        DelayOffsetFile(tmp_path).write(table_with(clock, {1: 3, 2: 5}).encode())
        park(store, 1)
        park(store, 2)
        service = ScheduleMessageService(tmp_path, store, cfg, clock)
        service.load()
        assert service.offset(1) == 2 and service.offset(2) == 1  # clamped to cq.max
        assert service.offset_file_source == "file"
    finally:
        store.close()


def test_random_offsets_clamp_to_queue_range(tmp_path):
    import random
    rng = random.Random(7)
    clock = ManualClock(T0_MS)
    store, cfg = open_store(tmp_path, clock, message_delay_level="5s 8s")
    try:
        park(store, 1)
        park(store, 1)
        park(store, 2)
        offsets = {1: rng.randrange(1 << 62), 2: -rng.randrange(1 << 62)}
        assert decode_offsets(table_with(clock, offsets).encode())[0] == offsets
        DelayOffsetFile(tmp_path).write(table_with(clock, offsets).encode())
        service = ScheduleMessageService(tmp_path, store, cfg, clock)
        service.load()
        assert (service.offset(1), service.offset(2)) == (2, 0)
    finally:
        store.close()
