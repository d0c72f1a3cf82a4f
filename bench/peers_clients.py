"""The peers of ``bench.peers``: their server processes and one adapter per system.

Every adapter offers the same five steps, over the same 1 KiB bodies:

- ``prepare(n, tag)``: the inputs of n messages (not timed);
- ``send_single(items, delays_ms)``: one message per call, the i-th due ``delays_ms[i]`` from
  its send (an hour, or 0-2 s so that the peer delivers while the sends go on); returns cancel
  handles;
- ``send_batches(items, delays_ms)``: 100 messages per call, the k-th call's due
  ``delays_ms[k]`` from its send;
- ``cancel(handles)``: how many of them were cancelled (each must be);
- ``load_due(items, due_ms)`` then ``drain(n)``: n messages due at ``due_ms``, then taken by one
  consumer until none is left (``wait_due`` first waits until the peer holds them all as due).

The servers are Debian's ``beanstalkd`` and ``redis-server``, started here on 127.0.0.1 on a free
port with their data in the benchmark's scratch directory, and stopped at the end.
"""
from __future__ import annotations

import math
import shutil
import socket
import subprocess
import time
from pathlib import Path

from rocks_timer import Broker, BrokerConfig, Message, SystemClock

BODY_BYTES = 1024
DELAY_MS = 3_600_000  # idle mode: due in an hour, so nothing is delivered meanwhile
BUSY_MAX_DELAY_MS = 2_000  # busy mode: due in 0-2 s, so the deliverer works while the sends go on
BATCH = 100
HOST = "127.0.0.1"


def bodies(count: int = 256, seed: int = 7) -> list[bytes]:
    """The 1 KiB bodies every system is sent (message i carries ``bodies()[i % 256]``)."""
    import random
    rng = random.Random(seed)
    return [rng.randbytes(BODY_BYTES) for _ in range(count)]


def whole_seconds(delay_ms: int) -> int:
    """beanstalkd's delays are whole seconds: the nearest one."""
    return (delay_ms + 500) // 1000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def missing_reason(binary: str, module: str, package: str) -> str | None:
    """Why a peer cannot be measured here, or None if it can."""
    if shutil.which(binary) is None:
        return f"{binary} is not installed (apt-get install -y {package})"
    try:
        __import__(module)
    except ImportError:
        return f"the Python client '{module}' is not installed (pip install -e '.[bench]')"
    return None


def version(argv: list[str]) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    return (out.stdout or out.stderr).strip().splitlines()[0]


