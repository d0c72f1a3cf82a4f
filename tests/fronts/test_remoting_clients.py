"""The unmodified RocketMQ 4.x clients (the Java client 4.9.8, PyPI ``rocketmq`` 0.4.4 on its
C++ core) against ``rtimer run --remoting-listen 127.0.0.1:0`` in a subprocess: sends with delay levels, TIMER_DELIVER_MS and batches, push
consumption with tags and keys intact, never early; a failed consume comes back with
reconsumeTimes 1; committed offsets survive a consumer restart; kill -9 of rtimer with pending
level and timer messages loses none (timer messages exactly once)."""
from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from rocks_timer import Broker
from rocks_timer.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevelTable
from rocks_timer.message import SCHEDULE_TOPIC
from tests.support.remoting_support import CLIENTS, PY4, ROOT, RtimerProcess, need_python4, now_ms

LEVELS_MS = DelayLevelTable.parse(DEFAULT_DELAY_LEVELS).delays_ms
LATE_MS = 1_500   # TIMER_DELIVER_MS: delivered within this of its due time
# Most of a scenario is waiting for real delays (levels of 1-10 s, timers of 3-6 s, a retry at
# level 3), so the selected scenarios run on a pool, RUNS_AT_ONCE at a time, each with its own
# rtimer and client processes; each test waits for its own run and raises what it raised.
RUNS_AT_ONCE = 3


@pytest.fixture(params=sorted(CLIENTS))
def client(request):
    """The client kind (skipped, or failed under CI=true, when not installed)."""
    need, _ = CLIENTS[request.param]
    need()
    return request.param


def installed(kind: str) -> bool:
    try:
        CLIENTS[kind][0]()
    except (pytest.skip.Exception, pytest.fail.Exception):
        return False
    return True


class Runs:
    """The scenarios of the selected tests (name, client kind), submitted in test order to a
    pool when the first test asks for one."""

    def __init__(self, wanted: list[tuple[str, str]], tmp_path_factory):
        self.pool = ThreadPoolExecutor(RUNS_AT_ONCE, thread_name_prefix="remoting-run")
        self.futures: dict[tuple[str, str], Future] = {}
        for name, kind in wanted:
            if installed(kind):
                root = tmp_path_factory.mktemp(f"{name[:40]}-{kind}")
                self.futures[name, kind] = self.pool.submit(SCENARIOS[name], CLIENTS[kind][1],
                                                            root)

    def result(self, name: str, kind: str) -> None:
        self.futures[name, kind].result()  # re-raises the scenario's own assertion error


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    wanted = []
    for item in request.session.items:
        params = item.callspec.params if hasattr(item, "callspec") else {}
        if item.module is request.module and "client" in params:
            wanted.append((item.function.__name__.removeprefix("test_"), params["client"]))
    runs = Runs(wanted, tmp_path_factory)
    yield runs
    runs.pool.shutdown(wait=True, cancel_futures=True)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def level_ms(level: int) -> int:
    return LEVELS_MS[level - 1]


def send_and_push_consume_with_levels_timer_and_batch(client, tmp_path):
    rtimer = RtimerProcess(tmp_path / "data").start()
    try:
        _send_and_push_consume(client, rtimer, tmp_path)
    finally:
        rtimer.stop()


