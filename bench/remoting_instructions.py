"""Instructions the remoting front executes per SEND_MESSAGE_V2 on its own thread, counted by
valgrind's callgrind: executed instructions do not depend on what else the machine runs, so a
change of a few per cent shows here where a timing on a busy 2-vCPU machine cannot show it.

    python -m bench.remoting_instructions [--sends 2000]

A child process opens a fresh broker under a manual clock (no timer work in the background),
builds ``--sends`` request frames as the Java 4.9.8 client writes them (``bench.remoting_latency``'s
``send_request``: a JSON header with the V2 one-letter fields, a 256-byte body), sends 200 of
them untimed, then runs the rest inside ``functools.reduce``, and callgrind counts only what that
thread executes inside it (``--toggle-collect=functools_reduce``, threads apart). Each send is
the path a connection runs for a request read alone: ``split_frames`` (the frame and its JSON
header), ``RemotingService.handle_sends`` (checks, the message, ``Broker.send_batch``, the reply)
and the reply's ``encode``. The send must be answered without waiting (``async`` flush: the store
runs on the calling thread), as the front answers it within the read that brought it. Not
counted: the event loop's own work per read and the socket calls (the kernel's). Results:
bench/results/remoting-instructions.json. Needs ``valgrind`` (``make valgrind``).
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
from rocks_timer.remoting.connection import split_frames
from rocks_timer.remoting.service import RemotingService

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_800_000_000_000
WARM = 200


def child(n: int) -> None:
    """Run ``n`` sends inside ``functools.reduce`` (what callgrind counts)."""
    frames = [bytearray(send_request(i, "BenchInstructions", bytes(256),
                                     f"0A000001000000000000{i:012X}"))
              for i in range(1, WARM + n + 1)]
    with scratch_dir(prefix="remoting-ir-") as d:
        broker = Broker.open(d / "b", BrokerConfig(), clock=ManualClock(T0))

        async def run() -> None:
            with ThreadPoolExecutor(2) as pool:
                service = RemotingService(broker, pool, "127.0.0.1", 9876, "bench", "cluster")

                def one(count: int, frame: bytearray) -> int:
                    commands, _, junk = split_frames(frame)
                    answering = service.handle_sends(None, commands)
                    try:
                        answering.send(None)
                    except StopIteration as done:
                        [reply] = done.value
                        if reply.code != 0:
                            raise RuntimeError(f"a send answered {reply.code}: {reply.remark}")
                        reply.encode()
                        return count + 1
                    answering.close()
                    raise RuntimeError("a send waited: not the path the front answers at once")
                functools.reduce(one, frames[:WARM], 0)  # first calls fill caches
                functools.reduce(one, frames[WARM:], 0)
        asyncio.run(run())
        broker.close()
    print(n)


def count(n: int) -> int:
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
                        "bench.remoting_instructions", "--child", str(n)],
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
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child)
        return 0
    once, twice = count(args.sends), count(2 * args.sends)
    per_send = round((twice - once) / args.sends)
    result = {"sends": args.sends, "instructions_per_send": per_send,
              "path": "split_frames + RemotingService.handle_sends + encode, one "
                      "SEND_MESSAGE_V2 of 256 B as the Java 4.9.8 client writes it"}
    path = write_result("remoting-instructions", result, args.results_dir or RESULTS)
    print(f"remoting front, one SEND_MESSAGE_V2: {per_send:,} instructions per send "
          f"(callgrind, {args.sends} and {2 * args.sends} sends)")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
