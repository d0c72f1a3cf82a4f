"""The remoting front's connections (``rocks_timer/remoting/connection.py``): requests answered
within the read that brought them, and only the waiting ones carried on by a task; the idle and
frame-time closes of the sweep; junk after good frames; a client that does not read its replies
stops being read."""
from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time

import pytest

from rocks_timer import Broker, BrokerConfig, ManualClock
from rocks_timer.remoting import RemotingFront
from rocks_timer.remoting.command import RemotingCommand, decode
from rocks_timer.remoting.connection import start_request
from tests.fronts.test_remoting_pipelined import UNIQ, send_frame, stored_bodies
from tests.fronts.test_remoting_protocol import START_MS, Raw


# -- start_request: the eager start ----------------------------------------------------------
def test_a_request_that_never_waits_is_answered_without_a_task():
    async def main():
        tasks: set[asyncio.Task] = set()
        answered = []

        async def answer():
            answered.append(asyncio.current_task())
        start_request(answer(), tasks)
        # done before start_request returned, on the caller's stack (the caller's task)
        assert answered == [asyncio.current_task()] and not tasks
    asyncio.run(main())


def test_a_request_that_waits_goes_on_as_a_task_and_sees_each_outcome():
    async def main():
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task] = set()
        first, second = loop.create_future(), loop.create_future()
        seen = []

        async def answer():
            seen.append(await first)
            await asyncio.sleep(0)  # a bare yield too
            try:
                await second
            except KeyError as exc:
                seen.append(f"raised {exc}")
        start_request(answer(), tasks)
        assert seen == [] and len(tasks) == 1
        first.set_result("one")
        await asyncio.sleep(0.01)
        assert seen == ["one"] and len(tasks) == 1
        second.set_exception(KeyError("two"))
        await asyncio.wait(set(tasks))
        assert seen == ["one", "raised 'two'"] and not tasks
    asyncio.run(main())


def test_cancelling_a_waiting_request_cancels_what_it_waits_for():
    async def main():
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task] = set()
        held = loop.create_future()
        ended = []

        async def answer():
            try:
                await held
            except asyncio.CancelledError:
                ended.append("cancelled")
                raise
            finally:
                ended.append("finally")
        start_request(answer(), tasks)
        [task] = tasks
        await asyncio.sleep(0.01)  # the task has taken over the wait
        task.cancel()
        await asyncio.wait([task])
        assert held.cancelled() and ended == ["cancelled", "finally"] and task.cancelled()
    asyncio.run(main())


def test_a_request_whose_task_is_cancelled_before_it_starts_still_ends():
    async def main():
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task] = set()
        ended = []

        async def answer():
            try:
                await loop.create_future()
            finally:
                ended.append("finally")  # the request's own cleanup (its in-flight count)
        start_request(answer(), tasks)
        [task] = tasks
        task.cancel()  # before the task's first step
        await asyncio.wait([task])
        assert ended == ["finally"] and task.cancelled()
    asyncio.run(main())


# -- over real sockets ---------------------------------------------------------------------
@pytest.fixture
def clock():
    return ManualClock(START_MS)


@pytest.fixture
def broker(tmp_path, clock):
    broker = Broker.open(tmp_path / "data", BrokerConfig(), clock=clock)
    yield broker
    broker.close()


def serve(broker, **limits) -> RemotingFront:
    return RemotingFront(broker, "127.0.0.1", 0, **limits).start()


def closed_within(client: Raw, seconds: float) -> bool:
    client.sock.settimeout(seconds)
    try:
        return client.sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_a_silent_connection_is_closed_after_the_idle_time_and_a_busy_one_is_not(broker):
    front = serve(broker, idle_s=1.0)
    try:
        silent, busy = Raw(front.port), Raw(front.port)
        started = time.monotonic()
        while time.monotonic() - started < 2.5:  # 2.5 idle times, a request every 0.1 s
            assert busy.call(105, {"topic": "busy"}).code == 0
            time.sleep(0.1)
        assert closed_within(silent, 0.1)  # closed long ago, without a byte
        assert front.stats()["closed_for_time"] == 1
        assert closed_within(busy, 3.0)  # silent from now on: closed in turn
        assert front.stats()["closed_for_time"] == 2
    finally:
        front.stop()


