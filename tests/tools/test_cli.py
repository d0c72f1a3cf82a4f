"""The ``rtimer`` commands through click's CliRunner, on real data dirs (direct path: no running
broker). Delays are short real ones; due messages are delivered by ``consume``'s own ticks."""
from __future__ import annotations

import json
import sys
import time
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.durations import InputError, parse_bound_ms, parse_duration_ms, parse_time_ms
from cli.main import cli
from rocks_timer import Broker, BrokerConfig, Message


@pytest.fixture
def data(tmp_path) -> Path:
    return tmp_path / "data"


def rt(data: Path, *args: str, code: int | None = 0):
    result = CliRunner().invoke(cli, ["--data-dir", str(data), *args], catch_exceptions=False)
    if code is not None:
        assert result.exit_code == code, (result.stdout, result.stderr)
    return result


def rt_json(data: Path, *args: str):
    return json.loads(rt(data, *args, "--json").stdout)


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.exit_code != 0
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


# -- durations and times -----------------------------------------------------------------------
@pytest.mark.parametrize("text,ms", [("500ms", 500), ("30s", 30_000), ("5m", 300_000),
                                     ("2h", 7_200_000), ("7d", 604_800_000),
                                     ("1h30m", 5_400_000), ("0s", 0), ("1m500ms", 60_500)])
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["5x", "-5s", "30", "", "s", "1.5s", "5 m"])
def test_bad_durations(text):
    with pytest.raises(InputError):
        parse_duration_ms(text)


def test_times_naive_is_utc_and_zones_count():
    assert parse_time_ms("2026-12-01T08:00:00Z") == 1_796_112_000_000
    assert parse_time_ms("2026-12-01T08:00:00") == 1_796_112_000_000
    assert parse_time_ms("2026-12-01T09:00:00+01:00") == 1_796_112_000_000
    assert parse_time_ms("1796112000000") == 1_796_112_000_000
    assert parse_bound_ms("10m", 1_000, "--to") == 601_000
    assert parse_bound_ms("now", 1_000, "--to") == 1_000
    with pytest.raises(InputError):
        parse_time_ms("tomorrow")


# -- send / scan / consume -------------------------------------------------------------------
def test_send_immediate_then_consume_remembers_the_offset(data):
    sent = rt_json(data, "send", "orders", "hello", "--tag", "new", "--key", "o-1", "--prop", "a=b")
    assert [r["route"] for r in sent] == ["immediate"] and sent[0]["handle"] is None
    first = rt_json(data, "consume", "orders", "--group", "g1")
    assert [(m["msg_id"], m["body"], m["tags"], m["keys"]) for m in first] == [
        (sent[0]["msg_id"], "hello", "new", ["o-1"])]
    assert first[0]["properties"]["a"] == "b"
    assert rt_json(data, "consume", "orders", "--group", "g1") == []  # offset remembered
    assert len(rt_json(data, "consume", "orders", "--group", "g2")) == 1  # groups apart
    table = json.loads((data / "config" / "consumerOffset.json").read_text())
    assert table["offsetTable"]["orders@g1"] == {"0": 1}
    human = rt(data, "consume", "orders", "--group", "g3").stdout
    assert sent[0]["msg_id"] in human and "hello" in human and "orders/0@0" in human


