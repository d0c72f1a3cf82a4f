"""The remoting front's plain send in C (``rocks_timer/_native/remoting.c``) against its Python
references: the frames and their JSON headers (``split_frames`` against
``split_frames_reference``), a send's header checked into its message (``plain_send`` against
``read_send_request``) and the reply's JSON header (``json_header`` against
``command.json_header``). The C answers only what it is sure of and leaves the rest to the
reference, so the checks are: where it answers, the same values; where it does not, the
reference's answer or error stands; on damaged or random bytes it never crashes and leaks
nothing; and the requests the Java client sends do take the C path (else these tests would
prove nothing)."""
from __future__ import annotations

import json
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.remoting_latency import send_request
from rocks_timer.remoting import command as wire
from rocks_timer.remoting.command import RemotingCommand, json_header
from rocks_timer.remoting.connection import split_frames, split_frames_reference
from rocks_timer.remoting.producing import plain_send, read_send_request

native = pytest.importorskip("rocks_timer._native.codec")
MAX_BODY = 4 * 1024 * 1024
UNIQ = "0A000001000000000000000000000001"


def java_send(opaque: int = 7, topic: str = "orders", body: bytes = b"x" * 256,
              deliver_ms: int | None = None) -> bytes:
    return send_request(opaque, topic, body, f"0A000001000000000000{opaque:012X}", deliver_ms)


def same_split(data: bytes) -> tuple:
    """split_frames and its reference on ``data``: the same commands, bytes used and error."""
    got, used, error = split_frames(bytearray(data))
    want, want_used, want_error = split_frames_reference(bytearray(data))
    assert got == want
    assert used == want_used
    assert (type(error), str(error)) == (type(want_error), str(want_error))
    return got, used, error


# -- frames ------------------------------------------------------------------------------------
def test_the_java_clients_requests_are_split_in_c_as_the_reference_splits_them():
    frames = [java_send(1), java_send(2, "a-b_c|d%e", b""), java_send(3, deliver_ms=10**13),
              RemotingCommand(34, 4, remark="heart", body=b'{"clientID":"x"}').encode(),
              RemotingCommand(105, 5, ext={"topic": "orders"}, language="CPP").encode(),
              RemotingCommand(11, 6, ext={"é": "ü\u2028\x01\x02\"\\"}).encode()]
    data = b"".join(frames)
    commands, used, stopped = native.remoting_frames(data, 0, wire.MAX_FRAME, wire.MAX_HEADER,
                                                     RemotingCommand)
    assert (len(commands), used, stopped) == (len(frames), len(data), False)  # all in C
    got, _, _ = same_split(data)
    assert [c.code for c in got] == [310, 310, 310, 34, 105, 11]
    assert got[0].ext["b"] == "orders" and got[0].body == b"x" * 256
    # a frame not yet whole stops the C without an error; the reference agrees
    for cut in (1, 7, 8, 30, len(frames[1]) - 1):
        assert same_split(data[:len(frames[0]) + cut])[1] == len(frames[0])


