"""State and time (issue 13): tick never early, a data dir remembers its format, small state
files fail clearly, group names are validated, offsets beyond a queue's end are clamped, and
``Broker.check`` / ``rtimer check`` report what is wrong."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from rocks_timer import (Broker, BrokerConfig, ConfigError, CorruptRecordError,
                         InvalidMessageError, ManualClock, Message)
from rocks_timer.consumer_offsets import ConsumerOffsets

from tests.support.engine_helpers import START_MS

ROOT = Path(__file__).resolve().parents[2]
HOUR = 3_600_000


def run(data_dir: Path, *args: str, config: Path | None = None):
    prefix = ["--data-dir", str(data_dir)] + (["--config", str(config)] if config else [])
    return CliRunner().invoke(cli, prefix + list(args), catch_exceptions=False)


@pytest.mark.parametrize("engine", ["memory", "rocksdb", "wheel"])
def test_tick_with_a_time_behind_the_clock_delivers_nothing_early(tmp_path, engine):
    clock = ManualClock(START_MS)
    with Broker.open(tmp_path, BrokerConfig(timer_engine=engine), clock=clock) as broker:
        broker.send(Message("orders", b"level"), delay_level=17)     # 1 h
        broker.send(Message("orders", b"timer"), delay_ms=2 * HOUR)
        for behind in (1, HOUR, 3 * HOUR, START_MS):  # down to epoch 0
            assert broker.tick(START_MS - behind) == 0
        assert broker.pull("orders") == [] and clock.now_ms() == START_MS
        broker.tick(START_MS + HOUR)  # a manual clock moves forward with tick
        assert [m.body for m in broker.pull("orders")] == [b"level"]
        assert all(m.store_ms >= START_MS + HOUR for m in broker.pull("orders"))
        assert broker.check().ok


def test_the_level_service_ignores_a_stale_time_but_honours_a_clock_step(tmp_path):
    clock = ManualClock(START_MS)
    with Broker.open(tmp_path, BrokerConfig(timer_engine="memory"), clock=clock) as broker:
        broker.send(Message("orders", b"level"), delay_level=17)     # 1 h
        assert broker.levels.tick(START_MS - 3 * HOUR) == 0
        clock.set(START_MS - 3 * HOUR)  # the clock itself stepped back: RocketMQ's rule
        assert broker.levels.tick() == 1


def test_a_wheel_dir_keeps_its_precision_whatever_the_config_file_leaves_out(tmp_path):
    data, conf = tmp_path / "data", tmp_path / "broker.conf"
    conf.write_text("timerEngine=wheel\ntimerPrecisionMs=1000\n")
    assert run(data, "send", "orders", "x", "--delay", "1h", config=conf).exit_code == 0
    conf.write_text("timerMaxDelaySec=86400\n")
    result = run(data, "scan", "--json", config=conf)
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.output)) == 1
    conf.write_text("timerPrecisionMs=500\n")
    result = run(data, "scan", config=conf)
    assert result.exit_code == 1
    assert "timer_precision_ms=1000" in result.output and "timer_precision_ms=500" in result.output


def test_a_data_dir_reopens_with_its_own_segment_size(tmp_path, clock):
    small = BrokerConfig(commitlog_segment_size=1 << 20, max_message_size=64 * 1024,
                         timer_engine="wheel")
    with Broker.open(tmp_path, small, clock=clock) as broker:
        for _ in range(40):
            broker.send(Message("orders", b"x" * 60_000))
    with pytest.raises(ConfigError, match=r"commitlog_segment_size=1048576.*"
                                          r"commitlog_segment_size=67108864"):
        Broker.open(tmp_path, BrokerConfig(timer_engine="wheel"), clock=clock)
    with Broker.open(tmp_path, clock=clock) as broker:  # no config: the stored settings
        assert broker.config.commitlog_segment_size == 1 << 20
        assert broker.config.timer_engine == "wheel"
        broker.send(Message("orders", b"y" * 60_000))
        assert broker.max_offset("orders") == 41 and broker.check().ok


def test_config_without_an_engine_keeps_the_data_dirs_engine(tmp_path):
    data = tmp_path / "data"
    conf = tmp_path / "broker.conf"
    conf.write_text("timerMaxDelaySec=86400\n")
    assert run(data, "--engine", "wheel", "send", "orders", "x", "--delay", "1h").exit_code == 0
    result = run(data, "stats", "--json", config=conf)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["engine"] == "wheel"
    conf.write_text("timerEngine=rocksdb\n")
    result = run(data, "stats", config=conf)
    assert result.exit_code == 1
    assert "timer_engine='wheel'" in result.output and "'rocksdb'" in result.output
    conf.write_text("mappedFileSizeCommitLog=134217728\n")
    result = run(data, "stats", config=conf)
    assert result.exit_code == 1
    assert "commitlog_segment_size=67108864" in result.output
    assert "commitlog_segment_size=134217728" in result.output


@pytest.mark.parametrize("content", [b"\xff\xfe{", b"{\"timer_engine\": 3}", b"[]", b""])
def test_a_damaged_engine_record_is_a_clear_error(tmp_path, clock, content):
    Broker.open(tmp_path, BrokerConfig(timer_engine="rocksdb"), clock=clock).close()
    (tmp_path / "config" / "engine.json").write_bytes(content)
    with pytest.raises(ConfigError, match="engine.json is damaged.*timer_engine"):
        Broker.open(tmp_path, BrokerConfig(timer_engine="rocksdb"), clock=clock)
    result = run(tmp_path, "stats")
    assert result.exit_code == 1 and "engine.json is damaged" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("name", ["broker.conf", "broker.toml"])
def test_a_config_file_that_is_not_utf8_is_a_clear_error(tmp_path, name):
    conf = tmp_path / name
    conf.write_bytes(b"timerPrecisionMs=100\n\xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8.*0xff"):
        BrokerConfig.load(conf)
    result = run(tmp_path / "data", "send", "orders", "x", config=conf)
    assert result.exit_code == 1 and "not UTF-8" in result.output


@pytest.mark.parametrize("group", ["a@b", "", "x" * 128, "sp ace", "é"])
def test_consumer_group_names_follow_the_topic_rules(tmp_path, group):
    assert run(tmp_path, "send", "orders", "x").exit_code == 0
    result = run(tmp_path, "consume", "orders", "--group", group)
    assert result.exit_code != 0 and "consumer group" in result.output
    with pytest.raises(InvalidMessageError):
        ConsumerOffsets(tmp_path).commit("orders", group, 0, 1)
    assert not (tmp_path / "config" / "consumerOffset.json").exists()


def test_a_damaged_offset_file_is_a_clear_error(tmp_path):
    assert run(tmp_path, "send", "orders", "x").exit_code == 0
    path = tmp_path / "config" / "consumerOffset.json"
    path.write_bytes(b"\x80\x81 not json")
    result = run(tmp_path, "consume", "orders", "--group", "g")
    assert result.exit_code == 1 and "consumerOffset.json is damaged" in result.output
    with pytest.raises(CorruptRecordError):
        ConsumerOffsets(tmp_path).table()


def test_an_offset_beyond_the_queue_end_is_clamped_and_reported(tmp_path, clock):
    with Broker.open(tmp_path, BrokerConfig(timer_engine="memory"), clock=clock) as broker:
        for i in range(3):
            broker.send(Message("orders", b"%d" % i))
    ConsumerOffsets(tmp_path).commit("orders", "g", 0, 10)  # as if a torn tail took 7 away
    stats = json.loads(run(tmp_path, "stats", "--json").output)  # opening clamps it
    assert stats["clamped_consumer_offsets"] == [
        "consumer group g on orders/0: offset 10 was beyond the queue's end 3; clamped to it"]
    assert ConsumerOffsets(tmp_path).get("orders", "g", 0) == 3
    # `rtimer stats` made the data dir a rocksdb one: the memory engine may not hide it now
    with Broker.open(tmp_path, BrokerConfig(timer_engine="rocksdb"), clock=clock) as broker:
        broker.send(Message("orders", b"new"))
        ConsumerOffsets(tmp_path).commit("orders", "g", 0, 9)
        report = broker.check()
        assert not report.ok
        assert report.problems == ["consumer group g on orders/0: offset 9 is beyond the "
                                   "queue's end 4"]
        from cli import ops
        consumed = ops.consume(broker, tmp_path, topic="orders", group="g")
        assert consumed["clamped_from"] == 9 and consumed["offset"] == 4
        assert consumed["messages"] == [] and broker.check().ok
        broker.send(Message("orders", b"newer"))
        consumed = ops.consume(broker, tmp_path, topic="orders", group="g")
        assert [m["body"] for m in consumed["messages"]] == ["newer"]  # not skipped


def test_rtimer_check_exits_non_zero_on_a_violation(tmp_path):
    assert run(tmp_path, "send", "orders", "one").exit_code == 0
    assert run(tmp_path, "send", "orders", "two", "--delay", "1h").exit_code == 0
    assert run(tmp_path, "send", "orders", "three").exit_code == 0
    result = run(tmp_path, "check")
    assert result.exit_code == 0 and "ok: every invariant holds" in result.output
    segment = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(segment.read_bytes())
    data[100] ^= 0x40
    segment.write_bytes(bytes(data))
    result = run(tmp_path, "check")
    assert result.exit_code == 1
    assert "corrupt bytes at offset 0" in result.output
    assert "1 of 2 entries point at no matching commitlog record" in result.output
    report = json.loads(run(tmp_path, "check", "--json").output)
    assert report["ok"] is False and report["timer"]["pending"] == 1


def test_rtimer_check_runs_as_a_real_process(tmp_path):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "cli.main", "--data-dir", str(tmp_path)]
    subprocess.run(cmd + ["send", "orders", "x"], check=True, env=env, capture_output=True,
                   timeout=60)
    done = subprocess.run(cmd + ["check"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "ok" in done.stdout
    (tmp_path / "consumequeue" / "orders" / "0" / f"{0:020d}").write_bytes(bytes(20))
    done = subprocess.run(cmd + ["check"], env=env, capture_output=True, text=True, timeout=60)
    # check is read-only: it reports the zeroed entry as it is on disk (issue #30) ...
    assert done.returncode == 1, done.stdout + done.stderr
    assert "consume queue orders/0: 1 of 1 entries point at no matching" in done.stdout
    # ... and any open repairs it from the CommitLog, after which the walk finds nothing wrong
    subprocess.run(cmd + ["stats"], check=True, env=env, capture_output=True, timeout=60)
    done = subprocess.run(cmd + ["check"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