def _send_and_push_consume(client, rtimer, tmp_path):
    topic, group = unique("JT"), unique("jg")
    producer = client.producer(rtimer.address)
    consumer = client.consumer(rtimer.address, group, topic)
    try:
        sent = {}
        plain = producer.send({"topic": topic, "tag": "tagA", "keys": "k1 k2", "body": "plain"})
        assert plain["status"] == "SEND_OK", plain
        sent["plain"] = plain
        big = "B" * 9000  # over 4 KiB: the client compresses it
        assert producer.send({"topic": topic, "tag": "big", "keys": "kb", "body": big}
                             )["status"] == "SEND_OK"
        batch = [{"topic": topic, "tag": "batch", "keys": "b1", "body": "batch-1"},
                 {"topic": topic, "tag": "batch", "keys": "b2", "body": "batch-2"}]
        if client.BATCH:
            assert producer.send({"batch": batch})["status"] == "SEND_OK"
        else:  # ali-ons has no batch send
            assert all(producer.send(m)["status"] == "SEND_OK" for m in batch)
        for level in range(1, 19):
            reply = producer.send({"topic": topic, "tag": f"L{level}", "keys": f"level{level}",
                                   "body": f"level-{level}", "level": level})
            assert reply["status"] == "SEND_OK", reply
            sent[f"level-{level}"] = reply
        due_ms = now_ms() + 3_000
        timer = producer.send({"topic": topic, "tag": "timer", "keys": "kt", "body": "timer",
                               "props": {"TIMER_DELIVER_MS": str(due_ms)}})
        assert timer["status"] == "SEND_OK", timer
        expected = {"plain", big, "batch-1", "batch-2", "timer", "level-1", "level-2",
                    "level-3"}
        got = consumer.collect("received", lambda found: expected <= {m["body"] for m in found},
                               timeout_s=60)
        by_body = {m["body"]: m for m in got}
        assert expected <= set(by_body), sorted(set(by_body))
        assert (by_body["plain"]["tags"], by_body["plain"]["keys"]) == ("tagA", "k1 k2")
        assert by_body["plain"]["msgId"] == plain["msgId"]
        assert by_body[big]["keys"] == "kb"
        assert (by_body["batch-2"]["tags"], by_body["batch-2"]["keys"]) == ("batch", "b2")
        for level in (1, 2, 3):
            msg = by_body[f"level-{level}"]
            assert msg["topic"] == topic and msg["tags"] == f"L{level}"
            assert msg["keys"] == f"level{level}"
            assert msg["receivedMs"] >= msg["bornMs"] + level_ms(level), msg  # never early
        arrived = by_body["timer"]
        assert arrived["storeMs"] >= due_ms and arrived["receivedMs"] >= due_ms
        assert arrived["receivedMs"] - due_ms <= LATE_MS, arrived["receivedMs"] - due_ms
        assert not {f"level-{n}" for n in range(4, 19)} & set(by_body)  # none early
        assert Counter(m["body"] for m in got)["timer"] == 1
    finally:
        consumer.close()
        producer.close()
    rtimer.stop()
    # the long levels wait on their own level queue, due exactly one level delay after storing
    with Broker.open(tmp_path / "data") as broker:
        for level in range(4, 19):
            parked = [m for m in broker.pull(SCHEDULE_TOPIC, level - 1, 0, 100)
                      if m.properties.get("REAL_TOPIC") == topic]
            assert len(parked) == 1 and parked[0].body == f"level-{level}".encode()
            entry = broker.messages.consume_queue(SCHEDULE_TOPIC, level - 1).get(
                parked[0].queue_offset)
            assert entry.tags_code == parked[0].store_ms + level_ms(level)


def a_failed_consume_returns_with_reconsume_times_1_and_offsets_survive_restart(client,
                                                                               tmp_path):
    rtimer = RtimerProcess(tmp_path / "data").start()
    try:
        _failed_consume_and_restart(client, rtimer)
    finally:
        rtimer.stop()


def _failed_consume_and_restart(client, rtimer):
    topic, group = unique("JR"), unique("jr")
    producer = client.producer(rtimer.address)
    consumer = client.consumer(rtimer.address, group, topic)
    try:
        for body in ("fail-1", "ok-1"):
            assert producer.send({"topic": topic, "tag": "t", "keys": body, "body": body}
                                 )["status"] == "SEND_OK"
        got = consumer.collect("received", lambda found: sum(
            m["body"] == "fail-1" for m in found) >= 2, timeout_s=60)
        fails = [m for m in got if m["body"] == "fail-1"]
        assert [m["reconsumeTimes"] for m in fails] == [0, 1], got
        retry = fails[1]
        assert retry["topic"] == topic and retry["keys"] == "fail-1" and retry["tags"] == "t"
        assert retry["msgId"] == fails[0]["msgId"]
        assert retry["receivedMs"] - fails[0]["receivedMs"] >= level_ms(3) - 1_000
        consumer.close()  # a clean shutdown commits its offsets
        consumer = None
        for body in ("after-1", "after-2"):
            assert producer.send({"topic": topic, "tag": "t", "keys": body, "body": body}
                                 )["status"] == "SEND_OK"
        consumer = client.consumer(rtimer.address, group, topic)
        again = consumer.collect("received", lambda found: {"after-1", "after-2"} <= {
            m["body"] for m in found}, timeout_s=60)
        time.sleep(2)  # anything consumed before the restart would come now
        while not consumer.events.empty():
            event = consumer.events.get()
            if event.get("event") == "received":
                again.append(event)
        assert sorted(m["body"] for m in again) == ["after-1", "after-2"]
    finally:
        if consumer is not None:
            consumer.close()
        producer.close()