def header_frame(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    return (len(header) + len(body) + 4).to_bytes(4, "big") + \
        ((kind << 24) | len(header)).to_bytes(4, "big") + header + body


ODD_HEADERS = [
    b'{"code":"310","opaque":1}',                    # a code as text: the reference reads it
    b'{"code":310.0}', b'{"code":true}', b'{"code":null}', b'{"opaque":1}', b'[]', b'',
    b'{"code":1,"extFields":{"a":1,"b":null,"c":true,"d":[1],"e":{"f":"g"},"h":1.5}}',
    b'{"code":1,"extFields":[]}', b'{"code":1,"extFields":0}', b'{"code":1,"extFields":null}',
    b'{"code":1,"extFields":{}}', b'{"code":1,"extFields":{"a":"b"},"extFields":{"c":"d"}}',
    b'{"code":1,"code":2}', b'{"code":1,"code":"x"}', b'{"code":01}', b'{"code":-0}',
    b'{"code":1,"remark":5,"language":null}', b'{"code":1,"remark":{"a":1}}',
    b'{"code":1,"language":["x"]}', b' \t\r\n{ "code" : 1 , "flag" : 2 } \n',
    b'{"code":1} x', b'{"code":1,}', b'{"code":1', b'{"co\\u0064e":1}',
    b'{"code":1,"extFields":{"k":"\\ud83d\\ude00"}}', b'{"code":1,"extFields":{"k":"\\ud800"}}',
    b'{"code":1,"extFields":{"k":"\\u00e9\\n\\t\\/\\b\\f\\r\\"\\\\"}}',
    b'{"code":1,"extFields":{"k":"\\x"}}', b'{"code":1,"extFields":{"k":"a\x01b"}}',
    b'{"code":1,"remark":"\xc3\xa9"}', b'{"code":1,"remark":"\xc3"}', b'{"code":1,"x":"\xff"}',
    b'{"code":1,"other":NaN}', b'{"code":1,"other":-Infinity}', b'{"code":1,"other":1e5}',
    b'{"code":12345678901234567890}', b'{"code":123456789012345678}', b'{"code":-}',
    b'{"code":1,"version":true}', b'{"code":1,"opaque":"7"}', b'{"code":1,"flag":"x"}',
]


@pytest.mark.parametrize("header", ODD_HEADERS)
def test_odd_and_bad_json_headers_get_the_references_answer(header):
    good = java_send(9)
    same_split(good + header_frame(header, b"body") + good)
    same_split(header_frame(header))


def test_bad_frame_sizes_and_binary_headers_get_the_references_answer():
    good = java_send(9)
    binary = RemotingCommand(310, 3, ext={"b": "orders"}, serialize_type=wire.ROCKETMQ_TYPE)
    for tail in (b"\x00\x00\x00\x03" + b"\x00" * 8,               # length below 4
                 b"\x7f\xff\xff\xff\x00\x00\x00\x00",             # over the frame limit
                 b"\x00\x00\x00\x10\x00\x00\x00\x20" + b"{" * 16,  # header past the frame
                 b"\x00\x00\x00\x10\x05\x00\x00\x02" + b"{}" * 8,  # unknown serialize type
                 b"\xff\xff\xff\xf0\x00\x00\x00\x00",             # a negative length
                 binary.encode()):
        same_split(good + tail)
        same_split(tail + good)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=6)
HEADER_KEYS = st.sampled_from(["code", "opaque", "flag", "version", "remark", "language",
                               "extFields", "serializeTypeCurrentRPC"]) | st.text(max_size=6)


@st.composite
def json_header_text(draw) -> bytes:
    """A header as text: the Java client's shape, changed in random ways."""
    members = [("code", draw(st.sampled_from([10, 310, 34]) | JSON_VALUES)),
               ("extFields", draw(st.dictionaries(st.text(max_size=6),
                                                  st.text(max_size=12) | JSON_VALUES,
                                                  max_size=5) | JSON_VALUES))]
    members += draw(st.lists(st.tuples(HEADER_KEYS, JSON_VALUES), max_size=5))
    members = draw(st.permutations(members))
    sep = draw(st.sampled_from([",", " , ", ",\n"]))
    colon = draw(st.sampled_from([":", " : "]))
    ascii_only = draw(st.booleans())
    text = "{" + sep.join(json.dumps(k, ensure_ascii=ascii_only) + colon
                          + json.dumps(v, ensure_ascii=ascii_only) for k, v in members) + "}"
    return text.encode("utf-8", "surrogatepass")


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(header=json_header_text(), body=st.binary(max_size=20))
def test_random_json_headers_split_as_the_reference_splits_them(header, body):
    same_split(header_frame(header, body) + java_send(3))


