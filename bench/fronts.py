"""``python -m bench.fronts``: rtimer's two protocol fronts against the real Apache RocketMQ 5.5.1,
the same unmodified clients, in one run (issue 26, acceptance 3).

Both brokers run side by side for the whole run, on loopback:

- rtimer: ``rtimer run --grpc-listen 127.0.0.1:0 --remoting-listen 127.0.0.1:0``, one process
  (the broker, both fronts, and the remoting NameServer on the remoting port);
- RocketMQ: ``bench.rocketmq.cluster`` (issue 29's harness, ``make rocketmq``): the NameServer JVM
  and one JVM holding the broker and the proxy in local mode. The gRPC clients connect to the
  proxy; the Java 4.x client to the NameServer, then the broker.

After a warm-up on each broker (``--warm`` messages through each front, not recorded:
connections, routes, and above all the JVM's compiler: with 500 warm-up messages RocketMQ's
per-call rates still doubled over the next 6,000, its broker CPU per send falling from 1.36 to
0.47 ms), measured per round on each broker in turn (rounds alternate which one goes first):

- gRPC, the official Python client (rocketmq-python-client 5.1.2) in this process, one Producer
  and one SimpleConsumer per broker: per-call send/s (``Producer.send``, one at a time, a new
  ``Message`` each) and receive+ack/s (``SimpleConsumer.receive`` of up to 32, then ``ack`` of
  each, one RPC per ack, until all of the round's messages are acked);
- remoting, the Java 4.9.8 client (``bench.remoting``'s ``java_bench``: one JVM per broker and
  round): per-call send/s and push-consume/s of a new consumer group.

CPU per message is the process's user + system time over the measure (``/proc/<pid>/stat``)
divided by its messages: ``broker`` is rtimer's process or RocketMQ's broker + proxy JVM,
``namesrv`` RocketMQ's NameServer JVM (rtimer has none apart), ``client`` this process (gRPC) or
the client JVM (remoting). The figures printed are the medians of the rounds, and the ratio of
the last round alone ("last round": the warmest JVM, since RocketMQ still gets faster over the
rounds after the warm-up); the JSON keeps every round. Run it under ``flock /work/bench.lock``; results go to bench/results/fronts.json.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS, ProcessCpu, import_client, median, scratch_dir, write_result
from bench.remoting import JAVA_DIR, java_bench

ROOT = Path(__file__).resolve().parent.parent
_GRPC = re.compile(r"gRPC .* listening on 127\.0\.0\.1:(\d+)")
_REMOTING = re.compile(r"remoting .* listening on 127\.0\.0\.1:(\d+)")
TOPIC = "BenchFronts"
GROUP = "BenchFrontsGroup"
SIDES = ("rtimer", "rocketmq")
RECEIVE_BATCH = 32
INVISIBLE_S = 30
START_TIMEOUT_S = 60.0




class Rtimer:
    """``rtimer run`` with both fronts on free loopback ports; its output goes to a file."""

    def __init__(self, data: Path, home: Path, grpc_server: str = "auto"):
        data.parent.mkdir(parents=True, exist_ok=True)
        self.log = data.parent / "rtimer.out"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "--data-dir", str(data), "run",
                 "--grpc-listen", "127.0.0.1:0", "--remoting-listen", "127.0.0.1:0",
                 "--grpc-server", grpc_server],
                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(home)),
                # placed as RocketMQCluster places the real broker: a session of its own, so
                # the kernel's autogroup schedules it apart from the client JVM (DECISIONS
                # "Both brokers placed alike")
                start_new_session=True)
        self.grpc_port = self.remoting_port = 0
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            text = self.log.read_text()
            grpc_port, remoting = _GRPC.search(text), _REMOTING.search(text)
            if grpc_port and remoting:
                self.grpc_port, self.remoting_port = int(grpc_port[1]), int(remoting[1])
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"rtimer run did not start:\n{self.log.read_text()[-2000:]}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class GrpcSide:
    """One Producer and one SimpleConsumer of the official client against one endpoint."""

    def __init__(self, mq, endpoint: str, body: bytes, brokers: dict[str, int]):
        self.mq, self.body = mq, body
        config = mq.ClientConfiguration(endpoint, mq.Credentials(), request_timeout=10)
        self.producer = mq.Producer(config, (TOPIC,))
        self.consumer = mq.SimpleConsumer(config, GROUP, {TOPIC: mq.FilterExpression()},
                                          await_duration=1)
        self.cpu = ProcessCpu({**brokers, "client": os.getpid()})

    def start(self, warm: int) -> None:
        self.producer.startup()
        self.consumer.startup()
        # the group's first receive, on the empty topic, sets where its offset starts; the
        # proxy refuses it until the client's settings have reached it over Telemetry
        deadline = time.monotonic() + 30
        while True:
            try:
                self.consumer.receive(RECEIVE_BATCH, INVISIBLE_S)
                break
            except Exception:  # noqa: BLE001 - "settings is null" until then; retried
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        # warm-up: connections, routes, the JVM's compiler and both code paths
        self.send(warm)
        self.receive_ack(warm)

    def send(self, n: int) -> None:
        for _ in range(n):
            msg = self.mq.Message()
            msg.topic, msg.body, msg.tag = TOPIC, self.body, "bench"
            self.producer.send(msg)

    def receive_ack(self, n: int) -> int:
        got, deadline = 0, time.monotonic() + 120 + n / 50
        while got < n and time.monotonic() < deadline:
            for msg in self.consumer.receive(RECEIVE_BATCH, INVISIBLE_S):
                self.consumer.ack(msg)
                got += 1
        return got

    def measure(self, n: int) -> dict:
        c0, t0 = self.cpu.read(), time.perf_counter()
        self.send(n)
        t1, c1 = time.perf_counter(), self.cpu.read()
        got = self.receive_ack(n)
        t2, c2 = time.perf_counter(), self.cpu.read()
        return {"send_per_s": round(n / (t1 - t0), 1),
                "receive_ack_per_s": round(got / (t2 - t1), 1), "received": got,
                "cpu_ms_per_message": {"send": ProcessCpu.ms_per(c0, c1, n),
                                       "receive_ack": ProcessCpu.ms_per(c1, c2, got)}}

    def close(self) -> None:
        self.consumer.shutdown()
        self.producer.shutdown()


def round_medians(rounds: list[dict], rates: tuple[str, ...],
                  phases: tuple[str, ...]) -> dict:
    """One broker's rounds of one front: the median of each rate and of each CPU figure."""
    out = {rate: round(median([r[rate] for r in rounds]), 1) for rate in rates}
    out["cpu_ms_per_message"] = {
        phase: {name: round(median([r["cpu_ms_per_message"][phase][name] for r in rounds]), 3)
                for name in rounds[0]["cpu_ms_per_message"][phase]} for phase in phases}
    return out


