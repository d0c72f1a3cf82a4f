"""The native gRPC transport's HTTP/2 codec (rocks_timer/_native/h2.c), sans I/O: a raw HTTP/2
client (the ``h2`` package) talks to one codec object in memory, so every answer is checked
frame by frame: calls announced once whole, replies with their trailers, and each bad input
(a malformed frame, an oversize or compressed message, a reset mid-call, too many streams, an
unknown method, oversize headers) answered as documented, with the connection's other calls
going on. Over sockets, with the official client: test_grpc_native_transport.py."""
from __future__ import annotations

import struct

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocks_timer.proxy import native_server

pytestmark = pytest.mark.skipif(not native_server.AVAILABLE,
                                reason="the native HTTP/2 codec is not built (libnghttp2-dev)")
if native_server.AVAILABLE:
    from rocks_timer._native import h2 as codec_module

UNARY, STREAM = b"/test.Service/Unary", b"/test.Service/Stream"
MAX_MESSAGE = 1024
MAX_STREAMS = 8


def grpc_message(payload: bytes, compressed: bool = False) -> bytes:
    return struct.pack(">BI", 1 if compressed else 0, len(payload)) + payload


def request_headers(path: bytes, **extra: str) -> list[tuple[bytes, bytes]]:
    headers = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
               (b":authority", b"localhost"), (b"content-type", b"application/grpc"),
               (b"te", b"trailers")]
    return headers + [(k.replace("_", "-").encode(), v.encode()) for k, v in extra.items()]


class Pair:
    """A raw HTTP/2 client and one server codec, wired in memory."""

    def __init__(self, max_message: int = MAX_MESSAGE, max_streams: int = MAX_STREAMS,
                 settled: bool = True, **bounds: int):
        self.codec = codec_module.Connection({UNARY: "unary-method"}, {STREAM: "stream-method"},
                                             max_message, max_streams, 16 * 1024, 1 << 20,
                                             **bounds)
        self.client = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None))
        self.client.initiate_connection()
        self.server_events: list = []
        self.client_events: list = []
        if settled:  # else the client has not seen the codec's SETTINGS yet
            self.exchange()

    def exchange(self, raw: bytes = b"") -> list:
        """Client bytes (and ``raw``) to the codec, the codec's answer back; returns the codec's
        events of this exchange."""
        events = self.codec.feed(self.client.data_to_send() + raw)
        self.server_events += events
        out = self.codec.take()
        if out:
            self.client_events += self.client.receive_data(out)
            back = self.client.data_to_send()  # the client's acks and window updates
            if back:
                self.server_events += self.codec.feed(back)
                more = self.codec.take()
                if more:
                    self.client_events += self.client.receive_data(more)
        return events

    def call(self, path: bytes, *messages: bytes, end: bool = True, **headers: str) -> int:
        sid = self.client.get_next_available_stream_id()
        self.client.send_headers(sid, request_headers(path, **headers))
        for i, message in enumerate(messages):
            self.client.send_data(sid, message, end_stream=end and i == len(messages) - 1)
        if end and not messages:
            self.client.end_stream(sid)
        return sid

    def answer(self, sid: int) -> dict:
        """What the client got on stream ``sid``: headers, data, trailers, reset code."""
        got = {"headers": {}, "data": b"", "trailers": {}, "reset": None, "ended": False}
        for event in self.client_events:
            if getattr(event, "stream_id", None) != sid:
                continue
            if isinstance(event, h2.events.ResponseReceived):
                got["headers"] = dict(event.headers)
            elif isinstance(event, h2.events.TrailersReceived):
                got["trailers"] = dict(event.headers)
            elif isinstance(event, h2.events.DataReceived):
                got["data"] += event.data
            elif isinstance(event, h2.events.StreamReset):
                got["reset"] = event.error_code
            elif isinstance(event, h2.events.StreamEnded):
                got["ended"] = True
        return got


def status(answer: dict) -> tuple[int, str]:
    """grpc-status and grpc-message, from the trailers or a trailers-only answer."""
    fields = answer["trailers"] or answer["headers"]
    return int(fields[b"grpc-status"]), fields.get(b"grpc-message", b"").decode()


def test_a_unary_call_is_announced_whole_and_answered_with_status_ok():
    pair = Pair()
    sid = pair.call(UNARY, grpc_message(b"hello"), x_mq_client_id="c1", grpc_timeout="1500m")
    events = pair.exchange()
    assert events == [(codec_module.CALL, sid, "unary-method", [("x-mq-client-id", "c1")], 1.5,
                       b"hello")]
    assert pair.codec.reply(sid, b"world") is True
    pair.exchange()
    answer = pair.answer(sid)
    assert answer["headers"][b":status"] == b"200"
    assert answer["headers"][b"content-type"] == b"application/grpc"
    assert answer["data"] == grpc_message(b"world")
    assert status(answer) == (0, "") and answer["ended"]
    assert pair.codec.reply(sid, b"again") is False  # answered already: refused, nothing sent


