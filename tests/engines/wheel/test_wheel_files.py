"""The file wheel's on-disk pieces: layouts, TimerWheel, TimerLog, checkpoint (ARCHITECTURE §8)."""
from __future__ import annotations

import os

import pytest

from rocks_timer.errors import ConfigError
from rocks_timer.timer.wheel.checkpoint import TimerCheckpointFile, TimerMetricsFile, check_format
from rocks_timer.timer.wheel.layouts import (BLANK, BLANK_MAGIC, CHECKPOINT, CHECKPOINT_SIZE,
                                             LONG_MAX, MAGIC_DEFAULT, MAGIC_DELETE, MAGIC_ROLL,
                                             MIN_BLANK_LEN, SLOT, SLOT_SIZE, UNIT, UNIT_SIZE,
                                             Checkpoint, Unit, effective_roll_window,
                                             is_magic_ok, java_string_hash, slots_total_for,
                                             snap_precision, timer_out_ms)
from rocks_timer.timer.wheel.timerlog import TimerLog
from rocks_timer.timer.wheel.timerwheel import IGNORE, TimerWheel


# -- layouts -----------------------------------------------------------------------------------
def test_layout_sizes():
    assert SLOT.size == SLOT_SIZE == 32
    assert UNIT.size == UNIT_SIZE == 52
    assert BLANK.size == MIN_BLANK_LEN == 16
    assert CHECKPOINT.size == CHECKPOINT_SIZE == 56


def test_unit_field_offsets_match_rocketmq():
    unit = Unit(52, 7, MAGIC_ROLL | MAGIC_DEFAULT, 1000, 2000, 123456, 99, -5)
    raw = unit.pack()
    assert raw[0:4] == (52).to_bytes(4, "big")
    assert raw[4:12] == (7).to_bytes(8, "big")
    assert raw[12:16] == (3).to_bytes(4, "big")
    assert raw[16:24] == (1000).to_bytes(8, "big")
    assert raw[24:28] == (2000).to_bytes(4, "big")
    assert raw[28:36] == (123456).to_bytes(8, "big")  # UNIT_PRE_SIZE_FOR_MSG = 28
    assert raw[36:40] == (99).to_bytes(4, "big")
    assert raw[40:44] == (-5).to_bytes(4, "big", signed=True)  # UNIT_PRE_SIZE_FOR_METRIC = 40
    assert raw[44:52] == bytes(8)
    assert Unit.unpack(raw) == unit and unit.slot_ms == 3000


def test_magic_values_and_check():  # behaviour 62
    assert (MAGIC_DEFAULT, MAGIC_ROLL, MAGIC_DELETE) == (1, 2, 4)
    assert all(is_magic_ok(m) for m in range(16))
    assert not is_magic_ok(16) and not is_magic_ok(-1)


def test_blank_magic_is_the_commitlog_one():
    assert BLANK_MAGIC == 0xCBD43194
    assert BLANK.unpack(BLANK.pack(100, 0, BLANK_MAGIC))[2] - (1 << 32) == -875286124


@pytest.mark.parametrize("given,snapped", [(0, 100), (50, 100), (199, 100), (200, 200),
                                           (499, 200), (500, 500), (999, 500), (1000, 1000),
                                           (5000, 1000)])
def test_precision_snaps(given, snapped):  # behaviour 33
    assert snap_precision(given) == snapped


def test_timer_out_rounding():  # behaviour 34
    assert timer_out_ms(5000, 1000) == 4000
    assert timer_out_ms(5500, 1000) == 5000
    assert timer_out_ms(5999, 1000) == 5000


def test_java_hash():
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("") == 0
    assert java_string_hash("hello world, a long topic") == \
        _java_reference("hello world, a long topic")


def _java_reference(text: str) -> int:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def test_roll_window_defaults_and_bounds():  # behaviour 67
    s = slots_total_for(1000)
    assert s == 604_800
    assert effective_roll_window(None, 1000, s) == 172_800
    assert effective_roll_window(1, 1000, s) == 604_740
    assert effective_roll_window(604_741, 1000, s) == 604_740
    assert effective_roll_window(2, 1000, s) == 2


# -- TimerWheel ---------------------------------------------------------------------------------
P = 500
S = 30


@pytest.fixture
def wheel(tmp_path):
    w = TimerWheel(tmp_path / "timerwheel", S, P)
    yield w
    w.close()


def _t(offset_slots: int = 1) -> int:
    return 1_700_000_000_000 // P * P + offset_slots * P


