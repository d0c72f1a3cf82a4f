"""Scale model of write amplification: bytes per message from a delay distribution and body size.

    python -m spark.wa_model --cells bench/results/wa/cells.parquet [--day-messages 1000000000]

Per engine, each component of the bytes a message costs is a simple mechanism with one
coefficient fitted from the measured cells (ratios of sums, so no component can go negative):

- CommitLog delivery + ConsumeQueue (all engines): (payload + record header) x (1 - cancelled);
- ``rocksdb`` (the inline layout): WAL = a_wal x payload (the put and the delete); flush =
  a_flush x payload x P(delay > L), where L = memtable lifetime = write buffer / (rate x
  payload): a key deleted before its memtable is flushed is never flushed or compacted (L is
  half the time to fill a memtable); compaction = payload x (P(delay > L) + P(cancelled)) x
  (c0 + c1 x log10(LSM GB)), a line in the decades of size fitted by least squares
  (``compaction_law``; a cancel is a delete, and the reclaim compacts per 100,000 deletes);
  the LSM holds every flushed message in a
  fill-and-drain bench cell, and the pending messages (Little's law) in a steady-state day;
- ``wheel``: CommitLog timer topic = R x (1 + rolls(delay)) (+ a marker per cancel), TimerLog =
  52 B x (1 + rolls), slot pages = a_slots x 4 KiB x the distinct (flush interval, page) pairs
  the enqueues touch, simulated from the messages (``spark.wheel_pages``: the send rate, the
  flush interval and where rolls land decide how many enqueues share a page), + a checkpoint
  per tick, with rolls(d) the wheel's own roll rule (park at W, or W/2 when overshooting by less
  than W/3);
- ``levels``: SCHEDULE_TOPIC_XXXX = a_level x R.
- ``vlog`` (the RocksDB engine's vlog layout, cells with profile ``vlog``): value segments =
  a_body x payload (written once); the index costs bytes per *message*, not per payload byte:
  WAL = a_iwal (pointer put + delete), flush = a_iflush x P(delay > L), compaction = a_icomp x
  P(delay > L) x log10(index bytes / 4 write buffers), fitted on cells of one index
  compaction (``vlog_index_compaction``: universal since issue 12's scale work, so the cells
  must be measured with it); relocation = a_reloc x payload x R(θ).
  Arrival segments hold one delay class each (a factor of 1.5 wide), so a segment is relocated
  only when cancels left it below θ at its sealing (later it is past the middle of its life,
  which the engine never relocates): R(θ) = sum over classes of share x (1 - cancelled) where
  1 - cancelled < θ. Space in a steady state: a body stays on disk from its write until its
  class segment dies, on average s/2 + hi (s = how long the segment stays open: a quarter of
  the class's shortest delay, or its fill time if shorter; hi = the class's longest delay), or
  until its relocation and then its due day's end; space = that / E[delay].

Validation is leave-one-workload-out: every measured cell is predicted from coefficients fitted
on the other workloads' cells. The fitted model is then applied in Spark to a synthetic day
(``spark.range`` with a delay column drawn per row from a workload mix) to report bytes written
per day and the disk each engine needs (CommitLog retention + what the engine keeps pending).
Writes ``model.md`` and ``model.json`` next to the cells.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Sequence

from bench.workloads import (CANCEL_FRACTION, DAY_MS, DEFAULT_RATE_PER_S, LEVEL_DELAYS_MS, SPECS,
                             workload)
from spark import wheel_pages

ROLL_WINDOW_MS = 2 * DAY_MS
WRITE_BUFFER = 64 << 20
KEY_BYTES = 40
CQ_ENTRY = 20
TIMERLOG_UNIT = 52
WHEEL_FILE = 2 * 7 * 864_000 * 32  # 2 x 7 days of 100 ms slots x 32 B
RETENTION_DAYS = 3  # file_reserved_hours = 72
ROCKS_SPACE_AMP = 1.1  # leveled compaction, dynamic level bytes: assumed, not fitted
INDEX_ENTRY = 80  # vlog index entry on disk: 40 B key + 27 B pointer + tags, before lz4
SEGMENT_BYTES = 64 << 20  # vlog_segment_bytes
THETA = 0.25  # vlog_reclaim_live_pct of the measured cells
MIN_PINNED_MS = 6 * 3_600_000  # vlog_reclaim_min_pinned_sec of the measured cells
THETAS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.95)
MAX_ROLLS = 40
PAGE = 4096
DEFAULT_MIX = "short=0.5,day=0.3,month=0.1,cancel=0.1"


def rolls_for(delay_ms: float, window_ms: int = ROLL_WINDOW_MS) -> int:
    """How many times the wheel rolls a message of ``delay_ms`` (its enqueue rule)."""
    n, rest = 0, delay_ms
    while rest >= window_ms and n < MAX_ROLLS:
        rest -= window_ms // 2 if rest - window_ms < window_ms // 3 else window_ms
        n += 1
    return n


def memtable_lifetime_ms(rate_per_s: float, payload: float) -> float:
    """How long a message must stay pending to be flushed: half the time to fill a memtable
    (a message lands on average half-way through its memtable's life)."""
    return WRITE_BUFFER / max(1.0, rate_per_s * (payload + KEY_BYTES)) * 1000 / 2


def compaction_levels(pending_bytes: float) -> float:
    """Levels below L0 that long-lived data is pushed through: log10 of the pending bytes over
    the L0 trigger (4 memtables); 0 while everything fits in L0 (no compaction ran then)."""
    return max(0.0, math.log10(max(1.0, pending_bytes) / (4 * WRITE_BUFFER)))


def peak_pending_fraction(name: str, messages: int, body_size: int, seed: int) -> float:
    """The largest share of a workload pending at once (sent, not yet due or cancelled)."""
    events: list[tuple[int, int]] = []
    for op in workload(name, messages, body_size, seed):
        events.append((op.send_ms, 1))
        events.append((op.send_ms if op.cancel else op.due_ms, -1))
    events.sort()
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak / max(1, messages)


def workload_features(name: str, body_size: int, seed: int = 7, sample: int = 20_000,
                      rate_per_s: float = DEFAULT_RATE_PER_S, overhead: float = 80.0,
                      messages: int | None = None, shards: int = 1,
                      wheel: bool = False) -> dict[str, float]:
    """Mean per-message features of a measured workload, from a sample of its delays, and the
    compaction depth of one store (``messages`` split over ``shards`` brokers); with ``wheel``,
    the slot pages its wheel cells dirtied, simulated from every operation of the cell."""
    ops = list(workload(name, sample, body_size, seed))
    payload = body_size + overhead
    life = memtable_lifetime_ms(rate_per_s, payload)
    n = len(ops)
    total = messages or sample
    long = sum(op.delay_ms > life for op in ops if not op.cancel) / n
    pending = peak_pending_fraction(name, total, body_size, seed) * total * payload / shards
    # a fill-and-drain run never compacts deletes away before the end: its LSM holds every
    # flushed (long-lived) message, so that volume sets how deep compaction goes
    flushed = long * total * payload / shards
    index_life = memtable_lifetime_ms(rate_per_s, INDEX_ENTRY - KEY_BYTES)
    return {"reloc": relocated_share(class_table(workload_classes(ops), rate_per_s, payload,
                                                 THETA)),
            "ilong": sum(op.delay_ms > index_life for op in ops if not op.cancel) / n,
            "ilevels": compaction_levels(long * total * INDEX_ENTRY / shards),
            "pages": wheel_pages.cell_pages(name, total, body_size, seed, shards) if wheel
            else 0.0,
            "cancel": sum(op.cancel for op in ops) / n,
            "rolls": sum(rolls_for(op.delay_ms) for op in ops if not op.cancel) / n,
            "long": long, "levels": compaction_levels(flushed), "pending_bytes": pending,
            "lsm_gb": flushed / 1e9,
            "lsm_bytes": flushed}


def delay_class(delay_ms: float) -> int:
    """The engine's arrival class (rocks_timer.timer.rocksdb.vlog.liveness.delay_class)."""
    from rocks_timer.timer.rocksdb.vlog.liveness import delay_class as engine_class
    return engine_class(int(delay_ms))


def class_span_ms(cls: int) -> tuple[float, float]:
    """(shortest, longest) delay of a class."""
    from rocks_timer.timer.rocksdb.vlog.liveness import CLASS_BOUNDS, class_low_ms
    return float(class_low_ms(cls)), float(CLASS_BOUNDS[cls])


def class_table(classes: dict[int, tuple[int, int]], rate: float, payload: float,
                theta: float) -> list[dict[str, float]]:
    """Per class (count, cancelled): share, open time s, whether it is relocated at θ."""
    total = sum(n for n, _ in classes.values()) or 1
    out = []
    for cls, (n, cancelled) in sorted(classes.items()):
        lo, hi = class_span_ms(cls)
        share = n / total
        fill_ms = SEGMENT_BYTES / max(1.0, rate * payload * share) * 1000
        open_ms = min(max(1000.0, lo / 4), fill_ms)
        live = 1 - cancelled / n if n else 1.0
        out.append({"class": cls, "share": share, "open_ms": open_ms, "hi_ms": hi,
                    "live": live, "relocated": theta > 0 and live < theta})
    return out


def relocated_share(classes: list[dict[str, float]]) -> float:
    """R(θ): the share of all messages a vlog store relocates (see the module docstring)."""
    return sum(c["share"] * c["live"] for c in classes if c["relocated"])


def space_amp(classes: list[dict[str, float]], mean_delay_ms: float,
              relocated_delay_ms: float) -> float:
    """Steady-state disk of the value segments over the live payload (module docstring)."""
    disk = 0.0
    for c in classes:
        if c["relocated"]:
            disk += c["share"] * c["open_ms"]
        else:
            disk += c["share"] * (c["open_ms"] / 2 + c["hi_ms"])
    disk += relocated_delay_ms
    return disk / max(1.0, mean_delay_ms)


def workload_classes(ops) -> dict[int, tuple[int, int]]:
    classes: dict[int, list[int]] = {}
    for op in ops:
        entry = classes.setdefault(delay_class(op.delay_ms), [0, 0])
        entry[0] += 1
        entry[1] += int(op.cancel)
    return {k: (v[0], v[1]) for k, v in classes.items()}


def compaction_law(cells) -> dict[str, float]:
    """The inline store's compaction bytes per flushed payload byte as a straight line in the
    decades of the LSM's size (c0 + c1 x log10(LSM GB)), fitted by least squares over the cells
    that compacted: leveled compaction of random keys costs about a rewrite per level per
    tenfold of store size, and the engine's reclaim forces a compaction below the cursor every
    100,000 deletes (deliveries and cancels alike), which starts the cost below the size where
    the log law alone would."""
    import numpy as np
    x = np.log10(cells["f_lsm_gb"].to_numpy(dtype=float))
    y = (cells["rocks_compaction"] / (cells["payload_bytes"] * (cells["f_long"]
                                                                + cells["f_cancel"]))).to_numpy(
        dtype=float)
    if len(set(np.round(x, 6))) < 2:
        return {"rocks_compaction": float(y.mean()) if len(y) else 0.0,
                "rocks_compaction_per_decade": 0.0}
    slope, intercept = np.polyfit(x, y, 1)
    return {"rocks_compaction": float(intercept), "rocks_compaction_per_decade": float(slope)}


def fit(cells) -> dict[str, float]:
    """Coefficients (ratios of sums over ``cells``, a pandas frame of aggregated cells)."""
    def ratio(mask, num, den) -> float:
        d = float(den[mask].sum())
        return float(num[mask].sum()) / d if d > 0 else 0.0
    c = cells
    msgs, payload = c["messages"], c["payload_bytes"]
    per_msg = payload / msgs
    cancel, long = c["f_cancel"], c["f_long"]
    delivered_payload = per_msg * c["delivered"]
    rocks, wheel, levels = (c["engine"] == "rocksdb"), (c["engine"] == "wheel"), \
        (c["engine"] == "levels")
    vlog = c["engine"] == "vlog"
    everyone = c["engine"] == c["engine"]
    header = ratio(everyone, c["cl_delivery"] - delivered_payload, c["delivered"])
    marked = wheel & (cancel > 0)
    return {
        "record_header": header,
        "rocks_wal": ratio(rocks, c["rocks_wal"], payload),
        "rocks_flush": ratio(rocks, c["rocks_flush"], payload * long),
        **compaction_law(c[rocks & (c["rocks_compaction"] > 0) & (c["f_lsm_gb"] > 0)]),
        "wheel_roll_record": ratio(wheel & (c["rolls"] > 0), c["wheel_rolls"],
                                   c["rolls"] * per_msg) or None,
        "wheel_marker": ratio(marked, c["cl_timer_topic"] - c["wheel_rolls"] - payload
                              - header * msgs, msgs * cancel) or None,
        "wheel_slots": ratio(wheel, c["wheel_slots"],
                             msgs * PAGE * c["f_pages"]),
        "wheel_checkpoint_per_tick": ratio(wheel, c["wheel_checkpoint"], c["ticks"]),
        "level": ratio(levels, c["cl_level_topic"], payload) or None,
        "vlog_body": ratio(vlog, c["rocks_vlog"], payload) or None,
        "vlog_index_wal": ratio(vlog, c["rocks_wal"], msgs) or None,
        "vlog_index_flush": ratio(vlog, c["rocks_flush"], msgs * c["f_ilong"]) or None,
        "vlog_index_compaction": ratio(vlog, c["rocks_compaction"],
                                       msgs * c["f_ilong"] * c["f_ilevels"]) or None,
        "vlog_relocation": ratio(vlog, c["rocks_relocation"], payload * c["f_reloc"]) or None,
        "physical_per_logical_vlog": ratio(vlog, c["physical_bytes"], c["logical_bytes"]),
        "physical_per_logical_rocksdb": ratio(rocks, c["physical_bytes"], c["logical_bytes"]),
        "physical_per_logical_wheel": ratio(wheel, c["physical_bytes"], c["logical_bytes"]),
        "physical_per_logical_levels": ratio(levels, c["physical_bytes"], c["logical_bytes"]),
    }


def predict_per_message(engine: str, coef: dict[str, Any], payload: float, cancel: float,
                        rolls: float, long: float, pages: float = 0.0,
                        ticks_per_msg: float = 0.0, levels: float = 0.0, reloc: float = 0.0,
                        ilevels: float = 0.0, ilong: float = 0.0, lsm_gb: float = 0.0) -> float:
    """Predicted logical bytes per sent message (means over the workload)."""
    record = payload + coef["record_header"]
    base = (1 - cancel) * (record + CQ_ENTRY)
    if engine == "vlog":
        return (base + (coef.get("vlog_body") or 1.0) * payload
                + (coef.get("vlog_index_wal") or 0.0)
                + (coef.get("vlog_index_flush") or 0.0) * ilong
                + (coef.get("vlog_index_compaction") or 0.0) * ilong * ilevels
                + (coef.get("vlog_relocation") or 1.0) * payload * reloc)
    if engine == "rocksdb":
        return (base + coef["rocks_wal"] * payload + coef["rocks_flush"] * payload * long
                + payload * (long + cancel) * max(0.0, coef["rocks_compaction"] + coef.get(
                    "rocks_compaction_per_decade", 0.0) * math.log10(max(lsm_gb, 1e-9))))
    if engine == "wheel":
        roll_record = coef["wheel_roll_record"] * payload if coef.get("wheel_roll_record") \
            else record
        marker = coef.get("wheel_marker") or 0.3 * record
        timer_topic = record + rolls * roll_record + cancel * marker
        return (base + timer_topic + CQ_ENTRY * (1 + rolls + cancel)
                + TIMERLOG_UNIT * (1 + rolls + cancel)
                + (coef["wheel_slots"] or 1.0) * PAGE * pages
                + coef["wheel_checkpoint_per_tick"] * ticks_per_msg)
    if engine == "levels":
        return base + (coef["level"] * payload if coef.get("level") else record) + CQ_ENTRY
    raise ValueError(f"no model for engine {engine!r}")


def validate(cells) -> list[dict[str, Any]]:
    """Leave-one-workload-out: each cell predicted from a fit on the other workloads."""
    out = []
    for _, row in cells.iterrows():
        coef = fit(cells[cells["workload"] != row["workload"]])
        payload = row["payload_bytes"] / row["messages"]
        pred = predict_per_message(row["engine"], coef, payload, row["f_cancel"], row["f_rolls"],
                                   row["f_long"], row["f_pages"], row["ticks"] / row["messages"],
                                   row["f_levels"], row["f_reloc"],
                                   row["f_ilevels"], row["f_ilong"],
                                   row["f_lsm_gb"]) * row["messages"]
        out.append({"engine": row["engine"], "workload": row["workload"],
                    "profile": row["profile"], "body_size": int(row["body_size"]),
                    "messages": int(row["messages"]),
                    "measured_logical": int(row["logical_bytes"]),
                    "predicted_logical": int(pred),
                    "error": (pred - row["logical_bytes"]) / row["logical_bytes"]})
    return out


def synthetic_day(spark, n: int, mix: dict[str, float], seed: int):
    """``n`` messages of one day as a Spark range: class, delay_ms and cancel columns."""
    from pyspark.sql import functions as F
    df = spark.range(n).withColumn("c", F.rand(seed)).withColumn("u", F.rand(seed + 1))
    delay = None
    cum = 0.0
    for name, share in mix.items():
        cum += share
        spec = SPECS[name]
        u = F.col("u")
        if name == "short":
            lo, hi = math.log(spec.low_ms), math.log(spec.high_ms)
            d = F.exp(F.lit(lo) + u * (hi - lo))
        elif name == "levels":
            d = F.element_at(F.array(*[F.lit(x) for x in LEVEL_DELAYS_MS]),
                             (u * len(LEVEL_DELAYS_MS)).cast("int") + 1)
        elif name == "burst":
            d = F.lit(60_000.0) + u * 1000
        else:
            d = F.lit(float(spec.low_ms)) + u * float(spec.high_ms - spec.low_ms)
        cond = F.col("c") < cum
        delay = F.when(cond, d) if delay is None else delay.when(cond, d)
    df = df.withColumn("delay_ms", delay.otherwise(F.lit(60_000.0)))
    cancel_share = mix.get("cancel", 0.0)  # parse_mix puts the cancel class last
    is_cancel_class = F.col("c") >= 1.0 - cancel_share if cancel_share else F.lit(False)
    return df.withColumn("cancelled", is_cancel_class & (F.rand(seed + 2) < CANCEL_FRACTION))


def rolls_column(delay):
    """``rolls_for`` as one Spark expression: full windows while at least 4W/3 remains, then
    one half-window roll if what is left is still >= W."""
    from pyspark.sql import functions as F
    w = float(ROLL_WINDOW_MS)
    full = F.when(delay >= 4 * w / 3, F.floor((delay - 4 * w / 3) / w) + 1).otherwise(F.lit(0))
    rest = delay - full * w
    return full + (rest >= w).cast("int")


def project(spark, coef: dict[str, Any], n: int, mix: dict[str, float], body_size: int,
            overhead: float, seed: int) -> dict[str, Any]:
    """Bytes written per day and disk needed per engine for ``n`` messages a day (Spark)."""
    from pyspark.sql import functions as F
    payload = body_size + overhead
    rate = n / 86_400
    life = memtable_lifetime_ms(rate, payload)
    df = synthetic_day(spark, n, mix, seed)
    cancel = F.col("cancelled").cast("double")
    rolls = rolls_column(F.col("delay_ms")) * (1 - cancel)
    long = ((F.col("delay_ms") > life).cast("double")) * (1 - cancel)
    agg = df.agg(F.count("*").alias("n"), F.sum(cancel).alias("cancelled"),
                 F.sum(rolls).alias("rolls"), F.sum(long).alias("long"),
                 F.sum(F.col("delay_ms") * (1 - cancel)).alias("delay_ms_sum")).first()
    count = agg["n"]
    # a minute of the day's sends (at least 20,000), every enqueue of theirs, one flush a second
    minute = df.sample(False, min(1.0, max(20_000, rate * 60) / count), seed + 3) \
        .select("delay_ms", "cancelled").toPandas()
    pages = wheel_pages.steady_pages_per_message(minute["delay_ms"].to_numpy().astype("int64"),
                                                 minute["cancelled"].to_numpy(dtype=bool), rate)
    pending_bytes = agg["delay_ms_sum"] / 86_400_000 * payload  # Little's law, steady state
    means = {"cancel": agg["cancelled"] / count, "rolls": agg["rolls"] / count,
             "long": agg["long"] / count,
             "pages": pages,
             "ticks_per_msg": 86_400 / count,  # one wheel flush per second
             "levels": compaction_levels(pending_bytes), "lsm_gb": pending_bytes / 1e9}
    vlog_means, theta_table = vlog_features(df, rate, pending_bytes / payload, payload)
    out: dict[str, Any] = {"messages_per_day": count, "payload_per_message": payload,
                           "memtable_lifetime_ms": life, "pending_bytes": pending_bytes,
                           "features": means, "engines": {}}
    engines = ["rocksdb", "vlog", "wheel"]
    if all(SPECS[name].level_shaped for name in mix):  # levels cannot express other delays
        engines.append("levels")
    for engine in engines:
        if engine == "vlog":
            for row in theta_table:
                row["wa_logical"] = predict_per_message(
                    "vlog", coef, payload, **means, **vlog_means, reloc=row["relocated"]) / payload
            out["theta_table"] = theta_table
            chosen = next(r for r in theta_table if r["theta"] == THETA)
            per_msg = predict_per_message("vlog", coef, payload, **means, **vlog_means,
                                          reloc=chosen["relocated"])
        else:
            per_msg = predict_per_message(engine, coef, payload, **means)
        logical = per_msg * count
        phys = logical * (coef.get(f"physical_per_logical_{engine}") or 1.0)
        record = payload + coef["record_header"]
        cl_day = (1 - means["cancel"]) * record * count
        if engine == "wheel":
            cl_day += record * (1 + means["rolls"]) * count
            disk = RETENTION_DAYS * (cl_day + TIMERLOG_UNIT * (1 + means["rolls"]) * count) \
                + WHEEL_FILE
        elif engine == "levels":
            cl_day += (coef["level"] * payload if coef.get("level") else record) * count
            disk = RETENTION_DAYS * cl_day
        elif engine == "vlog":
            disk = RETENTION_DAYS * cl_day + chosen["space_amp"] * pending_bytes \
                + ROCKS_SPACE_AMP * pending_bytes / payload * INDEX_ENTRY
        else:
            disk = RETENTION_DAYS * cl_day + ROCKS_SPACE_AMP * pending_bytes * (1 + KEY_BYTES
                                                                                 / payload)
        out["engines"][engine] = {"logical_bytes_per_day": logical,
                                  "physical_bytes_per_day": phys,
                                  "wa_logical": per_msg / payload, "disk_bytes": disk}
    return out


def vlog_features(df, rate: float, pending_messages: float, payload: float):
    """The vlog index's features and the θ table (relocated share, WA, space amplification) of
    a synthetic day in steady state (Spark aggregates over its delay column)."""
    from pyspark.sql import functions as F
    life = memtable_lifetime_ms(rate, INDEX_ENTRY - KEY_BYTES)
    d = F.col("delay_ms")
    cls = F.when(d < 1500, F.lit(0)).otherwise(F.floor(F.log(d / 1000.0) / math.log(1.5)))
    live_d = F.when(F.col("cancelled"), F.lit(0.0)).otherwise(d)
    stats = df.agg(F.avg(live_d).alias("mean"),
                   F.avg(((d > life) & ~F.col("cancelled")).cast("double")).alias("ilong")).first()
    rows = (df.groupBy(cls.cast("int").alias("cls"))
            .agg(F.count("*").alias("n"), F.sum(F.col("cancelled").cast("int")).alias("c"),
                 F.sum(live_d).alias("live_delay")).collect())
    classes = {r["cls"]: (r["n"], r["c"]) for r in rows}
    live_delay = {r["cls"]: r["live_delay"] for r in rows}
    total = sum(r["n"] for r in rows) or 1
    table = []
    for theta in THETAS:
        ct = class_table(classes, rate, payload, theta)
        moved_delay = sum(live_delay[c["class"]] for c in ct if c["relocated"]) / total
        moved = relocated_share(ct)
        table.append({"theta": theta, "relocated": moved,
                      "space_amp": space_amp(ct, stats["mean"], moved_delay + moved * DAY_MS / 2)})
    means = {"ilong": stats["ilong"],
             "ilevels": compaction_levels(pending_messages * INDEX_ENTRY)}
    return means, table


def parse_mix(text: str) -> dict[str, float]:
    mix = {}
    for part in text.split(","):
        name, _, share = part.partition("=")
        if name.strip() not in SPECS:
            raise ValueError(f"unknown workload {name!r} in --mix")
        mix[name.strip()] = float(share)
    total = sum(mix.values())
    if "cancel" in mix:  # the cancel class goes last (its rows are the cancelled ones)
        mix["cancel"] = mix.pop("cancel")
    return {k: v / total for k, v in mix.items()}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m spark.wa_model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=Path, nargs="+", required=True,
                   help="cells.parquet of spark.wa_compare and/or rows.jsonl of bench.scale")
    p.add_argument("--day-messages", type=int, default=1_000_000_000)
    p.add_argument("--mix", default=DEFAULT_MIX, help=f"workload shares (default {DEFAULT_MIX})")
    p.add_argument("--body-size", type=int, default=1024)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--out", type=Path, default=None, help="default: the cells' directory")
    return p


