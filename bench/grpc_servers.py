"""``python -m bench.grpc_servers``: what one unary call costs in grpc's two Python servers and in
the gRPC front's native transport.

The question of issue 26 (point 3): would grpc's sync server (``grpc.server`` with a thread pool)
serve the official client's calls with less CPU than ``grpc.aio``? And what does the front's own
transport (``native``: rocks_timer/proxy/native_server.py over the nghttp2 codec) cost per call?
The three serve the same minimal ``MessagingService`` (routes, heartbeats, Telemetry settings,
and a SendMessage that stores nothing and answers OK), each in its own subprocess;
the official Python client (rocketmq-python-client 5.1.2) in a second subprocess sends
``--messages`` messages one call at a time, after 300 warm-up sends. Printed per server and
round: sends/s and the server process's CPU per send (``/proc/<pid>/stat``). Rounds alternate
the order. Only the servers' own cost is measured: no broker, no disk.

Run it under ``flock /work/bench.lock``; results go to bench/results/grpc_servers.json.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import RESULTS, import_client, median, process_cpu_s, write_result

ROOT = Path(__file__).resolve().parent.parent
SERVERS = ("aio", "sync", "native")  # native: the front's own transport (proxy/native_server.py)
WARM = 300


def _servicer(kind: str):
    from rocks_timer.proxy.protocol import pb, service_pb2_grpc, svc
    from rocks_timer.proxy.status import ok

    def route(request):
        queue = pb.MessageQueue(id=0, permission=pb.READ_WRITE, accept_message_types=[pb.NORMAL])
        queue.topic.CopyFrom(request.topic)
        queue.broker.name = "bench"
        queue.broker.endpoints.CopyFrom(request.endpoints)
        return svc.QueryRouteResponse(status=ok(), message_queues=[queue])

    def sent(request):
        return svc.SendMessageResponse(status=ok(), entries=[
            svc.SendResultEntry(status=ok(), message_id=m.system_properties.message_id)
            for m in request.messages])

    if kind == "sync":
        class Sync(service_pb2_grpc.MessagingServiceServicer):
            def QueryRoute(self, request, context):
                return route(request)

            def Heartbeat(self, request, context):
                return svc.HeartbeatResponse(status=ok())

            def SendMessage(self, request, context):
                return sent(request)

            def NotifyClientTermination(self, request, context):
                return svc.NotifyClientTerminationResponse(status=ok())

            def Telemetry(self, commands, context):
                for command in commands:
                    if command.HasField("settings"):
                        yield svc.TelemetryCommand(status=ok(), settings=command.settings)
        return Sync(), service_pb2_grpc

    class Aio(service_pb2_grpc.MessagingServiceServicer):
        async def QueryRoute(self, request, context):
            return route(request)

        async def Heartbeat(self, request, context):
            return svc.HeartbeatResponse(status=ok())

        async def SendMessage(self, request, context):
            return sent(request)

        async def NotifyClientTermination(self, request, context):
            return svc.NotifyClientTerminationResponse(status=ok())

        async def Telemetry(self, commands, context):
            async for command in commands:
                if command.HasField("settings"):
                    yield svc.TelemetryCommand(status=ok(), settings=command.settings)
    return Aio(), service_pb2_grpc


def serve(kind: str, workers: int) -> None:
    """The server subprocess: prints its port, serves until stdin ends."""
    import grpc
    servicer, stubs = _servicer(kind)
    if kind == "sync":
        server = grpc.server(ThreadPoolExecutor(workers))
        stubs.add_MessagingServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        print(f"PORT {port}", flush=True)
        sys.stdin.read()
        server.stop(1)
        return

    async def native() -> None:
        import socket
        from rocks_timer.proxy import native_server
        from rocks_timer.proxy.protocol import svc
        listener = socket.create_server(("127.0.0.1", 0))
        server = native_server.NativeServer(
            native_server.methods_of(svc.DESCRIPTOR.services_by_name["MessagingService"],
                                     servicer),
            max_message=4 << 20, max_calls=1000, idle_s=600.0)
        await server.start(listener)
        print(f"PORT {listener.getsockname()[1]}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await server.stop(1)

    async def main() -> None:
        server = grpc.aio.server()
        stubs.add_MessagingServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(f"PORT {port}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await server.stop(1)
    asyncio.run(native() if kind == "native" else main())


def client(port: int, messages: int) -> None:
    """The client subprocess: warm-up, then READY; on a line from stdin, the timed sends."""
    mq = import_client(Path(tempfile.mkdtemp(prefix="bench-grpc-servers-home-")))
    config = mq.ClientConfiguration(f"127.0.0.1:{port}", mq.Credentials(), request_timeout=10)
    producer = mq.Producer(config, ("BenchServers",))
    producer.startup()

    def send(n: int) -> None:
        for _ in range(n):
            msg = mq.Message()
            msg.topic, msg.body, msg.tag = "BenchServers", b"x" * 256, "bench"
            producer.send(msg)

    send(WARM)
    print("READY", flush=True)
    sys.stdin.readline()
    start = time.perf_counter()
    send(messages)
    print(f"DONE {time.perf_counter() - start}", flush=True)
    producer.shutdown()


def measure(kind: str, messages: int, workers: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    me = [sys.executable, "-m", "bench.grpc_servers"]
    server = subprocess.Popen(me + ["--serve", kind, "--workers", str(workers)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                              cwd=ROOT)
    try:
        port = int(server.stdout.readline().split()[1])
        sender = subprocess.Popen(me + ["--client", str(port), "--messages", str(messages)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=env, cwd=ROOT)
        try:
            if sender.stdout.readline().strip() != "READY":
                raise RuntimeError("the client did not start")
            before = process_cpu_s(server.pid)
            sender.stdin.write("go\n")
            sender.stdin.flush()
            seconds = float(sender.stdout.readline().split()[1])
            after = process_cpu_s(server.pid)
            sender.stdin.close()
            sender.wait(60)
        finally:
            if sender.poll() is None:
                sender.kill()
    finally:
        server.stdin.close()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    return {"sends_per_s": round(messages / seconds, 1),
            "server_cpu_ms_per_send": round((after - before) * 1000 / messages, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.grpc_servers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000, help="timed sends per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8, help="the sync server's pool")
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    parser.add_argument("--client", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.workers)
        return 0
    if args.client:
        client(args.client, args.messages)
        return 0
    rounds: dict[str, list[dict]] = {kind: [] for kind in SERVERS}
    for r in range(args.rounds):
        for kind in SERVERS if r % 2 == 0 else SERVERS[::-1]:
            figures = measure(kind, args.messages, args.workers)
            rounds[kind].append(figures)
            print(f"round {r + 1} {kind}: {figures}", flush=True)
    medians = {kind: {key: round(median([f[key] for f in rounds[kind]]), 3)
                      for key in ("sends_per_s", "server_cpu_ms_per_send")} for kind in SERVERS}
    lines = [f"{args.messages} sends one at a time, {args.rounds} rounds (medians):",
             "| server | sends/s | server CPU ms per send |", "|---|---|---|"]
    lines += [f"| {kind} | {medians[kind]['sends_per_s']} | "
              f"{medians[kind]['server_cpu_ms_per_send']} |" for kind in SERVERS]
    text = "\n".join(lines)
    path = write_result("grpc_servers", {"messages": args.messages, "rounds": rounds,
                                         "workers": args.workers, "median": medians,
                                         "summary": text}, args.results_dir or RESULTS)
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