def kill9_with_pending_level_and_timer_messages_loses_none(client, tmp_path):
    topic, group = unique("JK"), unique("jk")
    first = RtimerProcess(tmp_path / "data").start()
    producer = client.producer(first.address)
    try:
        due_ms = now_ms() + 6_000
        for i in range(5):
            assert producer.send({"topic": topic, "tag": "timer", "keys": f"t{i}",
                                  "body": f"timer-{i}",
                                  "props": {"TIMER_DELIVER_MS": str(due_ms)}})["status"] == \
                "SEND_OK"
            assert producer.send({"topic": topic, "tag": "level", "keys": f"l{i}",
                                  "body": f"level-{i}", "level": 2})["status"] == "SEND_OK"
    finally:
        producer.close(timeout_s=5)
    first.kill9()
    second = RtimerProcess(tmp_path / "data").start()
    consumer = client.consumer(second.address, group, topic)
    try:
        want = {f"timer-{i}" for i in range(5)} | {f"level-{i}" for i in range(5)}
        got = consumer.collect("received", lambda found: want <= {m["body"] for m in found},
                               timeout_s=60)
        time.sleep(2)  # room for a duplicate to show
        while not consumer.events.empty():
            event = consumer.events.get()
            if event.get("event") == "received":
                got.append(event)
        counts = Counter(m["body"] for m in got)
        assert want <= set(counts), sorted(want - set(counts))
        assert all(counts[f"timer-{i}"] == 1 for i in range(5)), counts  # exactly once
        for msg in got:
            if msg["body"].startswith("timer"):
                assert msg["storeMs"] >= due_ms
            else:
                assert msg["storeMs"] >= msg["bornMs"] + level_ms(2)
    finally:
        consumer.close()
        second.stop()


SCENARIOS = {f.__name__: f for f in (
    send_and_push_consume_with_levels_timer_and_batch,
    a_failed_consume_returns_with_reconsume_times_1_and_offsets_survive_restart,
    kill9_with_pending_level_and_timer_messages_loses_none)}


def test_send_and_push_consume_with_levels_timer_and_batch(client, runs):
    runs.result("send_and_push_consume_with_levels_timer_and_batch", client)


def test_a_failed_consume_returns_with_reconsume_times_1_and_offsets_survive_restart(client,
                                                                                    runs):
    runs.result("a_failed_consume_returns_with_reconsume_times_1_and_offsets_survive_restart",
                client)


def test_kill9_with_pending_level_and_timer_messages_loses_none(client, runs):
    runs.result("kill9_with_pending_level_and_timer_messages_loses_none", client)


def test_the_readme_python_snippet_runs(tmp_path):
    """docs/FRONTS.md's "RocketMQ 4.x clients" Python block, as written, against rtimer."""
    need_python4()
    text = (ROOT / "docs" / "FRONTS.md").read_text(encoding="utf-8")
    block = text.split("<!-- remoting-snippet:start -->", 1)[1].split(
        "<!-- remoting-snippet:end -->")[0]
    code = block.split("```python", 1)[1].split("```", 1)[0]
    script = tmp_path / "snippet.py"
    script.write_text(code)
    proc = RtimerProcess(tmp_path / "data").start()
    try:
        done = subprocess.run([str(PY4), str(script)], capture_output=True, text=True,
                              timeout=90, env=dict(os.environ, NAMESRV=proc.address,
                                                   HOME=str(tmp_path)))
    finally:
        proc.stop()
    assert done.returncode == 0, done.stderr
    received = [line for line in done.stdout.splitlines() if line.startswith("received")]
    assert received and "close order 42" in received[0] and "close order 43" in received[0], \
        done.stdout
