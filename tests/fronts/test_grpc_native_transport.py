"""The gRPC front's native transport over real sockets, against its reference (grpcio).

- Equality: the same requests, through the grpc client, to a front on each transport (two
  brokers on one manual clock, made alike): the same gRPC status codes and the same answers,
  byte for byte once serialised, for good calls, RocketMQ refusals, transport refusals (a request
  over the size limit, an unknown method, bytes that are not protobuf) and both streamed RPCs.
- Bad input on one connection (a malformed frame, garbage instead of HTTP/2) ends that
  connection with GOAWAY and never the front: other connections go on.
- The transport's own bounds (``NativeServer``): calls in all, connections, idle connections.
"""
from __future__ import annotations

import asyncio
import socket
import threading
import time

import grpc
import pytest

from rocks_timer.proxy import metrics_sink, native_server
from rocks_timer.proxy.protocol import Code, pb, service_pb2_grpc, svc
from rocks_timer.proxy.server import GrpcFront

pytestmark = pytest.mark.skipif(not native_server.AVAILABLE,
                                reason="the native HTTP/2 codec is not built (libnghttp2-dev)")
MAX_BODY = 64 * 1024
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


@pytest.fixture
def fronts(make_broker, tmp_path):
    """A front on each transport, each on its own broker (same engine, same clock)."""
    started = {}
    for transport in ("grpcio", "native"):
        broker = make_broker("memory", path=tmp_path / f"{transport}-data",
                             max_message_size=MAX_BODY)
        started[transport] = GrpcFront(broker, "127.0.0.1", 0, transport=transport).start()
    yield started
    for front in started.values():
        front.stop()


def message(topic: str, body: bytes, msg_id: str, **system) -> "pb.Message":
    m = pb.Message(body=body)
    m.topic.name = topic
    m.system_properties.message_id = msg_id
    m.system_properties.message_type = system.pop("message_type", pb.NORMAL)
    m.system_properties.body_encoding = pb.IDENTITY
    for name, value in system.items():
        setattr(m.system_properties, name, value)
    return m


def outcome(call, *args, **kwargs):
    """(gRPC status code name, serialised answer(s)) of one call; errors by code only, since
    grpc words its own refusals differently from the native transport."""
    try:
        answer = call(*args, timeout=10, **kwargs)
        if hasattr(answer, "SerializeToString"):
            return "OK", answer.SerializeToString(deterministic=True)
        return "OK", [a.SerializeToString(deterministic=True) for a in answer]
    except grpc.RpcError as exc:
        return exc.code().name, None


def conversation(endpoint: str) -> list:
    """The same requests, in the same order, to one front; what came back."""
    ids = [f"01{i:032X}" for i in range(1, 6)]
    seen = []
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        route = svc.QueryRouteRequest()
        route.topic.name = "EqTopic"
        route.endpoints.addresses.add(host="127.0.0.1", port=1)
        seen.append(outcome(stub.QueryRoute, route))
        seen.append(outcome(stub.Heartbeat, svc.HeartbeatRequest()))
        pair = svc.SendMessageRequest(
            messages=[message("EqTopic", b"one", ids[0]), message("EqTopic", b"two", ids[1])])
        seen.append(outcome(stub.SendMessage, pair))
        seen.append(outcome(stub.SendMessage, pair))  # a retry: stored once
        delay = message("EqTopic", b"later", ids[2], message_type=pb.DELAY)
        delay.system_properties.delivery_timestamp.seconds = 2_000_000_000
        seen.append(outcome(stub.SendMessage, svc.SendMessageRequest(messages=[delay])))
        for bad in (message("bad topic", b"x", ids[3]),
                    message("EqTopic", b"x" * (MAX_BODY + 1), ids[3]),
                    message("EqTopic", b"", ids[3])):
            seen.append(outcome(stub.SendMessage, svc.SendMessageRequest(messages=[bad])))
        # over the transport's size limit (2 x the body maximum + 1 MiB): refused before a handler
        huge = message("EqTopic", b"h" * (2 * MAX_BODY + (1 << 20) + 1), ids[4])
        seen.append(outcome(stub.SendMessage, svc.SendMessageRequest(messages=[huge])))
        seen.append(outcome(stub.ReceiveMessage, receive_request("EqGroup", "EqTopic", 8)))
        ack = svc.AckMessageRequest()
        ack.group.name, ack.topic.name = "EqGroup", "EqTopic"
        ack.entries.add(message_id=ids[0], receipt_handle="junk")
        seen.append(outcome(stub.AckMessage, ack))
        seen.append(outcome(stub.EndTransaction, svc.EndTransactionRequest()))
        settings = svc.TelemetryCommand()
        settings.settings.client_type = pb.PRODUCER
        settings.settings.publishing.topics.add(name="EqTopic")
        seen.append(outcome(stub.Telemetry, iter([settings, svc.TelemetryCommand()])))
        raw = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage",
                                  request_serializer=lambda b: b,
                                  response_deserializer=lambda b: b)
        seen.append(outcome(raw, b"\xff\xff\xff\xff\x0f"))  # not protobuf
        unknown = channel.unary_unary("/apache.rocketmq.v2.MessagingService/Nope",
                                      request_serializer=lambda b: b,
                                      response_deserializer=lambda b: b)
        seen.append(outcome(unknown, b""))
    return seen