GRPC_RATES, GRPC_PHASES = ("send_per_s", "receive_ack_per_s"), ("send", "receive_ack")
REMOTING_RATES, REMOTING_PHASES = ("send_per_s", "consume_per_s"), ("send", "consume")


def _remoting_round(namesrv: str, topic: str, n: int, body: int, log_root: Path,
                    brokers: dict[str, int], client_warm: int) -> dict:
    raw = java_bench(namesrv, topic, n, body, log_root, brokers, client_warm)
    return {"send_per_s": round(raw["sendPerSecond"], 1),
            "consume_per_s": round(raw["consumePerSecond"], 1), "consumed": raw["consumed"],
            "complete": raw["complete"], "client_warm": raw["warm"],
            "cpu_ms_per_message": raw["cpu_ms_per_message"]}


def run(scratch: Path, n: int, rounds: int, body_bytes: int, warm: int, skip_rocketmq: bool,
        fronts: tuple[str, ...], grpc_server: str = "auto", client_warm: int = 100) -> dict:
    home = Path(tempfile.mkdtemp(prefix="bench-fronts-home-"))
    log_root = home / "java-logs"
    mq = import_client(home)
    body = b"x" * body_bytes
    sides = SIDES[:1] if skip_rocketmq else SIDES
    remoting_topics = [f"BenchFrontsRemoting{r}" for r in range(rounds)]
    remoting_warm = "BenchFrontsRemotingWarm"
    cluster = None
    rtimer = Rtimer(scratch / "rt", home, grpc_server)  # short: the socket path has a limit
    try:
        targets = {"rtimer": {"grpc": f"127.0.0.1:{rtimer.grpc_port}",
                              "namesrv": f"127.0.0.1:{rtimer.remoting_port}",
                              "pids": {"broker": rtimer.pid}}}
        if not skip_rocketmq:
            from bench.rocketmq.cluster import RocketMQCluster
            cluster = RocketMQCluster(scratch / "rmq")
            cluster.start()
            topics = {TOPIC: "NORMAL"}
            for topic in remoting_topics + [remoting_warm]:
                topics.update({topic: "NORMAL", f"{topic}-warmup": "NORMAL"})
            cluster.admin(topics=topics, groups=(GROUP,))
            targets["rocketmq"] = {"grpc": cluster.grpc_endpoint,
                                   "namesrv": cluster.namesrv_addr,
                                   "pids": {"broker": cluster.broker_pid,
                                            "namesrv": cluster.namesrv.pid}}
        result: dict = {"grpc": {s: [] for s in sides}, "remoting": {s: [] for s in sides}}
        grpc_sides: dict[str, GrpcSide] = {}
        try:
            if "grpc" in fronts:
                for side in sides:
                    grpc_sides[side] = GrpcSide(mq, targets[side]["grpc"], body,
                                                targets[side]["pids"])
                    grpc_sides[side].start(warm)
            if "remoting" in fronts:
                for side in sides:  # not recorded: the JVMs' compilers, connections, routes
                    java_bench(targets[side]["namesrv"], remoting_warm, warm, body_bytes,
                               log_root, targets[side]["pids"])
            for r in range(rounds):
                order = sides if r % 2 == 0 else sides[::-1]
                for side in order:
                    if "grpc" in fronts:
                        figures = grpc_sides[side].measure(n)
                        result["grpc"][side].append(figures)
                        print(f"round {r + 1} gRPC {side}: {figures}", flush=True)
                    if "remoting" in fronts:
                        figures = _remoting_round(targets[side]["namesrv"], remoting_topics[r],
                                                  n, body_bytes, log_root, targets[side]["pids"],
                                                  client_warm)
                        result["remoting"][side].append(figures)
                        print(f"round {r + 1} remoting {side}: {figures}", flush=True)
        finally:
            for grpc_side in grpc_sides.values():
                grpc_side.close()
    finally:
        rtimer.stop()
        if cluster is not None:
            cluster.stop()
    for front, rates, phases in (("grpc", GRPC_RATES, GRPC_PHASES),
                                 ("remoting", REMOTING_RATES, REMOTING_PHASES)):
        if front not in fronts:
            result.pop(front)
            continue
        result[front] = {"rounds": result[front],
                         "median": {s: round_medians(result[front][s], rates, phases)
                                    for s in sides}}
    return result


