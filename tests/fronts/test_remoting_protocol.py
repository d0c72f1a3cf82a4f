"""The remoting front in-process, over real sockets with a small raw client: the frame codec,
the V1 record layout, sends and routing, dedup, recall, offsets, long polling, send-back retry
and DLQ (under a manual clock), runtime info, and bad input."""
from __future__ import annotations

import json
import socket
import struct
import threading
import time
import zlib

import pytest

from rocks_timer import Broker, BrokerConfig, ManualClock, Message
from rocks_timer.remoting import RemotingFront
from rocks_timer.remoting.command import (ROCKETMQ_TYPE, FrameError, RemotingCommand, decode,
                                          frame_size)
from rocks_timer.remoting.records import decode_batch, encode_for_client, offset_msg_id

START_MS = 1_800_000_000_000
UNIQ = "0A0B0C0D0E0F10111213141516170001"


class Raw:
    """A bare remoting client: one socket, requests answered in order."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.opaque = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> RemotingCommand:
        prefix = self._exactly(8)
        total, _ = frame_size(prefix)
        return decode(int.from_bytes(prefix[4:], "big"), self._exactly(total - 4))

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out

    def call(self, code: int, ext: dict | None = None, body: bytes = b"",
             serialize_type: int = 0) -> RemotingCommand:
        self.opaque += 1
        self.send_raw(RemotingCommand(code, self.opaque, ext={k: str(v) for k, v in
                                                              (ext or {}).items()},
                                      body=body, serialize_type=serialize_type).encode())
        while True:
            reply = self.read()
            if reply.is_response and reply.opaque == self.opaque:
                return reply

    def closed(self) -> bool:
        try:
            self.sock.settimeout(5)
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def props(**values) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in values.items())


def send(client: Raw, topic: str, body: bytes, code: int = 10, queue_id: int = 0,
         **properties) -> RemotingCommand:
    ext = {"producerGroup": "pg", "topic": topic, "queueId": queue_id, "sysFlag": 0,
           "bornTimestamp": START_MS, "flag": 0, "properties": props(**properties)}
    if code == 310:
        names = {"producerGroup": "a", "topic": "b", "queueId": "e", "sysFlag": "f",
                 "bornTimestamp": "g", "flag": "h", "properties": "i"}
        ext = {names[k]: v for k, v in ext.items()}
    return client.call(code, ext, body)


def pull(client: Raw, topic: str, group: str = "cg", queue_id: int = 0, offset: int = 0,
         suspend_ms: int = 0, **extra) -> RemotingCommand:
    ext = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
           "maxMsgNums": 32, "sysFlag": 2 if suspend_ms else 0,
           "suspendTimeoutMillis": suspend_ms, **extra}
    return client.call(11, ext)


def records(body: bytes) -> list[dict]:
    """Decode a pull body as a client does (V1 layout)."""
    out, at = [], 0
    while at < len(body):
        (size, magic, crc, queue_id, flag, queue_offset, physical, sys_flag, born, born_host,
         store, store_host, reconsume, _tx, body_len) = struct.unpack_from(
            ">iIIiiqqiq8sq8siqi", body, at)
        pos = at + 88
        payload = body[pos:pos + body_len]
        pos += body_len
        topic_len = body[pos]
        topic = body[pos + 1:pos + 1 + topic_len].decode()
        pos += 1 + topic_len
        (props_len,) = struct.unpack_from(">H", body, pos)
        raw = body[pos + 2:pos + 2 + props_len].decode()
        assert pos + 2 + props_len - at == size
        out.append({"magic": magic, "crc": crc, "queue_id": queue_id, "queue_offset": queue_offset,
                    "physical": physical, "body": payload, "topic": topic,
                    "store_host": store_host, "reconsume": reconsume, "sys_flag": sys_flag,
                    "props": dict(p.split("\x01", 1) for p in raw.split("\x02") if p)})
        at += size
    return out


@pytest.fixture
def clock():
    return ManualClock(START_MS)


@pytest.fixture
def front(tmp_path, clock):
    broker = Broker.open(tmp_path / "data", BrokerConfig(), clock=clock)
    front = RemotingFront(broker, "127.0.0.1", 0, max_in_flight=4).start()
    yield front
    front.stop()
    broker.close()


@pytest.fixture
def client(front):
    raw = Raw(front.port)
    yield raw
    raw.close()


# -- codec ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", [0, ROCKETMQ_TYPE])
def test_a_command_round_trips_in_both_header_types(kind):
    cmd = RemotingCommand(310, opaque=7, flag=2, remark="r", ext={"a": "pg", "b": "T"},
                          body=b"xyz", language="CPP", version=63, serialize_type=kind)
    data = cmd.encode()
    total, header_len = frame_size(data[:8])
    assert total == len(data) - 4 and data[4] == kind
    back = decode(int.from_bytes(data[4:8], "big"), data[8:])
    assert (back.code, back.opaque, back.flag, back.remark, back.ext, back.body, back.language,
            back.version) == (310, 7, 2, "r", {"a": "pg", "b": "T"}, b"xyz", "CPP", 63)
    assert back.is_oneway and not back.is_response


@pytest.mark.parametrize("prefix", [struct.pack(">ii", 0x7FFFFFFF, 10),
                                    struct.pack(">ii", 20, 30),
                                    struct.pack(">ii", 20, (5 << 24) | 4)])
def test_impossible_frame_sizes_are_refused(prefix):
    with pytest.raises(FrameError):
        frame_size(prefix)


def test_the_v1_record_has_91_fixed_bytes_and_a_body_crc():
    msg = Message(topic="T", body=b"hello", properties={"TAGS": "a"}, msg_id=UNIQ, queue_id=2,
                  queue_offset=5, commitlog_offset=1234, born_ms=1, store_ms=2)
    data = encode_for_client(msg, socket.inet_aton("127.0.0.1"), 9876)
    assert len(data) == 91 + 5 + 1 + len(msg.encoded_properties)
    [rec] = records(data)
    assert rec["crc"] == zlib.crc32(b"hello") & 0x7FFFFFFF
    assert rec["physical"] == 1234 and rec["queue_offset"] == 5 and rec["queue_id"] == 2
    assert rec["store_host"] == socket.inet_aton("127.0.0.1") + struct.pack(">i", 9876)


def test_a_batch_body_decodes_and_a_broken_one_is_refused():
    def entry(body: bytes, properties: str) -> bytes:
        raw = properties.encode()
        size = 20 + len(body) + 2 + len(raw)
        return struct.pack(">iiiii", size, 0, 0, 0, len(body)) + body + \
            struct.pack(">H", len(raw)) + raw
    data = entry(b"one", props(UNIQ_KEY=UNIQ)) + entry(b"two", props(TAGS="t"))
    assert [(b, p) for _, b, p in decode_batch(data, 10)] == [
        (b"one", {"UNIQ_KEY": UNIQ}), (b"two", {"TAGS": "t"})]
    with pytest.raises(ValueError):
        decode_batch(data[:-3], 10)
    with pytest.raises(ValueError):
        decode_batch(data, 1)


# -- producing ----------------------------------------------------------------------------------
def test_route_answers_any_topic_with_this_broker(front, client):
    reply = client.call(105, {"topic": "orders"})
    route = json.loads(reply.body)
    assert reply.code == 0
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": f"127.0.0.1:{front.port}"}
    assert route["queueDatas"][0]["writeQueueNums"] == 4
    retry = json.loads(client.call(105, {"topic": "%RETRY%g"}).body)
    assert retry["queueDatas"][0]["readQueueNums"] == 1
    assert client.call(105, {"topic": "bad topic!"}).code == 29


def test_sends_route_by_delay_and_timer_properties_and_pull_serves_v1(front, client, clock):
    now = clock.now_ms()
    plain = send(client, "T", b"plain", queue_id=1, UNIQ_KEY=UNIQ, TAGS="a", KEYS="k1 k2")
    assert plain.code == 0 and plain.ext["msgId"] == UNIQ and plain.ext["queueId"] == "1"
    level = send(client, "T", b"level", code=310, DELAY="2")
    assert level.code == 0 and "recallHandle" not in level.ext
    timer = send(client, "T", b"timer", TIMER_DELIVER_MS=str(now + 3000))
    assert timer.code == 0 and timer.ext["recallHandle"]
    broker = front.broker
    assert [e.deliver_at_ms for e in broker.scan()] == [now + 3000]
    got = pull(client, "T", queue_id=1)
    assert got.code == 0
    [rec] = records(got.body)
    assert rec["body"] == b"plain" and rec["props"]["TAGS"] == "a"
    assert rec["props"]["KEYS"] == "k1 k2" and rec["props"]["UNIQ_KEY"] == UNIQ
    assert got.ext["nextBeginOffset"] == "1" and got.ext["maxOffset"] == "1"
    assert pull(client, "T", queue_id=0).code == 19  # nothing due yet on queue 0
    clock.advance(5_000)
    broker.tick()
    bodies = sorted(r["body"] for r in records(pull(client, "T", queue_id=0).body))
    assert bodies == [b"level", b"timer"]


def test_a_compressed_body_is_stored_plain(front, client):
    body = b"x" * 10_000
    ext = {"producerGroup": "pg", "topic": "Z", "queueId": 0, "sysFlag": 1,
           "bornTimestamp": START_MS, "flag": 0, "properties": props(UNIQ_KEY=UNIQ)}
    assert client.call(10, ext, zlib.compress(body)).code == 0
    [rec] = records(pull(client, "Z").body)
    assert rec["body"] == body and rec["sys_flag"] == 0
    bomb = zlib.compress(b"\0" * (front.broker.config.max_message_size + 10))
    assert client.call(10, dict(ext, properties=props()), bomb).code == 13


def test_a_retried_send_is_stored_once_with_the_same_recall_handle(front, client, clock):
    due = str(clock.now_ms() + 60_000)
    first = send(client, "T", b"once", UNIQ_KEY=UNIQ, TIMER_DELIVER_MS=due)
    again = send(client, "T", b"once", UNIQ_KEY=UNIQ, TIMER_DELIVER_MS=due)
    assert first.ext["recallHandle"] == again.ext["recallHandle"]
    assert len(front.broker.scan()) == 1 and front.stats()["duplicate_sends"] == 1


def test_recall_cancels_once_and_refuses_a_bad_handle(front, client, clock):
    reply = send(client, "T", b"r", TIMER_DELIVER_MS=str(clock.now_ms() + 60_000))
    handle = reply.ext["recallHandle"]
    assert client.call(370, {"producerGroup": "pg", "topic": "T",
                             "recallHandle": handle}).code == 0
    assert front.broker.scan() == []
    assert client.call(370, {"producerGroup": "pg", "topic": "T",
                             "recallHandle": handle}).code == 604
    assert client.call(370, {"producerGroup": "pg", "topic": "T",
                             "recallHandle": "garbage"}).code == 604
    assert client.call(370, {"producerGroup": "pg", "topic": "Other",
                             "recallHandle": handle}).code == 604


def test_bad_sends_answer_message_illegal_and_store_nothing(front, client, clock):
    assert send(client, "SCHEDULE_TOPIC_XXXX", b"x").code == 13
    assert send(client, "T", b"x", TIMER_DELIVER_MS="soon").code == 13
    assert send(client, "T", b"x", REAL_TOPIC="T").code == 13
    assert send(client, "T", b"x", queue_id=9).code == 13
    assert client.call(10, {"producerGroup": "pg"}, b"x").code == 13
    assert front.broker.max_offset("T", 0) == 0 and front.broker.scan() == []


# -- consuming -----------------------------------------------------------------------------------
def test_offsets_new_group_update_and_query(front, client):
    query = {"consumerGroup": "g1", "topic": "T", "queueId": 0}
    assert client.call(14, query).ext["offset"] == "0"  # the queue still starts at 0
    assert client.call(15, dict(query, commitOffset=7)).code == 0
    assert client.call(14, query).ext["offset"] == "7"
    assert front.broker.consumer_offsets.find("T", "g1", 0) == 7
    send(client, "T", b"a")
    assert client.call(30, {"topic": "T", "queueId": 0}).ext["offset"] == "1"
    assert client.call(31, {"topic": "T", "queueId": 0}).ext["offset"] == "0"


def test_a_pull_commits_its_offset_and_filters_by_tag(front, client):
    for tag in ("a", "b", "a"):
        send(client, "T", tag.encode(), TAGS=tag)
    got = pull(client, "T", group="g2", sysFlag=4 | 1, commitOffset=2, subscription="b")
    assert [r["body"] for r in records(got.body)] == [b"b"]
    nothing = pull(client, "T", group="g2", offset=2, sysFlag=4, subscription="zzz")
    assert nothing.code == 19 and nothing.ext["nextBeginOffset"] == "3"
    deadline = time.monotonic() + 10
    while front.broker.consumer_offsets.find("T", "g2", 0) != 2:
        assert time.monotonic() < deadline, "the piggybacked offset was never written"
        time.sleep(0.05)


def test_a_held_pull_is_answered_by_an_arrival(front, client):
    other = Raw(front.port)
    timer = threading.Timer(0.3, lambda: send(other, "W", b"woke"))
    timer.start()
    started = time.monotonic()
    got = pull(client, "W", suspend_ms=20_000)
    assert got.code == 0 and records(got.body)[0]["body"] == b"woke"
    assert time.monotonic() - started < 15  # answered by the arrival, not by the timeout
    timer.join()
    other.close()


def test_send_back_retries_at_level_3_then_goes_to_the_dlq(front, client, clock):
    send(client, "T", b"payload", UNIQ_KEY=UNIQ, TAGS="t", KEYS="k")
    [rec] = records(pull(client, "T").body)
    back = {"group": "g", "offset": rec["physical"], "delayLevel": 0, "maxReconsumeTimes": 1}
    assert client.call(36, back).code == 0
    assert pull(client, "%RETRY%g").code == 19
    clock.advance(9_000)
    front.broker.tick()
    assert pull(client, "%RETRY%g").code == 19  # level 3 is 10 s: never early
    clock.advance(1_500)
    front.broker.tick()
    [retry] = records(pull(client, "%RETRY%g").body)
    assert retry["reconsume"] == 1 and retry["props"]["RETRY_TOPIC"] == "T"
    assert retry["props"]["UNIQ_KEY"] == UNIQ and retry["props"]["TAGS"] == "t"
    assert client.call(36, dict(back, offset=retry["physical"])).code == 0
    [dead] = records(pull(client, "%DLQ%g").body)
    assert dead["body"] == b"payload" and dead["reconsume"] == 2
    assert client.call(36, dict(back, offset=rec["physical"] + 1)).code != 0


def test_heartbeats_list_clients_and_notify_the_group(front, client):
    def heartbeat(raw: Raw, cid: str) -> None:
        body = {"clientID": cid, "producerDataSet": [], "consumerDataSet": [
            {"groupName": "hg", "subscriptionDataSet": [{"topic": "T", "subString": "a || b"}]}]}
        assert raw.call(34, body=json.dumps(body).encode()).code == 0
    heartbeat(client, "c1")
    assert json.loads(client.call(38, {"consumerGroup": "hg"}).body) == {
        "consumerIdList": ["c1"]}
    other = Raw(front.port)
    heartbeat(other, "c2")
    notify = client.read()  # the first client is told to rebalance
    assert notify.code == 40 and notify.ext == {"consumerGroup": "hg"} and notify.is_oneway
    assert json.loads(client.call(38, {"consumerGroup": "hg"}).body)["consumerIdList"] == [
        "c1", "c2"]
    other.close()
    time.sleep(0.5)
    assert json.loads(client.call(38, {"consumerGroup": "hg"}).body)["consumerIdList"] == ["c1"]
    assert client.call(35, {"clientID": "c1", "consumerGroup": "hg"}).code == 0
    assert client.call(38, {"consumerGroup": "hg"}).code == 1


def test_runtime_info_has_the_timer_fields(front, client, clock):
    send(client, "T", b"t", TIMER_DELIVER_MS=str(clock.now_ms() + 10_000))
    table = json.loads(client.call(28).body)["table"]
    for name in ("timerReadBehind", "timerOffsetBehind", "timerCongestNum", "timerEnqueueTps",
                 "timerDequeueTps"):
        assert name in table
    assert table["timerPending"] == "1"


# -- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize("junk", [
    bytes(range(256)) * 64,
    struct.pack(">ii", 0x7FFFFFFF, 12) + b"x" * 64,
    struct.pack(">ii", 13, 9) + b"{not json",
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    struct.pack(">ii", 40, (1 << 24) | 36) + b"\x00" * 17 + struct.pack(">i", 9999) + bytes(15),
])
def test_junk_closes_only_its_connection(front, client, junk):
    bad = Raw(front.port)
    bad.send_raw(junk)
    assert bad.closed()
    bad.close()
    assert client.call(105, {"topic": "still"}).code == 0


def test_an_unknown_code_and_a_binary_header_are_answered(front, client):
    reply = client.call(9999, serialize_type=ROCKETMQ_TYPE)
    assert reply.code == 3 and reply.serialize_type == ROCKETMQ_TYPE
    route = client.call(105, {"topic": "bin"}, serialize_type=ROCKETMQ_TYPE)
    assert route.code == 0 and json.loads(route.body)["queueDatas"]


def test_requests_in_progress_per_connection_are_bounded(front, client):
    for i in range(4):  # four held pulls fill this connection's bound (4 in this fixture)
        client.opaque += 1
        client.send_raw(RemotingCommand(11, client.opaque, ext={
            "consumerGroup": "g", "topic": "Held", "queueId": "0", "queueOffset": "0",
            "maxMsgNums": "1", "sysFlag": "2", "suspendTimeoutMillis": "3000"}).encode())
    time.sleep(0.3)
    client.opaque += 1
    client.send_raw(RemotingCommand(105, client.opaque, ext={"topic": "x"}).encode())
    busy = client.read()
    assert busy.code == 2 and busy.opaque == client.opaque
    other = Raw(front.port)
    assert other.call(105, {"topic": "x"}).code == 0
    other.close()
    held = [client.read() for _ in range(4)]
    assert sorted(r.code for r in held) == [19] * 4


def test_offset_message_ids_name_host_port_and_offset():
    assert offset_msg_id(socket.inet_aton("127.0.0.1"), 9876, 255) == \
        "7F00000100002694" + "00000000000000FF"


def test_a_client_id_longer_than_32_digits_is_kept_for_consumers(front, client):
    long_id = "FD" + "00" * 15 + "0208E630946E0981F2A5010000"  # a Java client on an IPv6 host
    first = send(client, "L", b"v6", UNIQ_KEY=long_id)
    again = send(client, "L", b"v6", UNIQ_KEY=long_id)
    assert first.ext["msgId"] == again.ext["msgId"] == long_id
    [rec] = records(pull(client, "L").body)  # the retry was stored once
    assert rec["props"]["UNIQ_KEY"] == long_id and "CLIENT_UNIQ_KEY" not in rec["props"]


def test_request_counts_per_request_name(front, client):
    client.call(105, {"topic": "c"})
    client.call(105, {"topic": "bad topic!"})
    client.call(9999)
    requests, failures = front.request_counts()
    assert requests["GET_ROUTEINFO_BY_TOPIC"] == 2 and requests["UNKNOWN"] == 1
    assert failures == {"GET_ROUTEINFO_BY_TOPIC": 1, "UNKNOWN": 1}