def test_slot_index():  # behaviour 47
    w_slots = 2 * slots_total_for(1000)
    assert (1_209_600_000 // 1000) % w_slots == 0


def test_wheel_file_size_and_reopen_mismatch(tmp_path):  # behaviour 48
    w = TimerWheel(tmp_path / "timerwheel", 604_800, 1000)
    assert os.path.getsize(tmp_path / "timerwheel") == 38_707_200
    assert w.slot_index(1_209_600_000) == 0
    w.close()
    st = os.stat(tmp_path / "timerwheel")
    assert st.st_blocks * 512 < 38_707_200 // 4  # sparse: never written as a whole image
    with pytest.raises(ConfigError):
        TimerWheel(tmp_path / "timerwheel", 604_801, 1000)


def test_blank_then_put_get(wheel, tmp_path):  # behaviours 49-51
    t = _t()
    assert wheel.get_slot(t) == (-1, -1, -1, 0, 0)
    wheel.put_slot(t, 1, 2, 3, 4)
    assert wheel.get_slot(t) == (t, 1, 2, 3, 4)
    assert wheel.get_slot(t + 2 * S * P) == (-1, -1, -1, 0, 0)  # same index, another round
    assert wheel.get_raw_slot(t).time_ms == t
    raw = open(tmp_path / "timerwheel", "rb").read()
    at = wheel.slot_index(t) * 32
    assert int.from_bytes(raw[at:at + 8], "big") == t // P  # time / p in bytes 0-7
    wheel.put_slot(t, 5, 6)  # three-argument form keeps num and magic
    assert wheel.get_slot(t) == (t, 5, 6, 3, 4)
    assert wheel.flush() == 2 * S * 32  # one (partial) page: the whole 60-slot file
    wheel.close()
    again = TimerWheel(tmp_path / "timerwheel", S, P)
    assert again.get_slot(t) == (t, 5, 6, 3, 4)
    again.close()


def test_get_num_and_all_num(wheel):  # behaviour 52
    t = _t()
    wheel.put_slot(t, 1, 2, 3, 0)
    assert wheel.get_all_num(t) == 3
    wheel.put_slot(t + 5 * P, 1, 2, 7, 0)
    assert wheel.get_num(t) == 3 and wheel.get_num(t + 5 * P) == 7
    assert wheel.get_all_num(t) == 10


def test_check_phy_pos(wheel):  # behaviour 53
    t = _t()
    wheel.put_slot(t, 1, 100)
    wheel.put_slot(t + 5 * P, 2, 200)
    wheel.put_slot(t + 10 * P, 3, 300)
    assert [wheel.check_phy_pos(t, x) for x in (50, 100, 200, 300, 400)] == \
        [1, 2, 3, LONG_MAX, LONG_MAX]
    assert [wheel.check_phy_pos(t + 5 * P, x) for x in (50, 100, 200, 300, 400)] == \
        [2, 2, 3, LONG_MAX, LONG_MAX]


def test_revise_slot(wheel):  # behaviours 54-55
    t = _t(3)
    wheel.put_slot(t, 1, 2)
    wheel.revise_slot(t + 5 * P, IGNORE, 4, force=False)
    assert wheel.get_slot(t)[1:3] == (1, 2)
    assert wheel.get_slot(t + 5 * P).time_ms == -1
    wheel.revise_slot(t, IGNORE, 4, force=False)
    assert wheel.get_slot(t)[1:3] == (1, 4)
    wheel.revise_slot(t, 3, IGNORE, force=False)
    assert wheel.get_slot(t)[1:3] == (3, 4)
    later = t + 2 * S * P
    wheel.revise_slot(later, IGNORE, 5, force=True)
    assert wheel.get_raw_slot(t)[:3] == (later, 5, 5)


def test_next_busy_slot_wraps(wheel):
    t = _t()
    assert wheel.next_busy_slot(t, t + 100 * P) is None
    target = t + 45 * P  # crosses the end of the 60-slot file
    wheel.put_slot(target, 1, 1, 1, 0)
    assert wheel.next_busy_slot(t, t + 100 * P) == target
    assert wheel.next_busy_slot(t, target) is None


def test_flush_counts_only_dirty_pages(tmp_path):
    w = TimerWheel(tmp_path / "timerwheel", 604_800, 1000)
    t = 1_700_000_000_000
    for i in range(10):
        w.put_slot(t + i * 1000, i, i, 1, 0)  # ten adjacent slots: one page
    w.put_slot(t + 100_000 * 1000, 1, 1, 1, 0)  # far away: another page
    assert w.flush() == 2 * 4096
    assert w.flush() == 0
    w.close()



def _reference_slots(path, wheel: TimerWheel, t0: int) -> list[tuple[int, int, int, int]]:
    """(time, first, last, num) of every slot holding its time over 2S slots from t0, read
    from the file's bytes one slot at a time (no hole skipping): the scans' reference."""
    raw = path.read_bytes()  # the page cache: what the mapping wrote, flushed or not
    found = []
    for k in range(wheel.wheel_slots):
        t = t0 + k * wheel.precision_ms
        at = wheel.slot_index(t) * SLOT_SIZE
        stored, first, last, num, _magic = SLOT.unpack_from(raw, at)
        if stored * wheel.precision_ms == t:
            found.append((t, first, last, num))
    return found


@pytest.mark.parametrize("flushed", [False, True])
def test_scans_skip_holes_and_still_find_every_slot(tmp_path, flushed):
    # a sparse wheel of 2 x 20,000 slots (1.28 MB): busy slots in a few pages far apart, a run
    # across the end of the file, and one slot of an older round (not valid from t0)
    p, s = 1000, 20_000
    path = tmp_path / "timerwheel"
    wheel = TimerWheel(path, s, p)
    t0 = 1_700_000_000_000 + 7 * p
    busy = [t0, t0 + 129 * p, t0 + 12_345 * p, t0 + 31_000 * p, t0 + 39_999 * p]
    busy += [t0 - wheel.slot_index(t0) * p + (2 * s - 3 + i) * p for i in range(6)]  # wraps
    for i, t in enumerate(busy):
        wheel.put_slot(t, 10 + i, 100 * (i + 1), i + 1, 0)
    wheel.put_slot(t0 + 20_000 * p - 2 * s * p, 1, 999, 50, 0)  # the round before t0's
    if flushed:
        wheel.flush()
    want = _reference_slots(path, wheel, t0)
    assert sorted(t for t, *_ in want) == sorted(busy)
    assert wheel.get_all_num(t0) == sum(n for *_, n in want)
    for max_offset in (50, 250, 1050):
        hits = [first for _t, first, last, _n in want if last > max_offset]
        assert wheel.check_phy_pos(t0, max_offset) == min(hits, default=LONG_MAX)
    assert [sl.time_ms for sl in wheel.slots_pointing_past(t0, 600)] == \
        [t for t, _f, last, _n in want if last >= 600]
    ordered = sorted(t for t, *_ in want)
    assert wheel.next_busy_slot(t0 + p, t0 + 2 * s * p) == ordered[1]
    assert wheel.next_busy_slot(ordered[2] + p, ordered[3]) is None
    wheel.close()


def test_a_full_scan_of_an_empty_default_wheel_touches_no_hole(tmp_path):
    """At p = 100 the wheel is a 387 MB sparse file; recovery scans all of it at every open.
    Reading its holes through the shared mapping would fault in (and allocate) ~94,500 zeroed
    pages; skipping them leaves the page faults of the scan near zero."""
    import resource

    wheel = TimerWheel(tmp_path / "timerwheel", slots_total_for(100), 100)
    t0 = 1_700_000_000_000
    wheel.put_slot(t0 + 3_000_000 * 100, 1, 2, 3, 0)
    before = resource.getrusage(resource.RUSAGE_SELF)
    assert wheel.get_all_num(t0) == 3
    assert wheel.check_phy_pos(t0, 1) == 1
    after = resource.getrusage(resource.RUSAGE_SELF)
    faults = (after.ru_minflt - before.ru_minflt) + (after.ru_majflt - before.ru_majflt)
    assert faults < 5_000, f"{faults} page faults: the scan read the file's holes"
    wheel.close()


# -- TimerLog -------------------------------------------------------------------------------------
def _unit(commitlog_offset: int = 1000) -> bytes:
    return Unit(52, -1, MAGIC_DEFAULT, 0, 0, commitlog_offset, 10, 0).pack()


def test_timerlog_append_offsets_and_files(tmp_path):  # behaviour 57
    log = TimerLog(tmp_path / "timerlog", 1024)
    offsets = [log.append(_unit()) for _ in range(10)]
    assert offsets == [i * 52 for i in range(10)]
    for _ in range(100):
        last = log.append(_unit())
    assert len(log.segment_starts()) == 6
    assert log.read(last, 4) == (52).to_bytes(4, "big")
    assert sum(1 for _ in log.scan_units(0)) == 110
    assert log.last_unit_offset() == 936  # behaviour 59
    assert sorted(os.listdir(tmp_path / "timerlog"))[1] == f"{1024:020d}"
    log.close()


def test_timerlog_delete_expired_keeps_last(tmp_path):  # behaviour 59
    log = TimerLog(tmp_path / "timerlog", 1024)
    for _ in range(110):
        log.append(_unit(1000))
    assert log.delete_expired(1000) == 0  # offsetPy 1000 is not below 1000
    assert log.delete_expired(1024) == 5
    assert len(log.segment_starts()) == 1
    log.close()


def test_timerlog_blank_and_recovery(tmp_path):  # behaviour 58
    log = TimerLog(tmp_path / "timerlog", 1024)
    assert log.append(b"a" * 512) == 0
    assert log.append(b"b" * 510) == 1024  # 526 > 512 left: blank, next file
    assert log.append(b"Hello Recovery") == 1534
    raw = (tmp_path / "timerlog" / f"{0:020d}").read_bytes()
    assert BLANK.unpack_from(raw, 512) == (512, 0, BLANK_MAGIC)
    log.close()
    again = TimerLog(tmp_path / "timerlog", 1024)
    assert len(again.segment_starts()) == 2
    assert again.read(1534, 14) == b"Hello Recovery"
    again.close()


def test_timerlog_scan_stops_at_torn_unit_and_truncates(tmp_path):  # behaviour 90
    log = TimerLog(tmp_path / "timerlog", 1024)
    for _ in range(25):  # 19 in the first file, 6 in the second
        log.append(_unit())
    log.close()
    second = tmp_path / "timerlog" / f"{1024:020d}"
    with open(second, "r+b") as f:
        f.seek(3 * 52)
        f.write((51).to_bytes(4, "big"))  # unit 22: size != 52
        f.seek(5 * 52 + 10)
        f.truncate()  # unit 24 torn
    log = TimerLog(tmp_path / "timerlog", 1024)
    units = list(log.scan_units(0))
    # only the torn tail ends the scan: unit 22 is corruption, skipped, and 23 is kept
    assert len(units) == 23 and log.scan_end == 1024 + 5 * 52
    assert log.corrupt_units == 1 and log.damage == {1024 + 3 * 52: 52}
    assert log.truncate(log.scan_end) == 10
    assert log.max_offset == 1024 + 5 * 52
    assert log.append(_unit()) == 1024 + 5 * 52
    log.close()


def test_timerlog_scan_stops_at_bad_magic(tmp_path):
    log = TimerLog(tmp_path / "timerlog", 4096)
    for _ in range(5):
        log.append(_unit())
    log.append(Unit(52, -1, 16, 0, 0, 0, 0, 0).pack())
    assert len(list(log.scan_units(0))) == 5 and log.scan_end == 5 * 52  # a torn tail
    log.append(_unit())
    assert len(list(log.scan_units(0))) == 6 and log.scan_end == 7 * 52  # now corruption
    assert log.corrupt_units == 1
    log.close()


def test_timerlog_segment_size_mismatch(tmp_path):
    log = TimerLog(tmp_path / "timerlog", 4096)
    for _ in range(20):
        log.append(_unit())
    log.close()
    with pytest.raises(ConfigError):
        TimerLog(tmp_path / "timerlog", 512)


# -- checkpoint and metrics ---------------------------------------------------------------------
def test_checkpoint_new_file_reads_zero(tmp_path):  # behaviour 60
    cp = TimerCheckpointFile(tmp_path / "config" / "timercheck").load()
    assert (cp.read_time_ms, cp.flush_pos, cp.queue_offset, cp.master_queue_offset) == (0, 0, 0, 0)
    assert cp.state_version == 0 and cp.counter == 0


def test_checkpoint_round_trip(tmp_path):  # behaviour 61
    path = tmp_path / "config" / "timercheck"
    cp = Checkpoint(1000, 1100, 1200, 1300, 1400, 1500, 1600)
    f = TimerCheckpointFile(path)
    f.save(cp)
    assert f.bytes_written == 56 and path.stat().st_size == 56
    assert TimerCheckpointFile(path).load() == cp
    assert Checkpoint.decode(cp.encode()) == cp
    assert path.read_bytes()[:8] == (1000).to_bytes(8, "big")
    legacy = Checkpoint.decode(cp.encode()[:32])
    assert legacy == Checkpoint(1000, 1100, 1200, 1300)
    assert not list(path.parent.glob("*.tmp"))


def test_metrics_round_trip_and_bak(tmp_path):
    f = TimerMetricsFile(tmp_path / "timermetrics")
    f.save({"AAA": 1000, "BBB": 2000}, 5, 1)
    f.save({"AAA": 1, "BBB": 2}, 6, 2)
    assert TimerMetricsFile(tmp_path / "timermetrics").load() == {"AAA": 1, "BBB": 2}
    (tmp_path / "timermetrics").write_text("not json")
    assert TimerMetricsFile(tmp_path / "timermetrics").load() == {"AAA": 1000, "BBB": 2000}


def test_format_file_refuses_other_settings(tmp_path):
    check_format(tmp_path / "format.json", {"precision_ms": 100})
    check_format(tmp_path / "format.json", {"precision_ms": 100})
    with pytest.raises(ConfigError, match="precision_ms"):
        check_format(tmp_path / "format.json", {"precision_ms": 1000})
