"""The fronts on either event loop (``rtimer run --loop``, ``rocks_timer.listen``): uvloop when it
is installed (``auto``), asyncio's own otherwise or when asked. Both fronts answer the same on
both: the gRPC front on each transport gives the reference's answers (grpcio on asyncio) byte
for byte, and the remoting front answers sends, wakes a held pull on an arrival and closes only
a connection that sends junk."""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from rocks_timer import BrokerConfig
from rocks_timer.errors import ConfigError
from rocks_timer.listen import pick_loop
from rocks_timer.proxy import native_server
from rocks_timer.proxy.server import GrpcFront
from rocks_timer.remoting import RemotingFront
from tests.fronts.test_grpc_native_transport import MAX_BODY, conversation
from tests.fronts.test_remoting_protocol import Raw, pull, send

uvloop = pytest.importorskip("uvloop")  # the dev extra installs it (the fast extra)
LOOPS = ("asyncio", "uvloop")
UNIQ = "0A0B0C0D0E0F10111213141516170001"


def test_auto_takes_uvloop_where_it_is_installed_and_a_bad_choice_is_refused():
    assert pick_loop("auto") == "uvloop"
    assert [pick_loop(k) for k in LOOPS] == list(LOOPS)
    with pytest.raises(ConfigError, match="--loop 'libuv' must be one of"):
        pick_loop("libuv")


def test_without_uvloop_auto_is_asyncio_and_uvloop_is_refused():
    script = ("import sys; sys.modules['uvloop'] = None  # as if not installed\n"
              "from rocks_timer.errors import ConfigError\n"
              "from rocks_timer.listen import pick_loop\n"
              "print(pick_loop('auto'))\n"
              "try:\n    pick_loop('uvloop')\nexcept ConfigError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == "asyncio"
    assert out[1].startswith("--loop uvloop: uvloop is not installed")


@pytest.mark.skipif(not native_server.AVAILABLE, reason="the native HTTP/2 codec is not built")
def test_the_grpc_front_answers_the_same_on_both_loops_and_transports(make_broker, tmp_path):
    answers = {}
    for transport in ("grpcio", "native"):
        for loop in LOOPS:
            broker = make_broker("memory", path=tmp_path / f"{transport}-{loop}",
                                 max_message_size=MAX_BODY)
            front = GrpcFront(broker, "127.0.0.1", 0, transport=transport, loop=loop).start()
            try:
                assert front.loop == loop
                answers[transport, loop] = conversation(front.address)
            finally:
                front.stop()
    reference = answers["grpcio", "asyncio"]
    assert [code for code, _ in reference].count("OK") > 5
    for key, seen in answers.items():
        assert seen == reference, key


@pytest.mark.parametrize("loop", LOOPS)
def test_the_remoting_front_sends_wakes_a_held_pull_and_closes_only_a_junk_connection(
        make_broker, tmp_path, loop):
    broker = make_broker("memory", path=tmp_path / loop)
    front = RemotingFront(broker, "127.0.0.1", 0, loop=loop).start()
    clients = [Raw(front.port) for _ in range(3)]
    try:
        assert front.loop == loop
        sender, puller, junk = clients
        held: list = []
        waiting = threading.Thread(target=lambda: held.append(
            pull(puller, "LoopTopic", suspend_ms=10_000)))
        waiting.start()
        junk.send_raw(b"\x00\x00\x00\x03" + b"\x00" * 8)  # a frame length below 4
        assert junk.closed()
        reply = send(sender, "LoopTopic", b"hello", code=310, UNIQ_KEY=UNIQ)
        assert reply.code == 0 and reply.ext["msgId"] == UNIQ
        waiting.join(10)
        assert held and held[0].code == 0  # woken by the arrival, well before 10 s
        assert send(sender, "LoopTopic", b"again", code=310, UNIQ_KEY=UNIQ).ext["msgId"] == UNIQ
        assert front.stats()["duplicate_sends"] == 1 and front.stats()["closed_for_junk"] == 1
        assert send(sender, "bad topic!", b"x", code=310, UNIQ_KEY=UNIQ).code == 13
        requests, failures = front.request_counts()  # counted as handle() counts them
        assert requests["SEND_MESSAGE_V2"] == 3 and failures == {"SEND_MESSAGE_V2": 1}
    finally:
        for client in clients:
            client.close()
        front.stop()
    assert [m.body for m in broker.pull("LoopTopic", 0, 0, 10)] == [b"hello"]