@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_damaged_frames_split_as_the_reference_splits_them(data):
    frames = bytearray(java_send(1) + java_send(2) + RemotingCommand(34, 3).encode())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(frames) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        if action == "flip":
            frames[at] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del frames[at:]
        elif action == "insert":
            frames[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        else:
            del frames[at:at + data.draw(st.integers(1, 4))]
        if not frames:
            break
    same_split(bytes(frames))


@settings(max_examples=300, deadline=None)
@given(junk=st.binary(max_size=300))
def test_random_bytes_never_crash_the_c(junk):
    same_split(junk)
    same_split(java_send(1)[:8] + junk)


# -- a send's header ---------------------------------------------------------------------------
def java_ext(**changes) -> dict:
    frame = java_send(5)
    [cmd], _, _ = split_frames_reference(bytearray(frame))
    ext = dict(cmd.ext)
    ext["i"] = f"KEYS\x01k5\x02UNIQ_KEY\x01{UNIQ}\x02WAIT\x01true\x02TAGS\x01bench\x02"
    ext.update(changes)
    return {k: v for k, v in ext.items() if v is not None}


def same_send(code: int, ext: dict, body: bytes = b"body", max_body: int = MAX_BODY):
    """plain_send where it answers is read_send_request's message, properties in order."""
    cmd = RemotingCommand(code, 1, ext=ext, body=body)
    fast = plain_send(cmd, max_body)
    if fast is None:
        return None
    topic, [message] = read_send_request(cmd, max_body)  # must not raise
    assert fast == message and fast.topic == topic
    assert list(fast.properties.items()) == list(message.properties.items())
    assert fast.encoded_properties == message.encoded_properties
    return fast


def test_the_java_clients_send_header_is_read_in_c_as_the_reference_reads_it():
    fast = same_send(310, java_ext())
    assert fast is not None  # the C answered
    assert (fast.topic, fast.msg_id, fast.tags, fast.keys, fast.queue_id) == \
        ("orders", UNIQ, "bench", ("k5",), 0)
    assert "WAIT" not in fast.properties
    v1 = {"producerGroup": "p", "topic": "orders", "queueId": "3", "sysFlag": "0",
          "bornTimestamp": "1700000000000", "flag": "-5", "reconsumeTimes": "2",
          "properties": f"UNIQ_KEY\x01{UNIQ.lower()}\x02a\x01b\x01c\x02\x02x\x01\x02"}
    fast = same_send(10, v1)
    assert fast is not None and (fast.queue_id, fast.flag, fast.born_ms,
                                 fast.reconsume_times) == (3, -5, 1700000000000, 2)
    assert fast.properties["a"] == "b\x01c" and fast.msg_id == UNIQ
    # a Java client on a host without a private IPv4 address (this machine's) makes 56 digits:
    # stored under an id derived from it, the client's kept as CLIENT_UNIQ_KEY
    java_id = "FD000000000000000000000000000002" + "5F2A18B4AAC27A7C3F1C0001"
    fast = same_send(310, java_ext(i=f"UNIQ_KEY\x01{java_id}\x02WAIT\x01true\x02TAGS\x01t\x02"))
    assert fast is not None and fast.properties["CLIENT_UNIQ_KEY"] == java_id
    assert len(fast.msg_id) == 32 and fast.msg_id != java_id[:32]


@pytest.mark.parametrize("changes", [
    {"b": None}, {"b": ""}, {"b": "%RETRY%g"}, {"b": "%DLQ%g"}, {"b": "a b"}, {"b": "é"},
    {"b": "x" * 128}, {"b": "x" * 127}, {"b": "orders\n"}, {"e": "4"}, {"e": "-1"}, {"e": "-2"},
    {"e": "+1"}, {"e": " 1"}, {"e": "1_0"}, {"e": "٣"}, {"e": ""}, {"e": "null"}, {"f": "1"},
    {"f": "2"}, {"f": "-1"}, {"g": "0"}, {"g": "9" * 19}, {"g": "-5"}, {"h": str(2**31)},
    {"h": str(-2**31)}, {"j": "-1"}, {"l": "-1"}, {"l": "-2"}, {"m": "true"}, {"m": "1"},
    {"m": " false"}, {"m": "0"}, {"i": None}, {"i": ""}, {"i": "UNIQ_KEY\x01abc\x02"},
    {"i": f"UNIQ_KEY\x01{UNIQ}\n\x02"}, {"i": "TAGS\x01a\x02"}, {"i": "x" * 65537},
    {"i": f"UNIQ_KEY\x01{UNIQ}\x02KEYS\x01a  b\x02DELAY\x013\x02"},
    {"i": f"UNIQ_KEY\x01{UNIQ}\x02TIMER_DELIVER_MS\x01abc\x02REAL_TOPIC\x01x\x02"},
    {"i": f"UNIQ_KEY\x01{UNIQ}\x02UNIQ_KEY\x01{UNIQ.lower()}\x02é\x01\ud800\x02"},
    {"topic": "other", "b": None}, {"queueId": "2", "e": None}, {"e": 1}, {"b": b"orders"},
])
def test_odd_send_headers_get_the_references_answer(changes):
    ext = java_ext(**changes)
    try:
        same_send(310, ext)
    except UnicodeEncodeError:
        pass  # a lone surrogate: the reference's properties cannot be encoded either
    same_send(10, {k: v for k, v in ext.items() if len(k) > 1})


def test_a_body_over_the_limit_is_left_to_the_reference():
    assert same_send(310, java_ext(), b"x" * 11, max_body=10) is None
    assert same_send(310, java_ext(), b"x" * 10, max_body=10) is not None
    assert same_send(320, java_ext()) is None and same_send(311, java_ext()) is None


FIELD_VALUES = st.sampled_from(["", "null", "0", "1", "-1", "3", "4", "16", "+1", " 2", "1e3",
                                "2147483647", "2147483648", "-2147483648", "-2147483649",
                                "9223372036854775807", "99999999999999999999", "true", "false",
                                "orders", "%RETRY%g"]) | st.text(max_size=8)
PROPS = st.lists(st.tuples(st.sampled_from(["UNIQ_KEY", "WAIT", "TAGS", "KEYS", "DELAY", "a", ""])
                           | st.text(max_size=4),
                           st.sampled_from([UNIQ, UNIQ.lower(), "", "x y"]) | st.text(max_size=6)),
                 max_size=5)


@settings(max_examples=600, deadline=None)
@given(code=st.sampled_from([10, 310]), data=st.data(),
       props=PROPS, sep=st.sampled_from(["\x02", "\x02\x02", ""]))
def test_random_send_headers_are_read_as_the_reference_reads_them(code, data, props, sep):
    ext = java_ext()
    for key in data.draw(st.lists(st.sampled_from(sorted(ext) + ["topic", "queueId", "flag"]),
                                  max_size=4)):
        ext[key] = data.draw(FIELD_VALUES)
    ext["i"] = sep.join(f"{k}\x01{v}" for k, v in props) + sep
    for key in data.draw(st.lists(st.sampled_from(sorted(ext)), max_size=2)):
        ext.pop(key, None)
    try:
        same_send(code, ext)
    except UnicodeEncodeError:
        pass  # a lone surrogate in a property: neither side can store it


# -- the reply's JSON header -------------------------------------------------------------------
TEXT = st.text(max_size=30)  # surrogates included: then both refuse


@settings(max_examples=400, deadline=None)
@given(code=st.integers(-2**70, 2**70), opaque=st.integers(-2**31, 2**31 - 1),
       flag=st.integers(0, 3), version=st.integers(-2**31, 2**31 - 1), language=TEXT,
       remark=st.none() | TEXT, ext=st.dictionaries(TEXT, TEXT, max_size=8))
def test_the_reply_header_in_c_is_the_references_byte_for_byte(code, opaque, flag, version,
                                                               language, remark, ext):
    cmd = RemotingCommand(code, opaque, flag, remark, ext, language=language, version=version)
    got = native.json_header(code, ext, flag, language, opaque, remark, version)
    try:
        want = json_header(cmd)
    except UnicodeEncodeError:
        assert got is None  # a lone surrogate: the reference raises, the C leaves it to it
        return
    assert got == want


def test_reply_fields_not_text_or_ints_are_left_to_the_reference():
    assert native.json_header(True, {}, 1, "JAVA", 1, None, 1) is None
    assert native.json_header(1, {"a": 1}, 1, "JAVA", 1, None, 1) is None
    assert native.json_header(1, {1: "a"}, 1, "JAVA", 1, None, 1) is None
    assert native.json_header(1, {}, 1, None, 1, None, 1) is None
    assert native.json_header(1, {}, 1, "JAVA", 1, 5, 1) is None
    assert native.json_header(1, {}, 1.0, "JAVA", 1, None, 1) is None


# -- memory ------------------------------------------------------------------------------------
def test_the_c_paths_leak_nothing():
    """Thousands of good, odd and damaged inputs: the memory Python traces does not grow."""
    good = java_send(1)
    inputs = [good * 3, good[:-5], header_frame(b'{"code":1,"extFields":{"a":1}}') + good,
              header_frame(b'{"code":1,"extFields":{"k":"\\ud800"}}'),
              header_frame(b'{"code":1,"remark":"\xc3"}'), b"\x00\x00\x00\x03" * 3]
    ext, odd = java_ext(), java_ext(i="UNIQ_KEY\x01x\x02")

    def once():
        for data in inputs:
            split_frames(bytearray(data))
        for e in (ext, odd):
            native.send_fields(310, e, b"body", MAX_BODY)
        native.json_header(0, ext, 1, "JAVA", 5, "remark", 399)
        native.json_header(0, {"k": "\ud800"}, 1, "JAVA", 5, None, 399)

    for _ in range(200):
        once()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(3000):
            once()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes more traced after 3,000 rounds"
