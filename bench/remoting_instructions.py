"""Instructions the remoting front executes per SEND_MESSAGE_V2 on its own thread, counted by
valgrind's callgrind: executed instructions do not depend on what else the machine runs, so a
change of a few per cent shows here where a timing on a busy 2-vCPU machine cannot show it.

    python -m bench.remoting_instructions [--sends 2000] [--timer] [--client-id-digits 56]

A child process opens a fresh broker under a manual clock (no timer work in the background),
builds ``--sends`` request frames as the Java 4.9.8 client writes them (``bench.remoting_latency``'s
``send_request``: a JSON header with the V2 one-letter fields, a 256-byte body), sends 200 of
them untimed, then runs the rest inside ``functools.reduce``, and callgrind counts only what that
thread executes inside it (``--toggle-collect=functools_reduce``, threads apart). Each send is
what a connection does with a read that brought one request (with ``--timer``, each a timer
message due a minute later, ``TIMER_DELIVER_MS``, which the broker routes to the timer engine):
``Connection.data_received`` (the frame and its JSON header, the checks, the message,
``Broker.send_batch``, the reply, its encoding and its write to the transport, here a list;
every reply is checked after the run). The send must be answered without waiting (``async``
flush: the store runs on the calling thread), as the front answers it within the read that
brought it. Not counted: the event loop's own work per read and the socket calls (the
kernel's). Until session 35 the count was ``split_frames`` + ``handle_sends`` + ``encode``
alone, without the connection's own work (a few thousand instructions). Results: bench/results/remoting-instructions.json
(``-timer.json`` with ``--timer``). Needs ``valgrind`` (``make valgrind``).
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import RESULTS, scratch_dir, write_result
from bench.remoting_latency import send_request
from rocks_timer import Broker, BrokerConfig, ManualClock
from rocks_timer.remoting.connection import Connection, ConnectionLimits, split_frames
from rocks_timer.remoting.server import MAX_IN_FLIGHT
from rocks_timer.remoting.service import RemotingService

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_800_000_000_000
WARM = 200


class Transport:
    """What a ``Connection`` writes its replies to here: kept, so each is checked after the
    counted run (a socket's own work is the kernel's, which callgrind does not count)."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 1) if name == "peername" else None

    def close(self) -> None:
        raise RuntimeError("the connection closed: a frame did not parse")


def client_id(i: int, digits: int) -> str:
    """The ``i``-th client message id: 32 hex digits (a client host with a private IPv4
    address), or 56 as the Java client makes them on a host with only an IPv6 one (the
    benchmark machine's: the front then stores under an id derived from it)."""
    if digits == 56:
        return f"FD000000000000000000000000000002{0x1A2B:04X}{0x5F2A18B4:08X}{i:012X}"
    return f"0A000001000000000000{i:012X}"


def child(n: int, timer: bool = False, digits: int = 32) -> None:
    """Run ``n`` sends inside ``functools.reduce`` (what callgrind counts)."""
    due = T0 + 60_000 if timer else None
    frames = [send_request(i, "BenchInstructions", bytes(256), client_id(i, digits), due)
              for i in range(1, WARM + n + 1)]
    with scratch_dir(prefix="remoting-ir-") as d:
        broker = Broker.open(d / "b", BrokerConfig(), clock=ManualClock(T0))

        async def run() -> None:
            with ThreadPoolExecutor(2) as pool:
                service = RemotingService(broker, pool, "127.0.0.1", 9876, "bench", "cluster")
                conn = Connection(None, service, ConnectionLimits(MAX_IN_FLIGHT, 180.0, 60.0))
                conn.transport = transport = Transport()

                def one(count: int, frame: bytes) -> int:
                    conn.data_received(frame)  # split, answer (stored at once), reply written
                    return count + 1
                functools.reduce(one, frames[:WARM], 0)  # first calls fill caches
                functools.reduce(one, frames[WARM:], 0)
                if conn.tasks or conn.in_flight:
                    raise RuntimeError("a send waited: not the path the front answers at once")
                replies, _, junk = split_frames(bytearray(b"".join(transport.written)))
                if junk is not None or len(replies) != len(frames):
                    raise RuntimeError(f"{len(replies)} replies to {len(frames)} sends ({junk})")
                for reply in replies:
                    if reply.code != 0:
                        raise RuntimeError(f"a send answered {reply.code}: {reply.remark}")
        asyncio.run(run())
        broker.close()
    print(n)


def count(n: int, timer: bool, digits: int = 32) -> int:
    """Instructions the child's sending thread executed inside ``reduce`` (both reduces: the
    warm-up's are subtracted by running twice, with ``n`` and ``2 n``)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RuntimeError("valgrind is not installed (apt-get install -y valgrind)")
    with tempfile.TemporaryDirectory(prefix="remoting-ir-") as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run([valgrind, "--tool=callgrind", "--collect-atstart=no",
                        "--separate-threads=yes", "--toggle-collect=functools_reduce",
                        f"--callgrind-out-file={out}", sys.executable, "-m",
                        "bench.remoting_instructions", "--child", str(n),
                        "--client-id-digits", str(digits), *(["--timer"] if timer else [])],
                       cwd=ROOT, check=True, capture_output=True, text=True,
                       env={**os.environ, "PYTHONHASHSEED": "0"})  # same dict probes
        main_thread = Path(f"{out}-01")
        found = re.search(r"^(?:summary|totals): (\d+)", main_thread.read_text(), re.M)
        if found is None:
            raise RuntimeError("callgrind wrote no totals")
        return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=2_000, help="sends counted")
    parser.add_argument("--timer", action="store_true",
                        help="timer messages (TIMER_DELIVER_MS a minute ahead)")
    parser.add_argument("--client-id-digits", type=int, choices=[32, 56], default=32,
                        help="the client's UNIQ_KEY: 32 hex digits (default, as before) or 56, "
                             "as the Java client makes them on this machine")
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child, args.timer, args.client_id_digits)
        return 0
    once = count(args.sends, args.timer, args.client_id_digits)
    twice = count(2 * args.sends, args.timer, args.client_id_digits)
    per_send = round((twice - once) / args.sends)
    kind = "timer" if args.timer else "plain"
    result = {"sends": args.sends, "messages": kind, "client_id_digits": args.client_id_digits,
              "instructions_per_send": per_send,
              "path": "Connection.data_received with one SEND_MESSAGE_V2 of 256 B as the "
                      "Java 4.9.8 client writes it (split, answer, encode, write)"}
    name = "remoting-instructions" + ("-timer" if args.timer else "") + \
        ("-id56" if args.client_id_digits == 56 else "")
    path = write_result(name, result, args.results_dir or RESULTS)
    print(f"remoting front, one SEND_MESSAGE_V2 ({kind} messages): {per_send:,} instructions "
          f"per send (callgrind, {args.sends} and {2 * args.sends} sends)")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