def receive_request(group: str, topic: str, batch: int) -> "svc.ReceiveMessageRequest":
    """A receive of up to ``batch`` messages of every tag, invisible for 30 s."""
    receive = svc.ReceiveMessageRequest(batch_size=batch)
    receive.group.name = group
    receive.message_queue.topic.name = topic
    receive.filter_expression.type = pb.TAG
    receive.filter_expression.expression = "*"
    receive.invisible_duration.seconds = 30
    return receive


def test_the_same_requests_get_the_same_answers_from_both_transports(fronts):
    reference = conversation(fronts["grpcio"].address)
    native = conversation(fronts["native"].address)
    assert [code for code, _ in native] == [code for code, _ in reference]
    assert native == reference
    codes = [code for code, _ in reference]
    assert codes.count("OK") == len(codes) - 3  # the huge, the garbage and the unknown
    # the conversation did what it says: two stored, a retry recognised, three refusals
    sent = svc.SendMessageResponse.FromString(reference[2][1])
    assert [e.status.code for e in sent.entries] == [Code.OK, Code.OK]
    received = [svc.ReceiveMessageResponse.FromString(b) for b in reference[9][1]]
    assert [r.message.body for r in received if r.HasField("message")] == [b"one", b"two"]


def read_until_closed(sock: socket.socket, timeout_s: float = 10.0) -> bytes:
    sock.settimeout(timeout_s)
    got = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return got
        got += chunk


def frame_types(data: bytes) -> list[int]:
    types, at = [], 0
    while at + 9 <= len(data):
        length = int.from_bytes(data[at:at + 3], "big")
        types.append(data[at + 3])
        at += 9 + length
    return types


GOAWAY = 0x7