class Server:
    """A peer's server process on loopback, its log in its data directory."""

    def __init__(self, name: str, argv: list[str], port: int, data: Path):
        self.name, self.argv, self.port, self.data = name, argv, port, data
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "Server":
        self.data.mkdir(parents=True, exist_ok=True)
        self.log = open(self.data / f"{self.name}.log", "wb")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.data)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                socket.create_connection((HOST, self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.__exit__()
        tail = (self.data / f"{self.name}.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{self.name} did not start on {HOST}:{self.port}: {tail}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def start_server(name: str, argv_for, data: Path, tries: int = 3) -> Server:
    """Starts ``argv_for(port)`` on a free port; another port if one was taken meanwhile."""
    for attempt in range(tries):
        port = free_port()
        try:
            return Server(name, argv_for(port), port, data).__enter__()
        except RuntimeError:
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def wait_until(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done after {seconds:.0f} s")
        time.sleep(0.001)


# -- rocks-timer -------------------------------------------------------------------------------
class RocksTimerSystem:
    """rocks-timer in this process: a started broker (real clock) for the send and cancel
    phases; for the drain, a second broker loaded while stopped and started once all is due."""

    name = "rocks-timer"
    methods = {
        "single": "Broker.send(message, delay_ms=...) with the deliverer running (Broker.start())",
        "batch": "Broker.send_batch(100 messages, delay_ms=...), deliverer running",
        "cancel": "Broker.cancel(handle)",
        "drain": "Broker.start() once all are due, until all are readable on their topic "
                 "(Broker.max_offset)",
    }
    topic = "peers"

    def __init__(self, data: Path, pool: list[bytes]):
        self.data, self.pool = data, pool
        self.broker = Broker.open(data / "send", BrokerConfig(), clock=SystemClock()).start()
        self.drainer: Broker | None = None

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.broker.close()
        if self.drainer is not None:
            self.drainer.close()

    def prepare(self, n: int, tag: str) -> list[Message]:
        """The messages, with their property strings encoded (cached in each message's
        ``__dict__``): made in the timed loop, those 100,000s of new dicts, created after the
        collector was settled, cost the batch phase full collections (docs/BENCHMARKS.md,
        bench.peers)."""
        pool = self.pool
        messages = [Message(self.topic, pool[i % len(pool)]) for i in range(n)]
        for message in messages:
            message.encoded_properties
        return messages

    def send_single(self, items: list[Message], delays_ms: list[int]) -> list[str | None]:
        send = self.broker.send
        return [send(m, delay_ms=d).handle for m, d in zip(items, delays_ms)]

    def send_batches(self, items: list[Message], delays_ms: list[int]) -> int:
        for i, delay in zip(range(0, len(items), BATCH), delays_ms):
            self.broker.send_batch(items[i:i + BATCH], delay_ms=delay)
        return len(items)

    def cancel(self, handles: list[str]) -> int:
        cancel = self.broker.cancel
        return sum(cancel(h) for h in handles)

    def load_due(self, items: list[Message], due_ms: int) -> None:
        self.drainer = Broker.open(self.data / "drain", BrokerConfig(), clock=SystemClock())
        for i in range(0, len(items), BATCH):
            results = self.drainer.send_batch(items[i:i + BATCH], deliver_at_ms=due_ms)
            if any(r.handle is None for r in results):
                raise RuntimeError("the drain set was still being loaded at its due time "
                                   "(it would be stored at once): raise --drain-margin")

    def wait_due(self, n: int) -> None:
        pass  # the broker is stopped: nothing moves before drain() starts it

    def drain(self, n: int) -> None:
        self.drainer.start()
        wait_until(lambda: self.drainer.max_offset(self.topic) >= n, 120 + n / 1000,
                   "rocks-timer drain")


# -- beanstalkd --------------------------------------------------------------------------------
class BeanstalkPipeline:
    """beanstalkd has no batch put. Its closest equivalent: ``put`` commands written back to back
    on one connection in one send, then their replies read (pipelining; not atomic)."""

    def __init__(self, port: int, tube: str):
        self.sock = socket.create_connection((HOST, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")
        self.sock.sendall(b"use %s\r\n" % tube.encode())
        self._expect(b"USING")

    def _expect(self, word: bytes) -> bytes:
        line = self.reader.readline()
        if not line.startswith(word + b" "):
            raise RuntimeError(f"beanstalkd answered {line!r}, expected {word.decode()}")
        return line[len(word) + 1:].strip()

    def put_many(self, payloads: list[bytes], delay_s: int) -> list[int]:
        head = b"put 65536 %d 60 " % delay_s
        self.sock.sendall(b"".join(b"%s%d\r\n%s\r\n" % (head, len(p), p) for p in payloads))
        return [int(self._expect(b"INSERTED")) for _ in payloads]

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class BeanstalkdSystem:
    """beanstalkd with its binlog on (``-b <dir> -f 1000``), through greenstalk."""

    name = "beanstalkd"
    methods = {
        "single": "greenstalk Client.put(body, delay=3600), or 0-2 s in busy mode (whole seconds)",
        "batch": "no batch command: 100 put commands pipelined on one connection "
                 "(one send, then the 100 INSERTED replies)",
        "cancel": "greenstalk Client.delete(job id) of the delayed job",
        "drain": "one consumer: greenstalk reserve() + delete(job) per job, from the moment "
                 "all jobs are ready (beanstalkd delays are whole seconds)",
    }

    def __init__(self, data: Path, pool: list[bytes]):
        import greenstalk
        self.greenstalk, self.pool = greenstalk, pool
        (data / "binlog").mkdir(parents=True, exist_ok=True)
        self.server = start_server("beanstalkd", lambda port: [
            "beanstalkd", "-l", HOST, "-p", str(port), "-b", str(data / "binlog"), "-f", "1000"],
            data)
        self.port = self.server.port
        try:
            self.client = greenstalk.Client((HOST, self.port), encoding=None, use="send")
            self.pipe = BeanstalkPipeline(self.port, "send")
        except BaseException:
            self.server.__exit__()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.pipe.close()
        self.server.__exit__()

    def prepare(self, n: int, tag: str) -> list[bytes]:
        pool = self.pool
        return [pool[i % len(pool)] for i in range(n)]

    def send_single(self, items: list[bytes], delays_ms: list[int]) -> list[int]:
        put = self.client.put
        return [put(body, delay=whole_seconds(d)) for body, d in zip(items, delays_ms)]

    def send_batches(self, items: list[bytes], delays_ms: list[int]) -> int:
        for i, delay in zip(range(0, len(items), BATCH), delays_ms):
            self.pipe.put_many(items[i:i + BATCH], whole_seconds(delay))
        return len(items)

    def cancel(self, handles: list[int]) -> int:
        delete = self.client.delete
        for job_id in handles:
            delete(job_id)  # raises NotFoundError unless the job was there to delete
        return len(handles)

    def load_due(self, items: list[bytes], due_ms: int) -> None:
        pipe = BeanstalkPipeline(self.port, "drain")
        try:
            for i in range(0, len(items), BATCH):
                delay_s = max(0, math.ceil((due_ms - now_ms()) / 1000))
                pipe.put_many(items[i:i + BATCH], delay_s)
        finally:
            pipe.close()

    def wait_due(self, n: int) -> None:
        stats = self.client.stats_tube
        wait_until(lambda: stats("drain")["current-jobs-ready"] >= n, 30, "beanstalkd ready")

    def drain(self, n: int) -> None:
        consumer = self.greenstalk.Client((HOST, self.port), encoding=None, watch="drain")
        try:
            for _ in range(n):
                consumer.delete(consumer.reserve(timeout=30))
        finally:
            consumer.close()


# -- Redis -------------------------------------------------------------------------------------
# Takes up to ARGV[2] members due by ARGV[1] off the sorted set and returns their payloads,
# deleting them: the whole claim is one atomic step on the server.
POP_DUE = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
if #ids == 0 then return ids end
redis.call('ZREM', KEYS[1], unpack(ids))
local out = {}
for i, id in ipairs(ids) do out[i] = redis.call('GETDEL', ARGV[3] .. id) end
return out
"""


class RedisSystem:
    """Redis as a delay queue: a sorted set of due times plus one string per payload, AOF on
    with ``appendfsync everysec`` (RDB snapshots off), through redis-py."""

    name = "Redis"
    methods = {
        "single": "one MULTI/EXEC pipeline per message: ZADD due <due ms> <id> + SET m:<id> <body>",
        "batch": "one MULTI/EXEC pipeline of 100 x (ZADD + SET)",
        "cancel": "one MULTI/EXEC pipeline: ZREM due <id> + DEL m:<id> (cancelled if ZREM removed it)",
        "drain": "one consumer: a Lua script (EVALSHA) that pops up to 100 due ids "
                 "(ZRANGEBYSCORE + ZREM) and GETDELs their payloads, called until all are taken",
    }

    def __init__(self, data: Path, pool: list[bytes]):
        import redis
        self.pool = pool
        self.server = start_server("redis", lambda port: [
            "redis-server", "--bind", HOST, "--port", str(port), "--dir", str(data),
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--protected-mode", "yes", "--daemonize", "no"], data)
        self.r = redis.Redis(host=HOST, port=self.server.port)
        self.pop_due = self.r.register_script(POP_DUE)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.r.close()
        self.server.__exit__()

    def prepare(self, n: int, tag: str) -> list[tuple[bytes, bytes]]:
        pool = self.pool
        return [(b"%s%d" % (tag.encode(), i), pool[i % len(pool)]) for i in range(n)]

    def send_single(self, items: list[tuple[bytes, bytes]], delays_ms: list[int]) -> list[bytes]:
        pipeline = self.r.pipeline
        for (msg_id, body), delay in zip(items, delays_ms):
            pipe = pipeline()
            pipe.zadd(b"due", {msg_id: now_ms() + delay})
            pipe.set(b"m:" + msg_id, body)
            pipe.execute()
        return [msg_id for msg_id, _ in items]

    def _send(self, items, due_ms: int, zset: bytes) -> None:
        for i in range(0, len(items), BATCH):
            pipe = self.r.pipeline()
            for msg_id, body in items[i:i + BATCH]:
                pipe.zadd(zset, {msg_id: due_ms})
                pipe.set(b"m:" + msg_id, body)
            pipe.execute()

    def send_batches(self, items: list[tuple[bytes, bytes]], delays_ms: list[int]) -> int:
        for i, delay in zip(range(0, len(items), BATCH), delays_ms):
            self._send(items[i:i + BATCH], now_ms() + delay, b"due")
        return len(items)

    def cancel(self, handles: list[bytes]) -> int:
        cancelled = 0
        for msg_id in handles:
            pipe = self.r.pipeline()
            pipe.zrem(b"due", msg_id)
            pipe.delete(b"m:" + msg_id)
            cancelled += pipe.execute()[0]
        return cancelled

    def load_due(self, items: list[tuple[bytes, bytes]], due_ms: int) -> None:
        self._send(items, due_ms, b"drain")

    def wait_due(self, n: int) -> None:
        pass  # the consumer starts after the due time: every member is due

    def drain(self, n: int) -> None:
        taken, deadline = 0, time.monotonic() + 120 + n / 1000
        while taken < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Redis drain: {taken} of {n} taken")
            taken += len(self.pop_due(keys=[b"drain"], args=[now_ms(), BATCH, b"m:"]))


SYSTEMS = {"rocks-timer": (RocksTimerSystem, None),
           "beanstalkd": (BeanstalkdSystem, ("beanstalkd", "greenstalk", "beanstalkd")),
           "Redis": (RedisSystem, ("redis-server", "redis", "redis-server"))}
VERSION_COMMANDS = {"beanstalkd": ["beanstalkd", "-v"], "Redis": ["redis-server", "--version"]}