def summary(result: dict) -> str:
    lines = [f"{result['messages']} messages of {result['body_bytes']} B per measure, "
             f"{result['rounds']} rounds (medians); CPU in ms per message "
             "(broker / namesrv / client)",
             "| front | measure | rtimer /s | RocketMQ /s | rtimer / RocketMQ | last round | "
             "rtimer CPU | RocketMQ CPU |", "|---|---|---|---|---|---|---|---|"]
    labels = {"send_per_s": ("send", "send, one at a time"),
              "receive_ack_per_s": ("receive_ack", "receive 32 + ack each"),
              "consume_per_s": ("consume", "push consume")}
    for front, client in (("grpc", "gRPC (Python 5.1.2)"), ("remoting", "remoting (Java 4.9.8)")):
        if front not in result:
            continue
        medians = result[front]["median"]
        mine, theirs = medians["rtimer"], medians.get("rocketmq")
        for rate, (phase, label) in labels.items():
            if rate not in mine:
                continue
            cpu_mine = mine["cpu_ms_per_message"][phase]
            row = f"| {client} | {label} | {mine[rate]} | "
            if theirs is None:
                row += "not measured | | | "
                cpu_theirs = "-"
            else:
                last = result[front]["rounds"]
                row += (f"{theirs[rate]} | {mine[rate] / theirs[rate]:.2f} | "
                        f"{last['rtimer'][-1][rate] / last['rocketmq'][-1][rate]:.2f} | ")
                c = theirs["cpu_ms_per_message"][phase]
                cpu_theirs = f"{c['broker']:.3f} / {c['namesrv']:.3f} / {c['client']:.3f}"
            row += (f"{cpu_mine['broker']:.3f} / - / {cpu_mine['client']:.3f} | "
                    f"{cpu_theirs} |")
            lines.append(row)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fronts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000, help="messages per measure")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians are printed)")
    parser.add_argument("--body", type=int, default=256, help="body bytes")
    parser.add_argument("--warm", type=int, default=8000,
                        help="warm-up messages per broker and front, not recorded (gRPC: sends "
                        "and receive+acks; remoting: one bench run)")
    parser.add_argument("--fronts", default="grpc,remoting",
                        help="comma-separated: grpc, remoting (default both)")
    parser.add_argument("--grpc-server", choices=("auto", "native", "grpcio"), default="auto",
                        help="rtimer's gRPC transport (rtimer run --grpc-server; default auto)")
    parser.add_argument("--client-warm", type=int, default=100,
                        help="remoting: sends each measuring client JVM makes before its measured "
                        "ones (default 100: the JVM's compiler threads then still run through "
                        "the measure; --warm's run is another JVM and warms only the brokers)")
    parser.add_argument("--skip-rocketmq", action="store_true", help="measure rtimer only")
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.client_warm < 0:
        parser.error("--client-warm is a count of sends (0 or more)")
    fronts = tuple(f.strip() for f in args.fronts.split(",") if f.strip())
    if not fronts or set(fronts) - {"grpc", "remoting"}:
        parser.error("--fronts takes grpc, remoting or both")
    if "remoting" in fronts and not (JAVA_DIR / "target" / "classes" / "rtimer" /
                                     "RemotingClient.class").exists():
        print("the Java client is not built: run `make java-remoting-client`", file=sys.stderr)
        return 2
    if not args.skip_rocketmq:
        from bench.rocketmq.cluster import unavailable_reason
        reason = unavailable_reason()
        if reason:
            print(f"the real RocketMQ cannot run here: {reason}", file=sys.stderr)
            return 2
    with scratch_dir(args.results_dir and args.results_dir / "tmp", "bench-fronts-") as scratch:
        figures = run(scratch, args.messages, args.rounds, args.body, args.warm,
                      args.skip_rocketmq, fronts, args.grpc_server, args.client_warm)
    result = {"messages": args.messages, "rounds": args.rounds, "body_bytes": args.body,
              "grpc_server": args.grpc_server, "client_warm": args.client_warm,
              "warm": args.warm, "clients": {"grpc": "rocketmq-python-client 5.1.2",
                                             "remoting": "rocketmq-client 4.9.8 (Java)"},
              "rocketmq": None if args.skip_rocketmq else "5.5.1 (bench/rocketmq/pom.xml)",
              **figures}
    text = summary(result)
    result["summary"] = text
    path = write_result("fronts", result, args.results_dir or RESULTS)
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
