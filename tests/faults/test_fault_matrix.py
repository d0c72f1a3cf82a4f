"""The fault matrix (ARCHITECTURE §4, §7; issue 13): for each log and state file of a data dir and
each fault (torn tail, flipped byte in the middle, missing file, truncated middle file, wrong size,
permissions), what is kept, what is reported and the exit status of ``rtimer check``.

Every row builds a real data dir with small files (three CommitLog segments, four ConsumeQueue
files), damages one real file, reopens it and looks: which of the 60 messages on ``orders`` a
consumer still gets, how many timer messages are pending, what ``stats``/``check`` say.

    file               fault           kept                       reported                exit
    commitlog newest   torn tail       all but the torn record    stats truncated_bytes     0
    commitlog newest   flipped byte    all but that record        corrupt region            1
    commitlog middle   flipped byte    all but that record        corrupt region (check)    1
    commitlog middle   missing         the other segments         entries without record    1
    commitlog middle   truncated       the records before the cut short segment             1
    commitlog          wrong size      everything (refused)       ConfigError naming file   1
    commitlog          permissions     everything (refused)       OS error naming file      1
    consumequeue last  torn tail       all (rebuilt)              -                         0
    consumequeue mid   flipped byte    all (entry repaired)       recovery: repaired        0
    consumequeue mid   missing         all (rebuilt)              recovery: file missing    0
    consumequeue mid   truncated       all (rebuilt)              recovery: file short      0
    consumequeue last  wrong size      all (junk tail cut)        recovery: file too long   0
    consumequeue mid   wrong size      all                        file too long (check)     1
    consumequeue       permissions     everything (refused)       OS error naming file      1
    level queue entry  tags code zeroed  delivered on time, not early  counted (early_tags)  0
    timerlog (wheel)   torn tail       all pending                -                         0
    timerlog (wheel)   flipped byte    all but that unit's one    corrupt unit              1
    timerlog (wheel)   missing         all pending (re-enqueued)  recovery: lost            0
    timerlog (wheel)   truncated mid   all pending (re-enqueued)  recovery: lost            0
    timerlog (wheel)   wrong size      everything (refused)       ConfigError               1
    timerlog (wheel)   permissions     everything (refused)       OS error naming file      1
    timerwheel         missing         all pending (re-enqueued)  recovery: lost            0
    timerwheel         wrong size      everything (refused)       ConfigError               1
    timercheck         truncated       everything (refused)       CorruptRecordError        1
    wheel format.json  flipped byte    everything (refused)       ConfigError               1
    timermetrics       flipped byte    all (counts from .bak)     -                         0
    timercheck         missing         all pending                -                         0
    vlog segment       torn tail       all but the torn record    set aside when due        1
    vlog segment       flipped byte    all but that record        check names it            1
    vlog segment       missing         the other segments         check names it            1
    vlog segment       permissions     everything (refused)       OS error naming file      1
    rocksdb CURRENT    missing         everything (refused)       `rtimer repair` named     1
    engine.json        flipped byte    everything (refused)       ConfigError naming it     1
    engine.json        missing         all (engine from the files) -                        0
    consumerOffset     flipped byte    all; consume refused       CorruptRecordError        1
    consumerOffset     permissions     consume refused            OS error naming file      1
    consumerOffset     missing         all (groups start over)    -                         0
    delayOffset        flipped byte    all (falls back to .bak)   offset file problems      0
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from cli.main import cli
from rocks_timer import ConfigError, CorruptRecordError, ManualClock, Message

from tests.support.engine_helpers import START_MS
from tests.support.fault_support import (ALL_LATER, HOUR, N, PENDING, SEGMENT, Denied, config, cq_file,
                           delivered_later, flip, kept, reopen, rtimer_check, seed, segment,
                           vlog_files, wheel_pending)


# -- CommitLog -------------------------------------------------------------------------------
def test_commitlog_torn_tail_is_cut_and_the_rest_kept(tmp_path):
    where = seed(tmp_path)
    newest = max((tmp_path / "commitlog").iterdir())
    record = newest.read_bytes()[where["offsets"][-1] - 2 * SEGMENT:][:300]
    with open(newest, "ab") as tail:  # half a record nothing indexes: a write torn by a crash
        tail.write(record[:150])
    with reopen(tmp_path) as broker:
        assert kept(broker) == list(range(N))
        assert broker.stats()["commitlog"]["truncated_bytes"] == 150
        assert broker.stats()["pending"] == PENDING
        assert broker.check().ok
    assert rtimer_check(tmp_path)[0] == 0


def test_commitlog_cut_into_an_indexed_record_is_named_loss_not_a_torn_tail(tmp_path):
    seed(tmp_path)
    newest = max((tmp_path / "commitlog").iterdir())
    os.truncate(newest, newest.stat().st_size - 30)  # the level message, written and indexed
    with reopen(tmp_path) as broker:
        assert kept(broker) == list(range(N))
        lost = broker.stats()["commitlog"]["lost"]
        assert lost["lost_messages"] == 1
        assert lost["messages"][0]["topic"] == "SCHEDULE_TOPIC_XXXX"
        assert not broker.check().ok
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "lost message topic SCHEDULE_TOPIC_XXXX queue 2 offset 0" in out


def test_commitlog_flipped_byte_in_the_newest_segment_is_reported_not_cut(tmp_path):
    where = seed(tmp_path)
    victim = 55
    flip(segment(tmp_path, 2), where["offsets"][victim] - 2 * SEGMENT + 200)
    with reopen(tmp_path) as broker:
        assert kept(broker) == [i for i in range(N) if i != victim]
        stats = broker.stats()["commitlog"]
        assert stats["truncated_bytes"] == 0 and stats["corrupt_region_count"] == 1
        assert not broker.check().ok
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "corrupt bytes at offset" in out


def test_commitlog_flipped_byte_in_an_older_segment_is_reported_by_check(tmp_path):
    where = seed(tmp_path)
    victim = 5
    flip(segment(tmp_path, 0), where["offsets"][victim] + 300)
    with reopen(tmp_path) as broker:
        assert kept(broker) == [i for i in range(N) if i != victim]
        assert broker.messages.corrupt_reads >= 1
    code, out = rtimer_check(tmp_path)
    assert code == 1 and f"at offset {where['offsets'][victim]} skipped" in out


def test_commitlog_missing_middle_segment(tmp_path):
    where = seed(tmp_path)
    segment(tmp_path, 1).unlink()
    lost = [i for i in range(N) if SEGMENT <= where["offsets"][i] < 2 * SEGMENT]
    with reopen(tmp_path) as broker:
        assert kept(broker) == [i for i in range(N) if i not in lost]
        assert broker.stats()["pending"] == PENDING
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "segment 00000000000000098304 is missing" in out
    # named: tests/faults/test_commitlog_loss.py
    assert f"{len(lost)} acknowledged message(s) lost" in out


def test_commitlog_truncated_middle_segment(tmp_path):
    where = seed(tmp_path)
    cut = where["offsets"][20] + 10
    os.truncate(segment(tmp_path, 0), cut)
    lost = [i for i in range(N) if 20 <= i and where["offsets"][i] < SEGMENT]
    with reopen(tmp_path) as broker:
        assert kept(broker) == [i for i in range(N) if i not in lost]
        assert broker.stats()["commitlog"]["short_segments"] == [f"{0:020d}"]
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "is shorter than a sealed segment" in out


def test_commitlog_segment_of_the_wrong_size_is_refused(tmp_path):
    seed(tmp_path)
    with open(segment(tmp_path, 0), "ab") as f:
        f.write(bytes(100))
    before = segment(tmp_path, 0).read_bytes()
    with pytest.raises(ConfigError, match=r"00000000000000000000 \(start 0, 98404 bytes\)"):
        reopen(tmp_path)
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "does not fit commitlog_segment_size=98304" in out
    assert segment(tmp_path, 0).read_bytes() == before


def test_commitlog_segment_without_permission_is_refused(tmp_path):
    seed(tmp_path)
    with Denied(segment(tmp_path, 2)):
        with pytest.raises(PermissionError):
            reopen(tmp_path)
        code, out = rtimer_check(tmp_path)
    assert code == 1 and "00000000000000196608" in out
    with reopen(tmp_path) as broker:
        assert kept(broker) == list(range(N)) and broker.check().ok


# -- ConsumeQueue ----------------------------------------------------------------------------
def test_consumequeue_torn_tail_is_rebuilt(tmp_path):
    seed(tmp_path)
    os.truncate(cq_file(tmp_path, 3), 7 * 20 + 9)
    with reopen(tmp_path) as broker:
        assert kept(broker) == list(range(N)) and broker.check().ok
        assert broker.messages.recovery.rebuilt_entries == N - 48 - 7
    assert rtimer_check(tmp_path)[0] == 0


def test_consumequeue_flipped_entry_is_repaired(tmp_path):
    seed(tmp_path)
    flip(cq_file(tmp_path, 1), 5 * 20 + 3)  # entry 21's CommitLog offset
    with reopen(tmp_path) as broker:
        assert broker.messages.recovery.repaired_entries == 1
        assert kept(broker) == list(range(N)) and broker.check().ok
    assert rtimer_check(tmp_path)[0] == 0


@pytest.mark.parametrize("fault", ["missing", "truncated"])
def test_consumequeue_middle_file_missing_or_short_is_rebuilt(tmp_path, fault):
    seed(tmp_path)
    if fault == "missing":
        cq_file(tmp_path, 1).unlink()
    else:
        os.truncate(cq_file(tmp_path, 1), 3 * 20)
    with reopen(tmp_path) as broker:
        report = broker.messages.recovery
        assert report.repaired_entries == (16 if fault == "missing" else 13)
        assert report.problems == [f"consume queue orders/0: file {16 * 20:020d} is "
                                   + ("missing" if fault == "missing" else "60 bytes, not 320")]
        assert kept(broker) == list(range(N)) and broker.check().ok
        assert broker.pull("orders", 0, 10, 32)[0].body[:4] == b"m010"
    assert rtimer_check(tmp_path)[0] == 0


def test_consumequeue_file_of_the_wrong_size_is_cut_back(tmp_path):
    seed(tmp_path)
    with open(cq_file(tmp_path, 3), "ab") as f:
        f.write(bytes(400))  # zeros past its 12 entries and past the 16 a file holds
    with reopen(tmp_path) as broker:
        assert broker.messages.recovery.problems == [
            f"consume queue orders/0: file {3 * 320:020d} is 640 bytes (at most 320)"]
        assert broker.max_offset("orders") == N
        assert kept(broker) == list(range(N)) and broker.check().ok
    assert cq_file(tmp_path, 3).stat().st_size == 12 * 20  # nothing valid after it: a tail
    assert rtimer_check(tmp_path)[0] == 0


def test_consumequeue_middle_file_of_the_wrong_size_is_reported(tmp_path):
    seed(tmp_path)
    with open(cq_file(tmp_path, 1), "ab") as f:
        f.write(bytes(40))
    with reopen(tmp_path) as broker:
        assert kept(broker) == list(range(N))
        assert broker.check().problems == [
            f"consume queue orders/0: file {320:020d} is 360 bytes (at most 320)"]
    assert rtimer_check(tmp_path)[0] == 1


def test_consumequeue_file_without_permission_is_refused(tmp_path):
    seed(tmp_path)
    with Denied(cq_file(tmp_path, 2)):
        with pytest.raises(PermissionError):
            reopen(tmp_path)
        assert rtimer_check(tmp_path)[0] == 1
    assert rtimer_check(tmp_path)[0] == 0


def test_a_level_entry_whose_due_time_was_zeroed_is_not_delivered_early(tmp_path):
    seed(tmp_path)
    entry = tmp_path / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "2" / f"{0:020d}"
    data = bytearray(entry.read_bytes())
    data[12:20] = bytes(8)  # the tags code: the level message's deliver time
    entry.write_bytes(bytes(data))
    with reopen(tmp_path) as broker:
        assert broker.tick() == 0 and broker.pull("levelled") == []
        assert broker.levels.stats()["levels"][3]["early_tags"] >= 1
        broker.clock.set(START_MS + 10_000)
        assert broker.tick() == 1 and broker.pull("levelled")[0].body == b"lv"
    assert rtimer_check(tmp_path)[0] == 0


# -- the file wheel: TimerLog, wheel, checkpoint -----------------------------------------------
def test_timerlog_torn_tail_keeps_the_pending_messages(tmp_path):
    seed(tmp_path, "wheel")
    log = tmp_path / "wheel" / "timerlog" / f"{0:020d}"
    with open(log, "ab") as f:
        f.write(bytes(30))  # half a unit
    with reopen(tmp_path, "wheel") as broker:
        assert broker.timer.recovery["truncated_bytes"] == 30
        assert broker.check().ok
        assert wheel_pending(broker) == ALL_LATER


def test_timerlog_flipped_unit_is_skipped_and_the_others_kept(tmp_path):
    seed(tmp_path, "wheel")
    log = tmp_path / "wheel" / "timerlog" / f"{0:020d}"
    flip(log, 1 * 52 + 13)  # the second unit's magic
    with reopen(tmp_path, "wheel") as broker:
        assert broker.timer.recovery["corrupt_units"] == 1
        assert broker.timer.recovery["truncated_bytes"] == 0
        report = broker.check()
        assert report.problems == ["timer engine wheel: timerlog: 52 corrupt bytes at offset 52 "
                                   "skipped"]
        assert wheel_pending(broker) == [b"t0", b"t2", b"t3", b"t4"]
    assert rtimer_check(tmp_path)[0] == 1
    stats = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "stats"]).output
    assert "DAMAGED" in stats and "1 corrupt TimerLog unit(s) skipped" in stats


@pytest.mark.parametrize("lost", ["timerlog", "timerwheel"])
def test_a_lost_timerlog_or_wheel_is_rebuilt_from_the_timer_topic(tmp_path, lost):
    seed(tmp_path, "wheel")
    target = tmp_path / "wheel" / lost
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    with reopen(tmp_path, "wheel") as broker:
        assert broker.timer.recovery["lost"]
        assert broker.check().ok
        assert wheel_pending(broker) == ALL_LATER
    assert rtimer_check(tmp_path)[0] == 0


def test_timerlog_truncated_middle_segment_is_re_enqueued(tmp_path):
    """Small TimerLog segments (the broker uses 64 MiB ones): the wheel engine directly."""
    from rocks_timer.message_store import MessageStore
    from rocks_timer.timer.store import TimerRecord
    from rocks_timer.timer.wheel import WheelTimerStore
    clock = ManualClock(START_MS)
    conf = config("wheel")

    def open_wheel():
        store = MessageStore.open(tmp_path, conf, clock)
        return store, WheelTimerStore.open(tmp_path / "wheel", store, conf, clock=clock,
                                           timerlog_segment_size=52 * 10 + 16)
    store, wheel = open_wheel()
    wheel.schedule([TimerRecord(START_MS + HOUR + i, Message("later", b"%03d" % i))
                    for i in range(40)], START_MS)
    wheel.maintain(START_MS)
    wheel.close(), store.close()
    middle = tmp_path / "wheel" / "timerlog" / f"{536:020d}"
    os.truncate(middle, 3 * 52)
    store, wheel = open_wheel()
    assert wheel.recovery["lost"] == [f"timerlog segment {536:020d} is short"]
    clock.set(START_MS + 2 * HOUR)
    got = set()
    for _ in range(20):
        wheel.maintain(clock.now_ms())
        records = wheel.claim_due(clock.now_ms(), 1000, 1 << 24)
        got |= {r.message.body for r in records}
        wheel.complete(records, None)
    assert got == {b"%03d" % i for i in range(40)}
    wheel.close(), store.close()


def test_timerlog_segment_of_the_wrong_size_is_refused(tmp_path):
    seed(tmp_path, "wheel")
    os.truncate(tmp_path / "wheel" / "timerlog" / f"{0:020d}", (64 << 20) + 1)  # sparse
    with pytest.raises(ConfigError, match="timerlog segment .* larger than the configured"):
        reopen(tmp_path, "wheel")
    assert rtimer_check(tmp_path)[0] == 1


def test_timerlog_without_permission_is_refused(tmp_path):
    seed(tmp_path, "wheel")
    with Denied(tmp_path / "wheel" / "timerlog" / f"{0:020d}"):
        with pytest.raises(PermissionError):
            reopen(tmp_path, "wheel")
        assert rtimer_check(tmp_path)[0] == 1
    with reopen(tmp_path, "wheel") as broker:
        assert wheel_pending(broker) == ALL_LATER


def test_timerwheel_of_the_wrong_size_is_refused(tmp_path):
    seed(tmp_path, "wheel")
    os.truncate(tmp_path / "wheel" / "timerwheel", 4096)
    with pytest.raises(ConfigError, match="timer wheel .* is 4096 bytes"):
        reopen(tmp_path, "wheel")
    assert rtimer_check(tmp_path)[0] == 1


def test_a_damaged_wheel_checkpoint_is_a_clear_error(tmp_path):
    seed(tmp_path, "wheel")
    path = tmp_path / "wheel" / "config" / "timercheck"
    path.write_bytes(path.read_bytes()[:5])
    with pytest.raises(CorruptRecordError, match="checkpoint .* is damaged.*move it away"):
        reopen(tmp_path, "wheel")
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "timercheck" in out
    path.unlink()  # the way out the error names
    with reopen(tmp_path, "wheel") as broker:
        assert broker.check().ok
        assert wheel_pending(broker) == ALL_LATER


def test_a_damaged_wheel_format_record_is_a_clear_error(tmp_path):
    seed(tmp_path, "wheel")
    path = tmp_path / "wheel" / "config" / "format.json"
    path.write_bytes(b"\xff" + path.read_bytes()[1:])
    with pytest.raises(ConfigError, match="format.json is unreadable"):
        reopen(tmp_path, "wheel")
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "format.json is unreadable" in out


def test_damaged_wheel_metrics_fall_back(tmp_path):
    seed(tmp_path, "wheel")
    with reopen(tmp_path, "wheel"):
        pass  # a second save: timermetrics.bak exists
    flip(tmp_path / "wheel" / "config" / "timermetrics", 0)
    with reopen(tmp_path, "wheel") as broker:
        assert broker.stats()["pending"] == PENDING and broker.check().ok
        assert wheel_pending(broker) == ALL_LATER


# -- the RocksDB engine's value segments and index ---------------------------------------------
def test_vlog_segment_torn_tail(tmp_path):
    seed(tmp_path)
    [seg] = vlog_files(tmp_path)
    os.truncate(seg, seg.stat().st_size - 100)
    with reopen(tmp_path) as broker:
        assert broker.stats()["pending"] == PENDING
        assert not broker.check().ok  # the last record's index entry points past the end
        assert delivered_later(broker) == ALL_LATER[:-1]  # the torn one is set aside
    code, out = rtimer_check(tmp_path)  # set aside is not healthy: it is named until restored
    assert code == 1 and "1 message(s) set aside" in out and "topic later" in out


def test_vlog_segment_flipped_byte(tmp_path):
    seed(tmp_path)
    [seg] = vlog_files(tmp_path)
    flip(seg, seg.stat().st_size // 2)
    with reopen(tmp_path) as broker:
        report = broker.check()
        assert len(report.problems) == 1 and "vlog" in report.problems[0]
        assert len(delivered_later(broker)) == PENDING - 1
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "1 message(s) set aside" in out


def test_vlog_segment_missing(tmp_path):
    seed(tmp_path)
    [seg] = vlog_files(tmp_path)
    seg.unlink()
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "vlog" in out
    with reopen(tmp_path) as broker:
        assert broker.stats()["pending"] == PENDING
        assert delivered_later(broker) == []
        assert kept(broker) == list(range(N))


def test_vlog_segment_without_permission_is_refused(tmp_path):
    seed(tmp_path)
    [seg] = vlog_files(tmp_path)
    with Denied(seg):
        with pytest.raises(PermissionError):
            reopen(tmp_path)
        assert rtimer_check(tmp_path)[0] == 1
    with reopen(tmp_path) as broker:
        assert delivered_later(broker) == ALL_LATER


def test_rocksdb_store_without_current_is_refused(tmp_path):
    seed(tmp_path)
    (tmp_path / "timer-rocksdb" / "CURRENT").unlink()
    with pytest.raises(CorruptRecordError, match="no CURRENT file.*rtimer repair"):
        reopen(tmp_path)
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "rtimer repair" in out
    assert not (tmp_path / "timer-rocksdb" / "CURRENT").exists()


# -- small state files -----------------------------------------------------------------------
def test_engine_record_flipped_byte_is_a_clear_error(tmp_path):
    seed(tmp_path)
    flip(tmp_path / "config" / "engine.json", 2)
    with pytest.raises(ConfigError, match="engine.json is damaged"):
        reopen(tmp_path)
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "engine.json is damaged" in out


@pytest.mark.parametrize("engine", ["rocksdb", "wheel"])
def test_a_missing_engine_record_is_inferred_from_the_files(tmp_path, engine):
    seed(tmp_path, engine)
    (tmp_path / "config" / "engine.json").unlink()
    result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "stats", "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0 and json.loads(result.output)["engine"] == engine
    assert json.loads((tmp_path / "config" / "engine.json").read_text())["timer_engine"] == engine
    with reopen(tmp_path, engine) as broker:
        assert broker.stats()["pending"] == PENDING and broker.check().ok


def test_missing_consumer_offsets_start_the_groups_over(tmp_path):
    from cli import ops
    seed(tmp_path)
    (tmp_path / "config" / "consumerOffset.json").unlink()
    with reopen(tmp_path) as broker:
        consumed = ops.consume(broker, tmp_path, topic="orders", group="g", max_messages=5)
        assert [m["queue_offset"] for m in consumed["messages"]] == [0, 1, 2, 3, 4]
        assert broker.check().ok


def test_consumer_offsets_flipped_byte_is_a_clear_error(tmp_path):
    seed(tmp_path)
    flip(tmp_path / "config" / "consumerOffset.json", 3)
    with reopen(tmp_path) as broker:  # sends and deliveries go on; consume and check say so
        assert "consumerOffset.json is damaged" in broker.stats()["clamped_consumer_offsets"][0]
        broker.send(Message("orders", b"m060"))
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "consumerOffset.json is damaged" in out
    result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "consume", "orders",
                                      "--group", "g"], catch_exceptions=False)
    assert result.exit_code == 1 and "consumerOffset.json is damaged" in result.output


def test_consumer_offsets_without_permission(tmp_path):
    seed(tmp_path)
    path = tmp_path / "config" / "consumerOffset.json"
    with Denied(path):
        result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "consume", "orders",
                                          "--group", "g"], catch_exceptions=False)
        assert result.exit_code == 1 and "consumerOffset.json" in result.output
        assert "Traceback" not in result.output
    assert json.loads(path.read_text())["offsetTable"] == {"orders@g": {"0": 10}}


def test_delay_offsets_flipped_byte_falls_back_to_the_backup(tmp_path):
    seed(tmp_path)
    with reopen(tmp_path) as broker:  # a second persist, so a .bak exists
        broker.levels.persist()
    path = tmp_path / "config" / "delayOffset.json"
    flip(path, 1)
    with reopen(tmp_path) as broker:
        assert broker.levels.offset_file_source == "bak"
        assert broker.check().ok
        assert kept(broker) == list(range(N))
    assert rtimer_check(tmp_path)[0] == 0
