"""Set-aside (quarantined) timer messages stay visible until an operator decides (issue #30
point 4, ARCHITECTURE §9): listed by message (msg_id, topic, keys, due time, reason), exported raw,
restored once the cause is fixed (refused while it is not), counted in stats, failing check."""
from __future__ import annotations

import json
import shutil

from click.testing import CliRunner

from cli.main import cli
from rocks_timer import Broker, ManualClock, Message

from tests.support.engine_helpers import START_MS
from tests.support.fault_support import HOUR, config, flip, rtimer_check, vlog_files

KEYS = [("order-%d" % i, "customer-%d" % (i % 2)) for i in range(4)]


def seed(path) -> list:
    with Broker.open(path, config(), clock=ManualClock(START_MS)) as broker:
        return [broker.send(Message("later", b"body-%d" % i + bytes(300), keys=KEYS[i]),
                            delay_ms=HOUR + i) for i in range(4)]


def deliver(path) -> list[bytes]:
    """Open, run past every due time, return the bodies delivered (prefixes)."""
    with Broker.open(path, config(), clock=ManualClock(START_MS)) as broker:
        broker.clock.set(START_MS + 2 * HOUR)
        for _ in range(10):
            broker.tick()
        return sorted(m.body[:6] for m in broker.pull("later", 0, 0, 100))


def rtimer(path, *args) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--data-dir", str(path), *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_a_lost_segment_sets_messages_aside_visibly_and_restore_puts_them_back(tmp_path):
    data = tmp_path / "data"
    sent = seed(data)
    [segment] = vlog_files(data)
    saved = tmp_path / "segment.copy"
    shutil.copy(segment, saved)
    segment.unlink()
    assert deliver(data) == []  # nothing delivered as garbage
    with Broker.open(data, config(), clock=ManualClock(START_MS)) as broker:
        rows = broker.set_aside()
        assert broker.stats()["set_aside"] == 4
        assert not broker.check().ok
    assert sorted(r.msg_id for r in rows) == sorted(s.msg_id for s in sent)
    assert {r.topic for r in rows} == {"later"} and all(r.keys is None for r in rows)
    assert sorted(r.due_ms for r in rows) == sorted(s.deliver_at_ms for s in sent)
    assert all("segment is missing" in r.reason and not r.restorable for r in rows)

    code, out = rtimer(data, "check")
    assert code == 1 and "4 message(s) set aside" in out and "rtimer set-aside list" in out
    assert f"set-aside msg_id {sent[0].msg_id} topic later" in out
    code, out = rtimer(data, "set-aside", "list", "--json")
    assert code == 0 and len(json.loads(out)) == 4
    code, out = rtimer(data, "set-aside", "restore")
    assert code == 1 and "0 restored, 4 refused" in out  # the cause is not fixed yet
    code, out = rtimer(data, "set-aside", "export", str(tmp_path / "out"))
    assert code == 0 and "exported 4 set-aside message(s)" in out
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["exported"] == 4
    assert all(set(e["files"]) == {"index"} for e in manifest["messages"])  # nothing else left

    shutil.copy(saved, segment)  # the cause fixed: the segment is back from a copy
    code, out = rtimer(data, "set-aside", "list")
    assert "4 set-aside message(s), 4 restorable now" in out, out
    assert "order-0,customer-0" in out
    code, out = rtimer(data, "set-aside", "restore", sent[1].msg_id.lower())
    assert code == 0 and f"restored {sent[1].msg_id}" in out and "1 restored, 0 refused" in out
    assert deliver(data) == [b"body-1"]
    code, out = rtimer(data, "set-aside", "restore")
    assert code == 0 and "3 restored" in out
    assert deliver(data) == [b"body-0", b"body-1", b"body-2", b"body-3"]  # once each
    assert rtimer_check(data)[0] == 0
    with Broker.open(data, config(), clock=ManualClock(START_MS)) as broker:
        assert broker.set_aside() == [] and broker.stats()["set_aside"] == 0
        assert broker.check().ok


def test_a_damaged_record_is_exported_raw_and_refused_until_fixed(tmp_path):
    data = tmp_path / "data"
    sent = seed(data)
    [segment] = vlog_files(data)
    original = segment.read_bytes()
    at = original.index(b"body-2") + 3
    flip(segment, at)
    assert deliver(data) == [b"body-0", b"body-1", b"body-3"]
    code, out = rtimer(data, "set-aside", "list")
    assert sent[2].msg_id in out and "CRC mismatch" in out and "1 set-aside message(s)" in out
    code, out = rtimer(data, "set-aside", "export", str(tmp_path / "out"), "--msg-id",
                       sent[2].msg_id)
    assert code == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    [entry] = manifest["messages"]
    assert entry["msg_id"] == sent[2].msg_id and set(entry["files"]) == {"index", "record"}
    record = (tmp_path / "out" / entry["files"]["record"]).read_bytes()
    assert b"body-2"[:3] in record  # the raw bytes as they are on disk, damage included
    assert rtimer(data, "set-aside", "restore", sent[2].msg_id)[0] == 1
    segment.write_bytes(original)
    assert rtimer(data, "set-aside", "restore", sent[2].msg_id)[0] == 0
    assert deliver(data) == [b"body-0", b"body-1", b"body-2", b"body-3"]


def test_restore_of_an_unknown_id_is_a_clear_error(tmp_path):
    data = tmp_path / "data"
    seed(data)
    result = CliRunner().invoke(cli, ["--data-dir", str(data), "set-aside", "restore",
                                      "00" * 16])
    assert result.exit_code != 0 and "no set-aside message has msg_id" in result.output


def test_the_commands_reach_a_running_broker(tmp_path):
    """With a broker holding the data dir, list, export, restore and check go over its socket
    (the read-only view would be refused the lock) and say the same."""
    from cli.remote import BrokerSocketServer
    data = tmp_path / "data"
    sent = seed(data)
    [segment] = vlog_files(data)
    saved = tmp_path / "segment.copy"
    shutil.copy(segment, saved)
    segment.unlink()
    assert deliver(data) == []
    with Broker.open(data, config(), clock=ManualClock(START_MS + 2 * HOUR)) as broker, \
            BrokerSocketServer(broker, data):
        code, out = rtimer(data, "check")
        assert code == 1 and "4 message(s) set aside" in out
        assert len(json.loads(rtimer(data, "set-aside", "list", "--json")[1])) == 4
        assert rtimer(data, "set-aside", "export", str(tmp_path / "out"))[0] == 0
        assert json.loads((tmp_path / "out" / "manifest.json").read_text())["exported"] == 4
        shutil.copy(saved, segment)
        code, out = rtimer(data, "set-aside", "restore")
        assert code == 0 and "4 restored, 0 refused" in out
        for _ in range(10):
            broker.tick()
        assert sorted(m.msg_id for m in broker.pull("later", 0, 0, 10)) == sorted(
            s.msg_id for s in sent)
        assert rtimer(data, "check")[0] == 0