@pytest.mark.parametrize("bad", [
    PREFACE + EMPTY_SETTINGS + b"\x00\x00\x04\x00\x00\x00\x00\x00\x00junk",  # DATA on stream 0
    PREFACE + b"\x00\x00\x05\x04\x00\x00\x00\x00\x00abcde",  # SETTINGS of a bad length
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # not HTTP/2 at all
], ids=["data-on-stream-0", "bad-settings-length", "http1"])
def test_bad_input_ends_that_connection_only(fronts, bad):
    front = fronts["native"]
    with grpc.insecure_channel(front.address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        assert stub.Heartbeat(svc.HeartbeatRequest(), timeout=10).status.code == Code.OK
        with socket.create_connection(("127.0.0.1", front.port)) as raw:
            raw.sendall(bad)
            answer = read_until_closed(raw)
        if bad.startswith(PREFACE):
            assert GOAWAY in frame_types(answer)
        assert stub.Heartbeat(svc.HeartbeatRequest(), timeout=10).status.code == Code.OK


class Held:
    """A MetricsService whose exports wait until released (calls that stay in progress)."""

    def __init__(self):
        self.release: asyncio.Event | None = None
        self.started = 0

    async def Export(self, request, context):
        self.started += 1
        await self.release.wait()
        return metrics_sink.metrics_service_pb2.ExportMetricsServiceResponse()


class ServerThread:
    """A NativeServer with ``Held`` on its own loop thread, on a free port."""

    def __init__(self, servicer=None, **bounds):
        self.servicer = servicer or Held()
        self.server = native_server.NativeServer(
            native_server.methods_of(metrics_sink.service_descriptor(), self.servicer),
            max_message=1 << 20, **bounds)
        self.loop = asyncio.new_event_loop()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self):
        if isinstance(self.servicer, Held):
            self.servicer.release = asyncio.Event()
        await self.server.start(self.listener)

    def release(self):
        if isinstance(self.servicer, Held):
            self.loop.call_soon_threadsafe(self.servicer.release.set)

    def close(self):
        asyncio.run_coroutine_threadsafe(self.server.stop(0.5), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def held():
    made = []

    def make(servicer=None, **bounds):
        bounds.setdefault("max_calls", 100)
        bounds.setdefault("idle_s", 60.0)
        made.append(ServerThread(servicer, **bounds))
        return made[-1]

    yield make
    for server in made:
        server.release()
        server.close()


def export(channel):
    call = channel.unary_unary(
        "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
        request_serializer=lambda r: r.SerializeToString(),
        response_deserializer=metrics_sink.metrics_service_pb2.ExportMetricsServiceResponse
        .FromString)
    return call.future(metrics_sink.metrics_service_pb2.ExportMetricsServiceRequest(), timeout=20)


def wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_calls_past_the_limit_in_all_are_resource_exhausted_and_the_rest_complete(held):
    server = held(max_calls=2)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        waiting = [export(channel), export(channel)]
        wait_for(lambda: server.servicer.started == 2)
        with pytest.raises(grpc.RpcError) as refused:
            export(channel).result()
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        server.release()
        for call in waiting:
            call.result()
        assert export(channel).result() is not None  # room again


def test_connections_past_the_limit_are_closed_at_once(held):
    server = held(max_connections=1)
    with socket.create_connection(("127.0.0.1", server.port)) as first:
        first.sendall(PREFACE + EMPTY_SETTINGS)
        first.settimeout(10)
        assert frame_types(first.recv(65536))[0] == 0x4  # SETTINGS: served
        wait_for(lambda: len(server.server.connections) == 1)
        with socket.create_connection(("127.0.0.1", server.port)) as second:
            second.sendall(PREFACE + EMPTY_SETTINGS)
            try:
                assert read_until_closed(second) == b""
            except ConnectionResetError:
                pass  # closed at once, possibly with a reset
        assert server.server.refused_connections == 1


def test_an_idle_connection_is_closed_with_goaway(held):
    server = held(idle_s=0.3)
    with socket.create_connection(("127.0.0.1", server.port)) as idle:
        idle.sendall(PREFACE + EMPTY_SETTINGS)
        answer = read_until_closed(idle)
    assert frame_types(answer)[-1] == GOAWAY
    assert int.from_bytes(answer[-4:], "big") == 0  # NO_ERROR


def test_a_method_table_takes_request_classes_from_the_descriptor():
    class Servicer:
        async def Export(self, request, context):
            return None

    [method] = native_server.methods_of(metrics_sink.service_descriptor(), Servicer())
    assert method.kind == native_server.UNARY
    assert method.path == b"/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
    assert method.request is metrics_sink.metrics_service_pb2.ExportMetricsServiceRequest
    kinds = {m.name: m.kind for m in native_server.methods_of(
        svc.DESCRIPTOR.services_by_name["MessagingService"], service_pb2_grpc.MessagingServiceServicer())}
    assert kinds["Telemetry"] == native_server.BIDI
    assert kinds["ReceiveMessage"] == native_server.STREAM_OUT
    assert kinds["SendMessage"] == native_server.UNARY


def test_a_call_past_its_deadline_ends_and_frees_its_slot(held):
    server = held()
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        call = channel.unary_unary(
            "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            request_serializer=lambda r: r.SerializeToString(),
            response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as late:
            call(metrics_sink.metrics_service_pb2.ExportMetricsServiceRequest(), timeout=0.3)
        assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        wait_for(lambda: server.server.calls == 0)  # the handler was cancelled, not left waiting


def test_a_call_the_client_cancels_ends_its_handler(held):
    server = held()
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        waiting = export(channel)
        wait_for(lambda: server.server.calls == 1)
        assert waiting.cancel()
        wait_for(lambda: server.server.calls == 0)  # RST_STREAM reached the handler
        server.release()
        assert export(channel).result() is not None  # the connection goes on


def test_a_streamed_answer_larger_than_the_unsent_bound_arrives_whole(fronts):
    """Ten bodies of 60 KB in one receive: past MAX_UNSENT the handler waits for the client to
    read (flow control), then goes on."""
    bodies = [bytes([65 + i]) * 60_000 for i in range(10)]
    assert sum(map(len, bodies)) > native_server.MAX_UNSENT
    with grpc.insecure_channel(fronts["native"].address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        sent = stub.SendMessage(svc.SendMessageRequest(messages=[
            message("BigTopic", body, f"01{i + 1:032X}") for i, body in enumerate(bodies)]),
            timeout=10)
        assert sent.status.code == Code.OK
        answers = list(stub.ReceiveMessage(receive_request("BigGroup", "BigTopic", 16),
                                           timeout=10))
    assert sorted(a.message.body for a in answers if a.HasField("message")) == bodies


def test_auto_falls_back_to_grpcio_with_a_warning_where_the_codec_is_not_built(
        monkeypatch, caplog):
    from rocks_timer.errors import ConfigError
    from rocks_timer.proxy import server
    assert server.pick_transport("auto") == "native"
    assert server.pick_transport("grpcio") == "grpcio"
    monkeypatch.setattr(native_server, "AVAILABLE", False)  # as on a machine without nghttp2.h
    with caplog.at_level("WARNING"):
        assert server.pick_transport("auto") == "grpcio"
    assert "libnghttp2-dev" in caplog.text
    with pytest.raises(ConfigError, match="not built"):
        server.pick_transport("native")
    with pytest.raises(ConfigError, match="one of"):
        server.pick_transport("h3")


class Plain:
    """Handlers that are plain functions (grpc.aio serves those too), one of them failing."""

    def __init__(self):
        self.calls = 0

    def Export(self, request, context):
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("the second export fails")
        return metrics_sink.metrics_service_pb2.ExportMetricsServiceResponse()


def test_a_plain_function_handler_is_answered_and_its_exception_is_unknown(held):
    server = held(Plain())
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        assert export(channel).result() is not None
        with pytest.raises(grpc.RpcError) as failed:
            export(channel).result()
        assert failed.value.code() == grpc.StatusCode.UNKNOWN
        assert "the second export fails" in failed.value.details()


def test_a_call_reset_in_the_same_read_as_it_came_holds_no_slot(held):
    """The call and its RST_STREAM in one write: the handler's task is cancelled before its
    first step, and the call is still counted out (a client repeating this must not fill the
    limit in all)."""
    import h2.config
    import h2.connection
    import h2.errors
    server = held(max_calls=3)
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                  header_encoding=None))
    client.initiate_connection()
    path = b"/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
    with socket.create_connection(("127.0.0.1", server.port)) as raw:
        for n, sid in enumerate(range(1, 2 * 10, 2)):  # more than the limit, one at a time
            client.send_headers(sid, [(b":method", b"POST"), (b":scheme", b"http"),
                                      (b":path", path), (b":authority", b"x"),
                                      (b"content-type", b"application/grpc")])
            client.send_data(sid, b"\0\0\0\0\0", end_stream=True)
            client.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
            raw.sendall(client.data_to_send())
            wait_for(lambda: server.servicer.started == n + 1)  # admitted: the slot came back
            wait_for(lambda: server.server.calls == 0)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        waiting = [export(channel) for _ in range(3)]
        wait_for(lambda: server.server.calls == 3)
        server.release()
        assert all(call.result() is not None for call in waiting)


def test_the_call_context_gives_what_the_handlers_use():
    loop = asyncio.new_event_loop()
    try:
        context = native_server.CallContext(
            "ipv4:127.0.0.1:5", [("x-mq-client-id", "c1"), ("trace-bin", "AAEC"),
                                 ("bad-bin", "A")], loop.time() + 30, loop)
        assert context.peer() == "ipv4:127.0.0.1:5"
        # -bin values base64-decoded (padding optional, as gRPC sends them); undecodable dropped
        assert context.invocation_metadata() == (("x-mq-client-id", "c1"),
                                                 ("trace-bin", b"\x00\x01\x02"))
        assert 29 < context.time_remaining() <= 30
        assert native_server.CallContext("p", None, None, loop).time_remaining() is None
        with pytest.raises(native_server.Aborted) as aborted:
            loop.run_until_complete(context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "full"))
        assert (aborted.value.code, aborted.value.details) == (8, "full")
    finally:
        loop.close()
