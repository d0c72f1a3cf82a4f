"""The vlog index alone: RocksDB bytes per message of candidate index settings, without bodies.

    python -m bench.index_sim --messages 10000000 --workload month --variants level,universal \\
        --workdir /work/index-sim --out bench/results/index-sim

In the ``vlog`` layout RocksDB holds only the index (ARCHITECTURE §8): key + pointer record. This
replays a workload's index writes the way the store makes them, with the same keys and pointer
records, and nothing else: one WriteBatch of puts per simulated second of sends (1,000
messages), deletes of the due keys in due order (batches of 1,000), a range delete below the
cursor per 100,000 deletes, then a final flush and the wait for compactions to settle. It
measures the WAL, flush and compaction tickers per message, so index settings can be compared
at index sizes a whole-broker cell (value segments, CommitLog) needs hours for. A variant is an
index options builder of :data:`INDEX_VARIANTS`.
"""
from __future__ import annotations

import argparse
import heapq
import json
import shutil
import time
from pathlib import Path

from rocksdict import Rdict, WriteBatch

from bench.workloads import workload
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.profiles import build_options, parse_tickers
from rocksdict import DBCompactionStyle, UniversalCompactOptions

MiB = 1 << 20


def _level(write_buffer_mib: int = 0, dynamic: bool = False):
    def build():
        opts = build_options("blob")
        if write_buffer_mib:
            opts.set_write_buffer_size(write_buffer_mib * MiB)
        if dynamic:
            opts.set_level_compaction_dynamic_level_bytes(True)
        return opts
    return build


def _universal(trigger: int = 4, min_width: int = 2, size_ratio: int = 1, amp: int = 200,
               write_buffer_mib: int = 0):
    def build():
        opts = build_options("universal")
        opts.set_compaction_style(DBCompactionStyle.universal())
        u = UniversalCompactOptions()
        u.size_ratio = size_ratio
        u.min_merge_width = min_width
        u.max_size_amplification_percent = amp
        opts.set_universal_compaction_options(u)
        opts.set_level_zero_file_num_compaction_trigger(trigger)
        opts.set_level_zero_slowdown_writes_trigger(max(20, trigger * 3))
        opts.set_level_zero_stop_writes_trigger(max(36, trigger * 4))
        if write_buffer_mib:
            opts.set_write_buffer_size(write_buffer_mib * MiB)
        return opts
    return build


INDEX_VARIANTS = {
    "level": _level(), "level256": _level(256), "level128": _level(128),
    "leveldyn": _level(dynamic=True),
    "univ": _universal(), "univ8": _universal(8), "univ16": _universal(16),
    "univ16w4": _universal(16, 4), "univ24w8": _universal(24, 8),
    "univ16a400": _universal(16, amp=400), "univ32": _universal(32),
}


def encode_pointer_compact(segment, offset, length, queue_id, body_size, tags) -> bytes:
    """A varint pointer (experiment): version, segment, offset, length, queue id, body size,
    tags length, tags."""
    raw_tags = tags.encode("utf-8") if tags else b""
    out = bytearray(b"\x82")
    for n in (segment, offset, length, (queue_id or 0) & 0xFFFFFFFF, body_size, len(raw_tags)):
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
    return bytes(out) + raw_tags


BATCH = 1_000
RECLAIM_EVERY = 100_000
TICKERS = ("rocksdb.wal.bytes", "rocksdb.flush.write.bytes", "rocksdb.compact.write.bytes")


def _settle(db: Rdict, quiet_s: float = 0.5, timeout_s: float = 600.0) -> None:
    deadline, quiet_since = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        running = sum(db.property_int_value(name) or 0 for name in (
            "rocksdb.num-running-compactions", "rocksdb.num-running-flushes"))
        now = time.monotonic()
        if running:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= quiet_s:
            return
        time.sleep(0.02)


def run(variant: str, name: str, messages: int, workdir: Path, pointer: str = "v1") -> dict:
    path = workdir / f"{name}-{variant}-{pointer}-{messages}"
    shutil.rmtree(path, ignore_errors=True)
    opts = INDEX_VARIANTS[variant]()
    db = Rdict(str(path), opts, column_families={"timer": INDEX_VARIANTS[variant]()})
    timer = db.get_column_family_handle("timer")
    encode = encode_pointer_compact if pointer == "v2" else I.encode_pointer
    pending: list[tuple[int, bytes]] = []  # (due, key) min-heap
    started = time.monotonic()
    deletes = since_reclaim = peak_sst = 0
    offset = 0

    def drain(until_ms: int) -> None:
        nonlocal deletes, since_reclaim
        while pending and pending[0][0] <= until_ms:
            batch = WriteBatch(raw_mode=True)
            last = b""
            for _ in range(min(BATCH, len(pending))):
                if pending[0][0] > until_ms:
                    break
                _, last = heapq.heappop(pending)
                batch.delete(last, timer)
            deletes += len(batch)
            since_reclaim += len(batch)
            db.write(batch)
            if since_reclaim >= RECLAIM_EVERY:
                since_reclaim = 0
                rng = WriteBatch(raw_mode=True)
                rng.delete_range(b"", last, timer)
                db.write(rng)

    batch, second = WriteBatch(raw_mode=True), 0
    for op in workload(name, messages):
        if op.send_ms // 1000 != second:
            db.write(batch)
            batch = WriteBatch(raw_mode=True)
            second = op.send_ms // 1000
            drain(second * 1000)
        key = K.encode_key_parts(op.due_ms, op.topic, op.msg_id)
        value = encode(op.index % 4096, offset % (64 << 20), 1191, 0, op.body_size, None)
        offset += 1191
        batch.put(key, value, timer)
        if op.cancel:
            db.write(batch)
            batch = WriteBatch(raw_mode=True)
            gone = WriteBatch(raw_mode=True)
            gone.delete(key, timer)
            db.write(gone)
            deletes += 1
        else:
            heapq.heappush(pending, (op.due_ms, key))
    db.write(batch)
    sent_s = time.monotonic() - started
    peak_sst = db.property_int_value("rocksdb.live-sst-files-size") or 0
    drain(1 << 62)
    db.flush(True)
    _settle(db)
    counts = parse_tickers(opts.get_statistics())
    final_sst = db.property_int_value("rocksdb.live-sst-files-size") or 0
    del timer
    db.close()
    shutil.rmtree(path, ignore_errors=True)
    row = {"workload": name, "variant": variant, "pointer": pointer, "messages": messages,
           "seconds": round(time.monotonic() - started, 1), "send_seconds": round(sent_s, 1),
           "sst_after_send": peak_sst, "sst_final": final_sst}
    for ticker in TICKERS:
        row[ticker.split(".", 1)[1]] = counts.get(ticker, 0)
        row[ticker.split(".", 1)[1].replace(".bytes", "") + "_per_msg"] = round(
            counts.get(ticker, 0) / messages, 1)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--workload", default="month")
    parser.add_argument("--variants", default="level")
    parser.add_argument("--pointers", default="v1")
    parser.add_argument("--workdir", default="/work/index-sim")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    for variant in args.variants.split(","):
        for pointer in args.pointers.split(","):
            row = run(variant, args.workload, args.messages, Path(args.workdir), pointer)
            print(json.dumps(row), flush=True)
            if args.out:
                Path(args.out).mkdir(parents=True, exist_ok=True)
                with open(Path(args.out) / "rows.jsonl", "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
