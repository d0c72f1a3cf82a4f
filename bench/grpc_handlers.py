"""``python -m bench.grpc_handlers``: what the gRPC front's handlers cost per message, without a
transport: CPU of the calling thread per send, per received message and per ack.

    python -m bench.grpc_handlers [--messages 3000] [--rounds 5]

The ``MessagingService`` of ``rtimer run`` (a started Broker with the default configuration, its
PopService, the real handlers) is driven on an asyncio loop in this process with the requests the
official Python client 5.1.2 builds (the same fields set, as ``Producer.send``,
``SimpleConsumer.receive(32)`` and ``ack`` set them), and a minimal call context (peer, client id,
deadline). Each request is parsed from its wire bytes and each response serialised, as any
transport does; nothing else of a transport runs. Per round, on a fresh data directory: a warm-up
of ``--warm`` messages (sent, received, acked; not recorded), then ``--messages`` sends one per
call (``--body`` bytes each, 256 as in ``bench.fronts``), then receives of 32 and one AckMessage
per message until all are acked.

Figures: microseconds of CPU of the calling thread (``time.thread_time``: it does not count time
spent waiting for a core, so neighbours on the machine move it little) per send, per received
message (a receive's CPU over the messages it returned) and per ack, the medians of the rounds;
the process's CPU per message (every thread: the broker's own threads too) beside them. Two
checkouts are compared with ``bench.ab`` (alternating runs). Results:
bench/results/grpc_handlers.json.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import median, scratch_dir, settled_gc, write_result
from rocks_timer import Broker, BrokerConfig
from rocks_timer.clock import SystemClock
from rocks_timer.pop import PopService
from rocks_timer.proxy.protocol import pb, svc
from rocks_timer.proxy.service import MessagingService

TOPIC = "BenchHandlers"
GROUP = "BenchHandlersGroup"
BATCH = 32
INVISIBLE_S = 30
BODY_BYTES = 256  # bench.fronts' default body
OK = pb.Code.Value("OK")


class Context:
    """What the handlers ask of a gRPC call context, nothing more."""

    def __init__(self, client_id: str, deadline_s: float):
        self._metadata = (("x-mq-client-id", client_id),)
        self._deadline_s = deadline_s

    def peer(self) -> str:
        return "ipv4:127.0.0.1:40000"

    def invocation_metadata(self):
        return self._metadata

    def time_remaining(self) -> float:
        return self._deadline_s

    async def abort(self, code, details):
        raise RuntimeError(f"aborted: {code} {details}")


def send_request(n: int, body: bytes) -> bytes:
    """A SendMessageRequest as ``Producer.send`` builds it (one message, tag, a V1 id)."""
    req = svc.SendMessageRequest()
    msg = req.messages.add()
    msg.topic.name = TOPIC
    msg.topic.resource_namespace = ""
    msg.body = body
    sp = msg.system_properties
    sp.tag = "bench"
    sp.message_id = f"01{os.getpid() & 0xFFFF:04X}{time.time_ns() & ((1 << 64) - 1):016X}{n:012X}"
    sp.message_type = pb.NORMAL
    sp.born_timestamp.seconds = int(time.time())
    sp.born_host = "127.0.0.1"
    sp.body_encoding = pb.IDENTITY
    return req.SerializeToString()


def receive_request() -> bytes:
    """A ReceiveMessageRequest as ``SimpleConsumer.receive(32, 30)`` builds it."""
    req = svc.ReceiveMessageRequest()
    req.group.name = GROUP
    req.group.resource_namespace = ""
    queue = req.message_queue
    queue.topic.name = TOPIC
    queue.id = 0
    queue.permission = pb.READ_WRITE
    queue.broker.name = "rtimer"
    queue.broker.endpoints.addresses.add(host="127.0.0.1", port=8081)
    req.filter_expression.type = pb.TAG
    req.filter_expression.expression = "*"
    req.batch_size = BATCH
    req.invisible_duration.seconds = INVISIBLE_S
    req.long_polling_timeout.seconds = 1
    req.auto_renew = False
    return req.SerializeToString()


def ack_request(message_id: str, receipt_handle: str) -> bytes:
    """An AckMessageRequest as ``SimpleConsumer.ack`` builds it (one entry)."""
    req = svc.AckMessageRequest()
    req.group.name = GROUP
    req.group.resource_namespace = ""
    req.topic.name = TOPIC
    req.topic.resource_namespace = ""
    entry = req.entries.add()
    entry.message_id = message_id
    entry.receipt_handle = receipt_handle
    return req.SerializeToString()


class Driver:
    """Calls the handlers as a transport would: parse, call, serialise the answer(s)."""

    def __init__(self, service: MessagingService):
        self.service = service
        self.producer = Context("bench-producer", 10.0)
        self.consumer = Context("bench-consumer", 13.0)

    async def send(self, wire: bytes) -> None:
        response = await self.service.SendMessage(svc.SendMessageRequest.FromString(wire),
                                                  self.producer)
        response.SerializeToString()
        if response.status.code != OK:
            raise RuntimeError(f"send failed: {response.status}")

    async def receive(self, wire: bytes) -> list[tuple[str, str]]:
        got = []
        async for response in self.service.ReceiveMessage(
                svc.ReceiveMessageRequest.FromString(wire), self.consumer):
            response.SerializeToString()
            if response.HasField("message"):
                sp = response.message.system_properties
                got.append((sp.message_id, sp.receipt_handle))
        return got

    async def ack(self, wire: bytes) -> None:
        response = await self.service.AckMessage(svc.AckMessageRequest.FromString(wire),
                                                 self.consumer)
        response.SerializeToString()
        if response.status.code != OK:
            raise RuntimeError(f"ack failed: {response.status}")


async def _exchange(driver: Driver, n: int, first: int, timed: bool, body: bytes
                    ) -> dict[str, float]:
    sends = [send_request(first + i, body) for i in range(n)]
    receive = receive_request()
    cpu, proc = time.thread_time, time.process_time
    with settled_gc():
        t0, p0 = cpu(), proc()
        for wire in sends:
            await driver.send(wire)
        send_cpu, send_proc = cpu() - t0, proc() - p0
        receive_cpu = ack_cpu = 0.0
        received = 0
        p0 = proc()
        while received < n:
            t0 = cpu()
            got = await driver.receive(receive)
            receive_cpu += cpu() - t0
            if not got:
                raise RuntimeError(f"received {received} of {n} messages")
            received += len(got)
            acks = [ack_request(mid, handle) for mid, handle in got]  # the client's work
            t0 = cpu()
            for wire in acks:
                await driver.ack(wire)
            ack_cpu += cpu() - t0
        consume_proc = proc() - p0
    if not timed:
        return {}
    us = 1e6 / n
    return {"send_us": round(send_cpu * us, 2), "receive_us": round(receive_cpu * us, 2),
            "ack_us": round(ack_cpu * us, 2),
            "receive_ack_us": round((receive_cpu + ack_cpu) * us, 2),
            "send_process_us": round(send_proc * us, 2),
            "receive_ack_process_us": round(consume_proc * us, 2)}


def one_round(n: int, warm: int, body: bytes) -> dict[str, float]:
    with scratch_dir(prefix="grpc-handlers-") as d:
        with Broker.open(d / "data", BrokerConfig(), clock=SystemClock()) as broker:
            broker.start()
            pop = PopService(broker)
            try:
                endpoints = pb.Endpoints(scheme=pb.IPv4)
                endpoints.addresses.add(host="127.0.0.1", port=8081)

                async def run() -> dict[str, float]:
                    with ThreadPoolExecutor(8, thread_name_prefix="grpc-broker") as executor:
                        driver = Driver(MessagingService(broker, pop, executor, endpoints))
                        await _exchange(driver, warm, 0, False, body)
                        return await _exchange(driver, n, warm, True, body)

                return asyncio.run(run())
            finally:
                pop.close()


def bench(n: int, rounds: int, warm: int, body_bytes: int) -> dict:
    body = b"x" * body_bytes
    runs = [one_round(n, warm, body) for _ in range(rounds)]
    names = runs[0].keys()
    return {"messages": n, "rounds": rounds, "warm": warm, "body_bytes": body_bytes,
            "median": {k: round(median([r[k] for r in runs]), 2) for k in names},
            "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warm", type=int, default=500)
    parser.add_argument("--body", type=int, default=BODY_BYTES, help="body bytes")
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    result = bench(args.messages, args.rounds, args.warm, args.body)
    path = write_result("grpc_handlers", result, args.results_dir)
    m = result["median"]
    print(f"µs of thread CPU per message (medians of {args.rounds} rounds of "
          f"{args.messages}): send {m['send_us']}, receive {m['receive_us']}, "
          f"ack {m['ack_us']}, receive+ack {m['receive_ack_us']}; process CPU: send "
          f"{m['send_process_us']}, receive+ack {m['receive_ack_process_us']}; {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