def test_timer_message_is_scanned_then_delivered_never_early(data):
    before_ms = time.time_ns() // 1_000_000
    [sent] = rt_json(data, "send", "orders", "later", "--delay", "1500ms")
    assert sent["route"] == "rocksdb" and sent["handle"]
    assert before_ms + 1500 <= sent["deliver_at_ms"] <= time.time_ns() // 1_000_000 + 1500
    [entry] = rt_json(data, "scan")
    assert (entry["msg_id"], entry["handle"], entry["deliver_at_ms"], entry["topic"]) == (
        sent["msg_id"], sent["handle"], sent["deliver_at_ms"], "orders")
    assert "1 pending" in rt(data, "scan").stdout
    early = rt_json(data, "consume", "orders")
    assert early == [] or time.time_ns() // 1_000_000 >= sent["deliver_at_ms"]  # never early
    time.sleep(max(0.0, (sent["deliver_at_ms"] - time.time_ns() // 1_000_000) / 1000 + 0.05))
    [message] = early or rt_json(data, "consume", "orders")
    assert message["msg_id"] == sent["msg_id"] and message["store_ms"] >= sent["deliver_at_ms"]
    assert rt_json(data, "scan") == []
    assert "no pending messages" in rt(data, "scan").stdout


def test_send_at_naive_utc_and_level(data):
    soon = time.time_ns() // 1_000_000 + 3_600_000
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(soon // 1000))
    [at] = rt_json(data, "send", "orders", "x", "--at", iso)
    assert at["route"] == "rocksdb" and at["deliver_at_ms"] == soon // 1000 * 1000
    [zoned] = rt_json(data, "send", "orders", "x", "--at", iso + "-01:00")
    assert zoned["deliver_at_ms"] == at["deliver_at_ms"] + 3_600_000
    now_ms = time.time_ns() // 1_000_000
    [level] = rt_json(data, "send", "orders", "x", "--level", "2")
    assert level["route"] == "level" and level["handle"] is None
    assert now_ms + 5_000 <= level["deliver_at_ms"] <= now_ms + 6_000
    batch = rt_json(data, "send", "orders", "x", "--delay", "1h", "--count", "5")
    assert len({r["msg_id"] for r in batch}) == 5 and {r["route"] for r in batch} == {"rocksdb"}
    human = rt(data, "send", "orders", "y", "--delay", "2h").stdout
    assert human.splitlines()[0].split() == ["msg_id", "route", "due", "handle"]


def test_scan_filters_and_limit(data):
    rt(data, "send", "a", "1", "--delay", "10m")
    rt(data, "send", "b", "2", "--delay", "20m")
    rt(data, "send", "a", "3", "--delay", "30m", "--count", "3")
    assert [e["topic"] for e in rt_json(data, "scan")] == ["a", "b", "a", "a", "a"]
    assert len(rt_json(data, "scan", "--topic", "a")) == 4
    assert [e["topic"] for e in rt_json(data, "scan", "--to", "25m")] == ["a", "b"]
    assert [e["topic"] for e in rt_json(data, "scan", "--from", "15m", "--to", "25m")] == ["b"]
    assert len(rt_json(data, "scan", "--limit", "2")) == 2
    assert "more follow" in rt(data, "scan", "--limit", "2").stdout
    deliver = rt_json(data, "scan")[1]["deliver_at_ms"]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(deliver / 1000)) + \
        f".{deliver % 1000:03d}Z"
    assert [e["topic"] for e in rt_json(data, "scan", "--from", iso, "--to", iso)] == ["b"]


def test_cancel_is_definite_and_reports_each_handle(data):
    [keep, drop] = rt_json(data, "send", "orders", "x", "--delay", "10m", "--count", "2")
    result = rt(data, "cancel", drop["handle"])
    assert result.stdout == f"{drop['handle']}: cancelled\n"
    again = rt(data, "cancel", drop["handle"], keep["handle"], code=1)
    assert again.stdout.splitlines() == [f"{drop['handle']}: not found or already delivered",
                                         f"{keep['handle']}: cancelled"]
    assert rt_json(data, "scan") == []


def test_malformed_handle_cancels_nothing(data):
    [sent] = rt_json(data, "send", "orders", "x", "--delay", "10m")
    result = rt(data, "cancel", sent["handle"], "not-a-handle!", code=None)
    assert_one_line_error(result, "not-a-handle!")
    assert [e["msg_id"] for e in rt_json(data, "scan")] == [sent["msg_id"]]


def test_binary_body_is_text_plus_base64(data):
    with Broker.open(data, BrokerConfig()) as broker:
        broker.send(Message(topic="bin", body=b"\xff\x00ok"))
        broker.send(Message(topic="bin", body="h\u00e9llo".encode()))
    binary, text = rt_json(data, "consume", "bin")
    assert binary["body_base64"] == "/wBvaw==" and "ok" in binary["body"]
    assert text["body"] == "h\u00e9llo" and "body_base64" not in text


# -- stats / compact ---------------------------------------------------------------------------
def test_stats_counts_pending_per_topic_and_consumer_lag(data):
    rt(data, "send", "a", "x", "--delay", "10m", "--count", "3")
    rt(data, "send", "b", "x", "--delay", "10m")
    rt(data, "send", "c", "now", "--count", "2")
    rt(data, "consume", "c", "--max", "1")
    figures = rt_json(data, "stats")
    assert figures["pending"] == 4 and figures["engine"] == "rocksdb"
    assert figures["pending_by_topic"] == {"a": 3, "b": 1}
    assert figures["timer"]["profile"] == BrokerConfig().rocksdb_profile
    assert figures["consumer_lag"] == [{"group": "rtimer", "topic": "c", "queue_id": 0,
                                        "next_offset": 1, "max_offset": 2, "lag": 1}]
    human = rt(data, "stats").stdout
    assert "pending       4 timer messages" in human and f"profile {BrokerConfig().rocksdb_profile}" in human and "lag 1" in human


def test_compact_rocksdb_and_memory(data, tmp_path):
    rt(data, "send", "a", "x", "--delay", "10m", "--count", "50")
    result = rt_json(data, "compact")
    assert result["compacted"] and result["engine"] == "rocksdb" and result["profile"] == BrokerConfig().rocksdb_profile
    assert {"before_live_sst_bytes", "after_live_sst_bytes"} <= set(result)
    assert f"compacted the rocksdb timer store (profile {BrokerConfig().rocksdb_profile})" in rt(data, "compact").stdout
    mem = tmp_path / "mem"
    CliRunner().invoke(cli, ["--data-dir", str(mem), "--engine", "memory", "send", "a", "x"])
    out = CliRunner().invoke(cli, ["--data-dir", str(mem), "--engine", "memory", "compact"])
    assert out.exit_code == 0 and "has nothing to compact" in out.stdout


def test_config_file_and_engine_marker(data, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("timerPrecisionMs=50\ntimerMaxDelaySec=60\n")
    ok = CliRunner().invoke(cli, ["--data-dir", str(data), "--config", str(conf), "send", "a", "x",
                                  "--delay", "59s"])
    assert ok.exit_code == 0, ok.stderr
    too_far = CliRunner().invoke(cli, ["--data-dir", str(data), "--config", str(conf), "send",
                                       "a", "x", "--delay", "61s"])
    assert_one_line_error(too_far, "timer_max_delay_sec=60")
    conf.write_text("noSuchKey=1\n")
    bad = CliRunner().invoke(cli, ["--data-dir", str(data), "--config", str(conf), "scan"])
    assert_one_line_error(bad, "noSuchKey")
    wheel = CliRunner().invoke(cli, ["--data-dir", str(data), "--engine", "wheel", "scan"])
    assert_one_line_error(wheel, "timer_engine='rocksdb'")


# -- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize("args,fragment", [
    (["send", "orders", "x", "--delay", "5x"], "'5x'"),
    (["send", "orders", "x", "--delay", "-5s"], "negative"),
    (["send", "bad topic!", "x"], "bad topic!"),
    (["send", "SCHEDULE_TOPIC_XXXX", "x"], "system topic"),
    (["send", "orders", "x", "--at", "next tuesday"], "next tuesday"),
    (["send", "orders", "x", "--level", "0"], "--level 0"),
    (["send", "orders", "x", "--delay", "5s", "--level", "1"], "at most one"),
    (["send", "orders", "x", "--prop", "novalue"], "name=value"),
    (["send", "orders", "x", "--prop", "REAL_TOPIC=x"], "REAL_TOPIC"),
    (["send", "orders", "x", "--count", "0"], "--count 0"),
    (["scan", "--from", "5x"], "'5x'"),
    (["scan", "--topic", "a b"], "'a b'"),
    (["scan", "--limit", "-1"], "--limit -1"),
    (["cancel", "djEgb3JkZXJz"], "djEgb3JkZXJz"),
    (["consume", "bad topic"], "bad topic"),
    (["consume", "orders", "--max", "0"], "--max 0"),
])
def test_bad_input_is_one_line(data, args, fragment):
    rt(data, "send", "orders", "seed")
    assert_one_line_error(CliRunner().invoke(cli, ["--data-dir", str(data), *args]), fragment)


@pytest.mark.parametrize("args", [["scan"], ["cancel", "djEgb3JkZXJz"], ["consume", "orders"],
                                  ["stats"], ["compact"]])
def test_read_commands_never_create_a_data_dir(data, args):
    result = CliRunner().invoke(cli, ["--data-dir", str(data), *args])
    assert_one_line_error(result, "does not exist")
    assert not data.exists()


def test_a_plain_directory_is_not_a_data_dir(tmp_path):
    result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "stats"])
    assert_one_line_error(result, "not an rtimer data dir")
    assert list(tmp_path.iterdir()) == []


