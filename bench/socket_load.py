"""Load on the running broker's socket (ARCHITECTURE §4): a connection flood and a stream of junk
lines, while normal clients keep calling it. Loopback only (a Unix socket), bounded in
connections, bytes and time.

    python -m bench.socket_load [--connections 1000] [--junk-mb 100] [--junk-clients 8]
                                [--normal-clients 4] [--time-limit 300]

A real ``rtimer run`` process serves a fresh data dir. Then, at once:
- ``--connections`` connections are opened and held open, silent (the cap admits some, makes
  room by closing the longest idle ones, and refuses the rest with one JSON line);
- ``--junk-clients`` connections send ``--junk-mb`` MB of 1 KiB lines that are not JSON,
  reading the error answers (a client closed by the server reconnects and goes on);
- ``--normal-clients`` threads each connect (as the CLI does: a connection per command) and call
  ``send`` then ``scan`` in turn, ``--normal-pause-ms`` apart, until the junk is sent, timing
  every answer.
A junk client is closed by the broker after 8 undecodable lines in a row and reconnects, so
most junk bytes are dropped with the connection rather than parsed.
Reported: the answers the normal clients got, their latency (max, p99, median), refusals, and
the broker's stderr lines (no traceback allowed). ``ok`` is true when every normal call was
answered, none took longer than ``--max-latency`` (1 s), and the broker stopped cleanly.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.common import percentile, scratch_dir, write_result
from cli.remote import socket_path

ROOT = Path(__file__).resolve().parent.parent
LINE_BYTES = 1024


def start_broker(data: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "--data-dir", str(data), "run",
                             "--grpc-listen", "off", "--remoting-listen", "off"],
                            cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = proc.stdout.readline()
    if "broker running" not in line:
        proc.kill()
        raise RuntimeError(f"rtimer run did not start: {line!r} {proc.stderr.read()}")
    return proc


def connect(path: Path, timeout: float = 10.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(str(path))
    return sock


def flood(path: Path, n: int, held: list, stats: dict) -> None:
    for _ in range(n):
        try:
            held.append(connect(path))
            stats["flood_opened"] += 1
        except OSError:
            stats["flood_connect_errors"] += 1


def junk(path: Path, total_bytes: int, seed: int, stats: dict, lock: threading.Lock) -> None:
    rng = random.Random(seed)
    alphabet = b"abcdefghijklmnopqrstuvwxyz{}[]:,\"0123456789 "
    line = bytes(rng.choice(alphabet) for _ in range(LINE_BYTES - 1)) + b"\n"
    block = line * 64
    sent = 0
    while sent < total_bytes:
        try:
            sock = connect(path)
        except OSError:
            with lock:
                stats["junk_connect_errors"] += 1
            continue
        done = threading.Event()
        replies = [0]

        def drain() -> None:
            try:
                while chunk := sock.recv(1 << 16):
                    replies[0] += chunk.count(b"\n")
            except OSError:
                pass
            done.set()

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        try:
            while sent < total_bytes:
                sock.sendall(block)
                sent += len(block)
        except OSError:
            with lock:
                stats["junk_reconnects"] += 1
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        done.wait(30)
        sock.close()
        with lock:
            stats["junk_replies"] += replies[0]
    with lock:
        stats["junk_bytes"] += sent


def normal(path: Path, until: threading.Event, latencies: list, stats: dict,
           lock: threading.Lock, deadline: float, pause_s: float) -> None:
    calls = [{"op": "send", "args": {"topic": "load", "body": "hello", "delay_ms": 3_600_000}},
             {"op": "scan", "args": {"limit": 5}}]
    i = 0
    while (not until.is_set() or i < 4) and time.monotonic() < deadline:
        request = calls[i % 2]
        i += 1
        start = time.perf_counter()
        try:
            with connect(path) as sock:
                sock.sendall(json.dumps(request).encode() + b"\n")
                reply = sock.makefile("rb").readline()
            answer = json.loads(reply)
            ok = answer.get("ok") is True
        except (OSError, ValueError):
            ok = False
        elapsed = time.perf_counter() - start
        with lock:
            latencies.append(elapsed)
            stats["normal_ok" if ok else "normal_failed"] += 1
        until.wait(pause_s)  # a command line's pace, not a tight loop


def run(connections: int, junk_mb: float, junk_clients: int, normal_clients: int,
        time_limit: float, seed: int, pause_s: float = 0.01) -> dict:
    stats = {k: 0 for k in ("flood_opened", "flood_connect_errors", "junk_bytes", "junk_replies",
                            "junk_reconnects", "junk_connect_errors", "normal_ok",
                            "normal_failed")}
    lock = threading.Lock()
    latencies: list[float] = []
    held: list[socket.socket] = []
    with scratch_dir(prefix="socket-load-") as d:
        data = d / "data"
        proc = start_broker(data)
        err_chunks: list[str] = []  # read as it comes: a full pipe would block the broker's log
        err_reader = threading.Thread(target=lambda: err_chunks.extend(proc.stderr), daemon=True)
        err_reader.start()
        path = socket_path(data)
        deadline = time.monotonic() + time_limit
        started = time.perf_counter()
        try:
            junk_done = threading.Event()
            per_client = int(junk_mb * 1e6 / max(1, junk_clients))
            threads = [threading.Thread(target=flood, args=(path, connections, held, stats))]
            junkers = [threading.Thread(target=junk, args=(path, per_client, seed + k, stats, lock))
                       for k in range(junk_clients)]
            normals = [threading.Thread(target=normal, args=(path, junk_done, latencies, stats,
                                                             lock, deadline, pause_s))
                       for _ in range(normal_clients)]
            for thread in threads + junkers + normals:
                thread.daemon = True
                thread.start()
            for thread in threads + junkers:
                thread.join(max(0.0, deadline - time.monotonic()))
            junk_done.set()
            for thread in normals:
                thread.join(max(0.0, deadline - time.monotonic()) + 5)
            elapsed = time.perf_counter() - started
        finally:
            for sock in held:
                sock.close()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            out = proc.stdout.read()
            err_reader.join(10)
            err = "".join(err_chunks)
    err_lines = [line for line in err.splitlines() if line.strip()]
    return {**stats, "seconds": round(elapsed, 2), "timed_out": time.monotonic() > deadline,
            "normal_calls": len(latencies),
            "latency_max_s": round(max(latencies), 4) if latencies else None,
            "latency_p99_s": round(percentile(latencies, 99), 4) if latencies else None,
            "latency_median_s": round(percentile(latencies, 50), 4) if latencies else None,
            "broker_exit": proc.returncode, "broker_stopped_cleanly": "stopped cleanly" in out,
            "broker_stderr_lines": len(err_lines), "broker_tracebacks": err.count("Traceback"),
            "broker_stderr_sample": err_lines[:5]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.socket_load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--junk-mb", type=float, default=100.0)
    parser.add_argument("--junk-clients", type=int, default=8)
    parser.add_argument("--normal-clients", type=int, default=4)
    parser.add_argument("--normal-pause-ms", type=float, default=10.0,
                        help="pause of a normal client between two calls")
    parser.add_argument("--max-latency", type=float, default=1.0)
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    result = run(args.connections, args.junk_mb, args.junk_clients, args.normal_clients,
                 args.time_limit, args.seed, args.normal_pause_ms / 1000)
    result["ok"] = (result["normal_failed"] == 0 and result["normal_calls"] > 0
                    and not result["timed_out"] and result["broker_tracebacks"] == 0
                    and result["broker_exit"] == 0
                    and result["latency_max_s"] <= args.max_latency)
    path = write_result("socket_load", {"args": vars(args) | {"results_dir": None},
                                        "result": result}, args.results_dir)
    print(f"{result['flood_opened']} connections held, {result['junk_bytes'] / 1e6:.1f} MB of "
          f"junk in {result['junk_replies']:,} answered lines, {result['normal_calls']} normal "
          f"calls ({result['normal_failed']} failed): latency max {result['latency_max_s']} s, "
          f"p99 {result['latency_p99_s']} s, median {result['latency_median_s']} s; "
          f"{result['seconds']} s; broker stderr {result['broker_stderr_lines']} lines, "
          f"{result['broker_tracebacks']} tracebacks; ok={result['ok']}")
    print(f"results: {path}", file=sys.stderr)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