SUMMED = ("messages", "delivered", "payload_bytes", "logical_bytes", "physical_bytes",
          "cl_delivery", "cl_timer_topic", "cl_level_topic", "consumequeue", "rocks_wal",
          "rocks_flush", "rocks_compaction", "rocks_vlog", "rocks_relocation", "wheel_slots",
          "wheel_checkpoint", "wheel_rolls", "rolls", "ticks")
KEYS = ("engine", "workload", "profile", "body_size", "seed", "shard")


def read_cells(spark, paths: Sequence[Path]):
    """Cells of ``spark.wa_compare`` (``cells.parquet``) and of ``bench.scale`` (``rows.jsonl``)
    as one DataFrame with a ``run`` column (its file); components a run lacks count 0."""
    from pyspark.sql import functions as F
    import pandas as pd
    frames = []
    for path in paths:
        if str(path).endswith(".jsonl"):
            rows = pd.read_json(path, lines=True)
            keep = [c for c in KEYS + SUMMED if c in rows.columns]
            df = spark.createDataFrame(rows[keep])
        else:
            df = spark.read.parquet(str(path))
        for name in SUMMED:
            if name not in df.columns:
                df = df.withColumn(name, F.lit(0).cast("long"))
        df = df.withColumn("run", F.lit(str(path)))
        frames.append(df.select("run", *[c for c in KEYS if c != "shard"],
                                *[F.col(c).cast("double").alias(c) for c in SUMMED]))
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