def test_a_message_split_over_many_frames_is_reassembled():
    pair = Pair()
    whole = grpc_message(b"x" * 700)
    sid = pair.call(UNARY, end=False)
    for at in range(0, len(whole), 3):  # 3 bytes per DATA frame
        pair.client.send_data(sid, whole[at:at + 3])
        assert pair.exchange() == []
    pair.client.end_stream(sid)
    assert pair.exchange()[0][5] == b"x" * 700


def test_a_request_stream_gives_its_messages_and_end_and_a_streamed_answer():
    pair = Pair()
    sid = pair.call(STREAM, grpc_message(b"a") + grpc_message(b""), end=False)
    events = pair.exchange()
    assert events == [(codec_module.CALL, sid, "stream-method", None, -1.0, None),
                      (codec_module.MESSAGE, sid, b"a"), (codec_module.MESSAGE, sid, b"")]
    assert pair.codec.send(sid, b"r1") and pair.codec.send(sid, b"r2")
    pair.exchange()
    pair.client.end_stream(sid)
    assert pair.exchange() == [(codec_module.END, sid)]
    assert pair.codec.finish(sid, 5, "gone: 100% \u00e9")
    pair.exchange()
    answer = pair.answer(sid)
    assert answer["data"] == grpc_message(b"r1") + grpc_message(b"r2")
    assert status(answer) == (5, "gone: 100%25 %C3%A9")  # percent-encoded, as gRPC sends it


def test_an_unknown_method_is_unimplemented_without_an_event():
    pair = Pair()
    sid = pair.call(b"/test.Service/Nope", grpc_message(b"x"))
    assert pair.exchange() == []
    assert status(pair.answer(sid)) == (12, "Method not found: /test.Service/Nope")


def test_an_oversize_message_is_resource_exhausted_and_the_connection_goes_on():
    pair = Pair()
    big = pair.call(UNARY, grpc_message(b"y" * (MAX_MESSAGE + 1)))
    assert pair.exchange() == []
    code, text = status(pair.answer(big))
    assert code == 8 and "larger than max" in text
    fine = pair.call(UNARY, grpc_message(b"z" * MAX_MESSAGE))
    assert [e[5] for e in pair.exchange()] == [b"z" * MAX_MESSAGE]
    assert pair.codec.reply(fine, b"ok")


def test_an_oversize_message_of_an_announced_stream_resets_the_handler():
    pair = Pair()
    sid = pair.call(STREAM, end=False)
    pair.exchange()
    pair.client.send_data(sid, struct.pack(">BI", 0, MAX_MESSAGE + 1))  # the prefix alone
    assert pair.exchange() == [(codec_module.RESET, sid)]
    assert status(pair.answer(sid))[0] == 8
    assert pair.codec.send(sid, b"late") is False


def test_request_data_in_flight_is_bounded_per_connection():
    """Partial messages of several streams past ``max_buffered``: the stream whose data went
    over is refused (RESOURCE_EXHAUSTED), the others complete, and nothing stays counted."""
    pair = Pair(max_buffered=1500)
    first, second = grpc_message(b"a" * 1000), grpc_message(b"b" * 700)
    a = pair.call(UNARY, first[:900], end=False)
    b = pair.call(UNARY, second[:650], end=False)  # 900 + 650 > 1500, both partial
    assert pair.exchange() == []
    assert status(pair.answer(b))[0] == 8
    assert pair.codec.buffered == 900
    pair.client.send_data(a, first[900:], end_stream=True)
    assert [e[5] for e in pair.exchange()] == [b"a" * 1000]
    assert pair.codec.buffered == 0


def test_a_compressed_message_is_internal():
    pair = Pair()
    sid = pair.call(UNARY, grpc_message(b"packed", compressed=True))
    assert pair.exchange() == []
    code, text = status(pair.answer(sid))
    assert code == 13 and "compressed" in text


def test_an_unknown_grpc_encoding_is_unimplemented():
    pair = Pair()
    sid = pair.call(UNARY, grpc_message(b"x"), grpc_encoding="br")
    assert pair.exchange() == []
    assert status(pair.answer(sid))[0] == 12


@pytest.mark.parametrize("body", [b"", grpc_message(b"a") + grpc_message(b"b"),
                                  b"\0\0\0\0\x05ab"], ids=["none", "two", "cut-short"])
def test_a_unary_call_without_exactly_one_whole_message_is_internal(body):
    pair = Pair()
    sid = pair.call(UNARY, *([body] if body else []))
    assert pair.exchange() == []
    assert status(pair.answer(sid))[0] == 13


def test_not_grpc_is_refused_with_an_http_status():
    pair = Pair()
    sid = pair.client.get_next_available_stream_id()
    pair.client.send_headers(sid, [(b":method", b"POST"), (b":scheme", b"http"),
                                   (b":path", UNARY), (b":authority", b"x"),
                                   (b"content-type", b"text/plain")], end_stream=True)
    get = sid + 2
    pair.client.send_headers(get, [(b":method", b"GET"), (b":scheme", b"http"),
                                   (b":path", UNARY), (b":authority", b"x")], end_stream=True)
    assert pair.exchange() == []
    assert pair.answer(sid)["headers"][b":status"] == b"415"
    assert pair.answer(get)["headers"][b":status"] == b"405"


