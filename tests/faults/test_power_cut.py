"""Power loss, simulated with the strict POSIX model (bench/power_cut_model.py: file data
durable at its own fsync, a name only at its directory's fsync; RocksDB's own files at RocksDB's
word, its WAL at the syncs our code asks for).

The workload of ``bench.power_cut`` (timer sends, delay-level and immediate sends, cancels, then
everything driven until due, relocations asked for) runs once per engine and mode; the model
cuts the power before aimed system calls (early after the first start, inside deliveries,
value-segment, CommitLog and TimerLog rolls, periodic flushes, segment releases just after their
WAL sync, relocations) and one every ``SPREAD_EVERY`` calls. Each cut image is reopened and
driven until everything is due (``bench.power_cut.check_cut``): nothing acknowledged (``sync``)
or flushed (``async``) lost, no acknowledged cancel delivered, nothing early, no timer message
delivered twice by the RocksDB engine, nothing left pending, ``check`` clean after the reopen
and at the end, no damage reported and nothing set aside (none of these cuts loses anything the
broker promised, so there is no real loss to name). ``python -m bench.power_cut`` sweeps more
seeds and denser cuts.
"""
from __future__ import annotations

import os

import pytest

from bench.power_cut import CASES, check_cut, run_cuts, tmpfs_dir

SPREAD_EVERY = 50  # besides the aimed cuts, one every this many system calls


@pytest.fixture
def fast_dir(tmp_path):
    """On tmpfs when there is one: the model decides what survives, so real fsyncs (most of
    the test's time on a disk) buy nothing here."""
    path = tmpfs_dir()
    if path is None:
        yield tmp_path
        return
    try:
        yield path
    finally:
        import shutil
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("engine,mode", CASES)
def test_power_cut_loses_nothing_acknowledged_and_flushed(fast_dir, engine, mode):
    disk, config = run_cuts(fast_dir, engine, mode, spread_every=SPREAD_EVERY)
    assert disk.syncs > 0 and disk.dir_syncs > 0
    if engine.startswith("rocksdb"):
        assert disk.wal_syncs > 0
    missed = [label for label in disk.points_missed if not label.startswith("spread")]
    assert not missed, f"cut points the workload never reached: {missed}"
    failures = [f"{cut.label} (event {cut.event.seq} {cut.event.op} {cut.event.path}): {why}"
                for cut in disk.taken
                for why in [check_cut(cut, config, exactly_once=engine.startswith("rocksdb"))]
                if why]
    assert len(disk.taken) >= 20, f"only {len(disk.taken)} cuts of {disk.events} system calls"
    assert not failures, f"{len(failures)} of {len(disk.taken)} cuts failed:\n" + \
        "\n".join(failures)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_wheel_recovers_a_lost_timerlog_without_cancelled_or_stuck_messages(fast_dir, monkeypatch,
                                                                             mode):
    """The TimerLog's segments made without their directory's fsync (as before issue 30): cuts
    then lose whole segments, and recovery replays the timer topic. It must still deliver no
    acknowledged cancel (their markers may be replayed already due, where they reach no slot)
    and end with nothing pending (the counts are rebuilt from the replay)."""
    from rocks_timer.timer.wheel import timerlog

    def create_without_name(path, flags, mode):
        return os.open(path, flags | os.O_CREAT, mode)
    monkeypatch.setattr(timerlog, "create_durably", create_without_name)
    disk, config = run_cuts(fast_dir, "wheel", mode, spread_every=SPREAD_EVERY)
    failures = [f"{cut.label}: {why}" for cut in disk.taken
                for why in [check_cut(cut, config, exactly_once=False)] if why]
    assert not failures, f"{len(failures)} of {len(disk.taken)} cuts failed:\n" + \
        "\n".join(failures)