def run(spark, args: argparse.Namespace | Sequence[str]) -> dict[str, Path]:
    from pyspark.sql import functions as F
    from spark.report import markdown_table
    import pandas as pd
    if not isinstance(args, argparse.Namespace):
        args = build_parser().parse_args(list(args))
    mix = parse_mix(args.mix)
    raw = read_cells(spark, args.cells)
    sums = [F.sum(c).alias(c) for c in SUMMED]
    cells = (raw.groupBy("run", "engine", "workload", "profile", "body_size", "seed")
             .agg(*sums, F.count("*").alias("shards"))
             .where(F.col("profile").isin("default", "-", "vlog"))
             .withColumn("engine", F.when(F.col("profile") == "vlog", F.lit("vlog"))
                         .otherwise(F.col("engine"))).toPandas())
    overhead = float((cells["payload_bytes"] / cells["messages"] - cells["body_size"]).mean())
    features: dict[str, dict[str, float]] = {}
    for i, row in cells.iterrows():
        key = f"{row['workload']}/{row['body_size']}B/{row['messages']}/{row['shards']}"
        if key not in features:
            wheel = bool(((cells["engine"] == "wheel") & (cells["workload"] == row["workload"])
                          & (cells["messages"] == row["messages"])
                          & (cells["shards"] == row["shards"])).any())
            features[key] = workload_features(
                row["workload"], int(row["body_size"]), int(row["seed"]), overhead=overhead,
                messages=int(row["messages"]), shards=int(row["shards"]), wheel=wheel)
        for name, value in features[key].items():
            cells.loc[i, f"f_{name}"] = value
    coef = fit(cells)
    checks = validate(cells)
    proj = project(spark, coef, args.day_messages, mix, args.body_size, overhead, args.seed)
    out = args.out or Path(args.cells[0]).parent
    out.mkdir(parents=True, exist_ok=True)
    worst = max((abs(c["error"]) for c in checks), default=0.0)
    result = {"coefficients": coef, "overhead_bytes": overhead, "features": features,
              "validation": checks, "max_abs_error": worst, "mix": mix, "projection": proj}
    paths = {"json": out / "model.json", "md": out / "model.md"}
    paths["json"].write_text(json.dumps(result, indent=2, default=float), encoding="utf-8")
    val = pd.DataFrame(checks)
    rows = [{"engine": e, "TB written/day (logical)": v["logical_bytes_per_day"] / 1e12,
             "TB written/day (physical est.)": v["physical_bytes_per_day"] / 1e12,
             "WA logical": v["wa_logical"], "disk needed (TB)": v["disk_bytes"] / 1e12}
            for e, v in proj["engines"].items()]
    text = (f"# Scale model\n\nFitted from {', '.join(f'`{c}`' for c in args.cells)}; "
            "leave-one-workload-out validation, "
            f"max |error| = {worst:.1%} (target 20%).\n\n" + markdown_table(val)
            + f"\n## Projection: {args.day_messages:,} messages/day, mix {args.mix}, "
              f"{args.body_size} B bodies\n\n" + markdown_table(pd.DataFrame(rows))
            + "\n### vlog: relocation threshold θ against space (steady state)\n\n"
            + markdown_table(pd.DataFrame(proj["theta_table"]))
            + f"\nPer-message features of the day: {json.dumps(proj['features'])}; "
              f"memtable lifetime {proj['memtable_lifetime_ms']:.0f} ms.\n")
    paths["md"].write_text(text, encoding="utf-8")
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from spark.session import run_job
    return run_job(args.master, "rocks-timer-wa-model", lambda spark: run(spark, args), show="md")


if __name__ == "__main__":
    raise SystemExit(main())