def test_a_client_reset_mid_call_tells_the_handler_and_drops_the_answer():
    pair = Pair()
    sid = pair.call(STREAM, grpc_message(b"a"), end=False)
    pair.exchange()
    pair.client.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
    assert pair.exchange() == [(codec_module.RESET, sid)]
    assert pair.codec.send(sid, b"late") is False
    assert pair.codec.finish(sid, 0, "") is False
    assert pair.codec.streams == 0
    other = pair.call(UNARY, grpc_message(b"next"))
    assert pair.exchange()[0][1] == other


def test_streams_beyond_the_limit_are_refused_and_the_others_served():
    # opened before the client reads the codec's SETTINGS (h2 itself keeps to the limit after)
    pair = Pair(settled=False)
    sids = [pair.call(STREAM, end=False) for _ in range(MAX_STREAMS + 3)]
    events = pair.exchange()
    announced = [e[1] for e in events if e[0] == codec_module.CALL]
    assert announced == sids[:MAX_STREAMS]
    refused = [sid for sid in sids if pair.answer(sid)["reset"] == h2.errors.ErrorCodes.REFUSED_STREAM]
    assert refused == sids[MAX_STREAMS:]
    assert pair.codec.streams == MAX_STREAMS  # the refused ones hold nothing
    for sid in announced:
        assert pair.codec.finish(sid, 0, "")
    pair.exchange()
    assert all(status(pair.answer(sid)) == (0, "") for sid in announced)


def test_oversize_headers_reset_the_stream_only():
    pair = Pair()
    sid = pair.call(UNARY, grpc_message(b"x"), x_big="v" * 17_000)
    assert pair.exchange() == []
    assert pair.answer(sid)["reset"] is not None
    fine = pair.call(UNARY, grpc_message(b"y"))
    assert [e[1] for e in pair.exchange()] == [fine]


def test_a_malformed_frame_ends_the_connection_with_goaway():
    pair = Pair()
    # a DATA frame on stream 0 is a connection error (RFC 9113 6.1): PROTOCOL_ERROR
    bad = struct.pack(">I", 4)[1:] + bytes([0x0, 0x0]) + struct.pack(">I", 0) + b"junk"
    pair.exchange(raw=bad)
    goaways = [e for e in pair.client_events if isinstance(e, h2.events.ConnectionTerminated)]
    assert goaways and goaways[0].error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR
    assert pair.codec.done


def test_garbage_instead_of_the_preface_ends_the_connection():
    codec = codec_module.Connection({}, {}, MAX_MESSAGE, MAX_STREAMS, 16 * 1024, 1 << 20)
    codec.feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    codec.take()
    assert codec.done


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        codec_module.Connection({}, {}, -1, MAX_STREAMS, 16 * 1024, 1 << 20)
    with pytest.raises(TypeError):
        codec_module.Connection([], {}, MAX_MESSAGE, MAX_STREAMS, 16 * 1024, 1 << 20)


def _conversation() -> bytes:
    """A valid client's bytes: preface, settings, a unary call and a request stream."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                  header_encoding=None))
    client.initiate_connection()
    client.send_headers(1, request_headers(UNARY, x_mq_client_id="c", grpc_timeout="5S"))
    client.send_data(1, grpc_message(b"payload" * 20), end_stream=True)
    client.send_headers(3, request_headers(STREAM))
    client.send_data(3, grpc_message(b"a") + grpc_message(b"b" * 300))
    client.reset_stream(3)
    return client.data_to_send()


VALID = _conversation() if native_server.AVAILABLE else b""


@settings(max_examples=300, deadline=None)
@given(flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=8),
       cuts=st.lists(st.integers(1, 400), max_size=6), tail=st.binary(max_size=64))
def test_damaged_input_never_breaks_the_codec(flips, cuts, tail):
    """Any damage to a valid conversation (bytes changed, cut anywhere, junk after): the codec
    answers, ends the connection or goes on; it never raises, and what it announces is
    well formed."""
    data = bytearray(VALID)
    for at, value in flips:
        data[at % len(data)] = value
    data = bytes(data) + tail
    codec = codec_module.Connection({UNARY: "u"}, {STREAM: "s"}, MAX_MESSAGE, MAX_STREAMS,
                                    16 * 1024, 1 << 20)
    at = 0
    for size in cuts + [len(data)]:
        for event in codec.feed(data[at:at + size]):
            assert event[0] in (codec_module.CALL, codec_module.MESSAGE, codec_module.END,
                                codec_module.RESET)
            assert isinstance(event[1], int) and event[1] > 0
            if event[0] == codec_module.CALL and event[2] == "u":
                assert isinstance(event[5], bytes) and len(event[5]) <= MAX_MESSAGE
                codec.reply(event[1], b"ok")
        assert isinstance(codec.take(), bytes)
        at += size
        if at >= len(data):
            break
