"""``rtimer find``, ``cancel --key``, ``reschedule`` and ``stats --due``: directly on a data dir
and through a running broker's socket (the same ops)."""
from __future__ import annotations

import pytest

from tests.tools.test_cli import assert_one_line_error, rt, rt_json
from tests.tools.test_cli_remote import rtimer, rtimer_json, start_broker, stop_broker


@pytest.fixture
def data(tmp_path):
    return tmp_path / "data"


def test_find_reschedule_cancel_by_key_directly(data):
    [a] = rt_json(data, "send", "orders", "close 42", "--delay", "30m", "--key", "order-42")
    [b] = rt_json(data, "send", "orders", "remind 42", "--delay", "2h", "--key", "order-42",
                  "--key", "cust-7")
    rt_json(data, "send", "orders", "close 43", "--delay", "3d", "--key", "order-43")
    found = rt_json(data, "find", "orders", "order-42")
    assert [e["msg_id"] for e in found] == [a["msg_id"], b["msg_id"]]
    assert "2 pending" in rt(data, "find", "orders", "order-42").stdout
    moved = rt_json(data, "reschedule", a["handle"], "--delay", "3h")
    assert moved[0]["status"] == "rescheduled" and moved[0]["handle"] != a["handle"]
    assert [e["msg_id"] for e in rt_json(data, "find", "orders", "order-42")] == [
        b["msg_id"], a["msg_id"]]
    stale = rt(data, "reschedule", a["handle"], "--delay", "1h", code=1)
    assert "not found, delivered or cancelled" in stale.stdout
    due = rt_json(data, "stats", "--due", "--days", "5")
    assert due["buckets"]["hour"] == 0 and due["buckets"]["day"] == 2
    assert due["buckets"]["week"] == 1 and len(due["days"]) == 5
    assert "next day     2" in rt(data, "stats", "--due").stdout
    cancelled = rt_json(data, "cancel", "--topic", "orders", "--key", "order-42")
    assert cancelled["cancelled"] == 2 and len(cancelled["handles"]) == 2
    assert "cancelled 0 pending" in rt(data, "cancel", "--topic", "orders", "--key",
                                       "order-42", code=1).stdout
    assert rt_json(data, "find", "orders", "order-42") == []


@pytest.mark.parametrize("args,fragment", [
    (("reschedule", "--topic", "orders", "--key", "k"), "exactly one of --delay and --at"),
    (("reschedule", "--key", "k", "--delay", "1m"), "--key needs --topic"),
    (("reschedule", "--delay", "1m"), "handles, or --topic and --key"),
    (("reschedule", "--topic", "orders", "--key", "k", "--delay", "99d"), "maximum"),
    (("cancel", "--key", "k"), "not both"),
    (("cancel",), "give the handles"),
    (("find", "bad topic!", "k"), "topic"),
    (("find", "orders", "two words"), "space"),
    (("stats", "--due", "--days", "999"), "--days"),
    (("stats", "--from-day", "2026-01-01"), "--from-day goes with --due"),
])
def test_bad_input_is_one_line(data, args, fragment):
    rt(data, "send", "orders", "x", "--delay", "1m", "--key", "k")
    assert_one_line_error(rt(data, *args, code=None), fragment)


def test_through_the_running_broker(tmp_path):
    data = tmp_path / "remote"
    rtimer(data, "send", "orders", "warm", "--delay", "3h")  # creates the data dir
    proc = start_broker(data)
    try:
        [sent] = rtimer_json(data, "send", "orders", "x", "--delay", "1h", "--key", "k9")
        assert [e["msg_id"] for e in rtimer_json(data, "find", "orders", "k9")] == [sent["msg_id"]]
        [moved] = rtimer_json(data, "reschedule", "--topic", "orders", "--key", "k9",
                              "--delay", "10m")
        assert moved["status"] == "rescheduled"
        assert rtimer_json(data, "stats", "--due")["buckets"]["hour"] == 1
        assert rtimer_json(data, "cancel", "--topic", "orders", "--key", "k9")["cancelled"] == 1
        done = rtimer(data, "reschedule", moved["handle"], "--delay", "1m", check=1)
        assert "not found" in done.stdout
    finally:
        stop_broker(proc)