def test_a_frame_that_does_not_arrive_whole_in_time_closes_its_connection(broker):
    front = serve(broker, frame_s=0.5)
    try:
        slow, other = Raw(front.port), Raw(front.port)
        frame = send_frame(1, "T", b"body", UNIQ_KEY=UNIQ.format(1))
        slow.send_raw(frame[:20])  # the start of a frame, and nothing more
        assert closed_within(slow, 5.0)
        assert front.stats()["closed_for_time"] == 1
        assert other.call(105, {"topic": "T"}).code == 0  # the others go on
        assert stored_bodies(broker, "T") == []
    finally:
        front.stop()


def test_junk_after_good_frames_answers_them_then_closes_only_its_connection(broker, clock):
    front = serve(broker)
    try:
        bad, other = Raw(front.port), Raw(front.port)
        bad.send_raw(send_frame(1, "J", b"good", UNIQ_KEY=UNIQ.format(1)) +
                     struct.pack(">ii", 0x7FFFFFFF, 12) + b"x" * 16)
        reply = bad.read()
        assert reply.opaque == 1 and reply.code == 0
        assert closed_within(bad, 5.0)
        assert front.stats()["closed_for_junk"] == 1
        assert other.call(105, {"topic": "J"}).code == 0
        assert stored_bodies(broker, "J") == [b"good"]
    finally:
        front.stop()


def test_a_client_that_does_not_read_its_replies_stops_being_read(broker):
    front = serve(broker)
    requests = 20_000
    try:
        lazy = socket.socket()
        lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window
        lazy.connect(("127.0.0.1", front.port))
        frames = b"".join(RemotingCommand(105, i, ext={"topic": "lazy"}).encode()
                          for i in range(1, requests + 1))
        writer = threading.Thread(target=lazy.sendall, args=(frames,), daemon=True)
        writer.start()

        def answered() -> int:
            return front.request_counts()[0].get("GET_ROUTEINFO_BY_TOPIC", 0)

        def settled() -> int:  # the count once it stops moving
            last = -1
            while answered() != last:
                last = answered()
                time.sleep(0.3)
            return last
        assert 0 < settled() < requests  # paused: replies wait for a reader
        other = Raw(front.port)
        assert other.call(105, {"topic": "T"}).code == 0  # the others go on
        read, opaque = b"", 0
        lazy.settimeout(30)
        while opaque < requests:  # now read: every request gets its answer, in order
            read += lazy.recv(1 << 16)
            while len(read) >= 4 and len(read) >= 4 + int.from_bytes(read[:4], "big"):
                size = 4 + int.from_bytes(read[:4], "big")
                frame, read = read[:size], read[size:]
                reply = decode(int.from_bytes(frame[4:8], "big"), frame[8:])
                opaque += 1
                assert reply.opaque == opaque and reply.code == 0
        writer.join(10)
        lazy.close()
        other.close()
    finally:
        front.stop()


def test_a_json_reply_header_lists_its_fields_in_name_order():
    """As RocketMQ's fastjson writes a header (the Java client reads that order fastest)."""
    request = RemotingCommand(310, 9, ext={"b": "T"})
    for reply in (request.response(0, ext={"msgId": "X", "queueId": 1}),
                  request.response(13, remark="refused")):
        data = reply.encode()
        header_len = int.from_bytes(data[5:8], "big")
        keys = list(json.loads(data[8:8 + header_len]))
        assert keys == sorted(keys) and keys[0] == "code" and keys[-1] == "version"
        assert decode(int.from_bytes(data[4:8], "big"), data[8:]).opaque == 9