def test_env_var_names_the_data_dir(data):
    result = CliRunner(env={"RTIMER_DATA_DIR": str(data)}).invoke(cli, ["send", "e", "x"])
    assert result.exit_code == 0 and (data / "broker.lock").exists()


# -- bench forwarding --------------------------------------------------------------------------
def test_bench_forwards_arguments(monkeypatch):
    seen = []
    fake = types.ModuleType("spark.wa_compare")
    fake.main = lambda argv=None: seen.append(argv) or 3
    monkeypatch.setitem(sys.modules, "spark.wa_compare", fake)
    result = CliRunner().invoke(cli, ["bench", "wa", "--n", "10", "--help", "x"])
    assert result.exit_code == 3 and seen == [["--n", "10", "--help", "x"]]


def test_bench_missing_module_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "spark.tune_compaction", None)
    result = CliRunner().invoke(cli, ["bench", "tune", "--quick"])
    assert_one_line_error(result, "spark.tune_compaction is not available")


# -- demo --------------------------------------------------------------------------------------
def test_demo_smoke(data):
    result = rt(data, "demo", "--messages", "60", "--max-delay", "2s")
    out = result.stdout
    assert "delivery summary" in out and "OK:" in out
    row = next(line.split() for line in out.splitlines()
               if line.strip().startswith("rocksdb timer") and line.split()[2].isdigit())
    sent, cancelled, delivered, lost, early, dups, cxl = map(int, row[2:9])
    assert (sent, cancelled, delivered, lost, early, dups, cxl) == (60, 1, 59, 0, 0, 0, 0)
    again = CliRunner().invoke(cli, ["--data-dir", str(data), "demo", "--messages", "20"])
    assert_one_line_error(again, "not empty")


def test_demo_force_refuses_foreign_directories(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "demo", "--force"])
    assert_one_line_error(result, "does not look like an rtimer data dir")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_repair_brings_back_a_store_missing_current(tmp_path):
    from click.testing import CliRunner
    from cli.main import cli
    data = tmp_path / "data"
    runner = CliRunner()
    for i in range(3):
        assert runner.invoke(cli, ["--data-dir", str(data), "send", "orders", "x" * 700,
                                   "--delay", "1h"]).exit_code == 0
    (data / "timer-rocksdb" / "CURRENT").unlink()
    refused = runner.invoke(cli, ["--data-dir", str(data), "stats"])
    assert refused.exit_code == 1 and "no CURRENT file" in refused.output
    repaired = runner.invoke(cli, ["--data-dir", str(data), "repair"])
    assert repaired.exit_code == 0 and "rebuilt; 3 pending message(s) recovered, 0 lost" in \
        repaired.output
    stats = runner.invoke(cli, ["--data-dir", str(data), "stats", "--json"])
    assert stats.exit_code == 0 and '"pending": 3' in stats.output
