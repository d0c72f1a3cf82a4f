"""Tables and charts of the Spark jobs: markdown from pandas frames, stacked WA bars, Pareto plots.

Pure pandas/matplotlib (Agg backend); the jobs hand it pandas frames they collected from Spark.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

# component columns stacked in the WA chart, with their labels and colours
STACK = (
    ("cl_delivery", "CommitLog: delivery to real topic", "#4c72b0"),
    ("cl_timer_topic", "CommitLog: wheel timer topic (incl. rolls)", "#dd8452"),
    ("cl_level_topic", "CommitLog: SCHEDULE_TOPIC_XXXX", "#937860"),
    ("consumequeue", "ConsumeQueue", "#8c8c8c"),
    ("rocks_wal", "RocksDB WAL", "#55a868"),
    ("rocks_flush", "RocksDB flush", "#8fd694"),
    ("rocks_compaction", "RocksDB compaction", "#2d6a3e"),
    ("wheel_timerlog", "wheel TimerLog", "#c44e52"),
    ("wheel_slots", "wheel slot pages", "#f0a0a0"),
    ("wheel_checkpoint", "wheel checkpoint + metrics", "#8172b3"),
    ("cl_other", "CommitLog: segment padding", "#cccccc"),
)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.2f}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)


def markdown_table(frame: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    """A GitHub markdown table of ``frame`` (numbers formatted for reading)."""
    cols = list(columns or frame.columns)
    lines = ["| " + " | ".join(cols) + " |",
             "|" + "|".join("---" if frame[c].dtype == object else "---:" for c in cols) + "|"]
    for _, row in frame[cols].iterrows():
        lines.append("| " + " | ".join(_fmt(row[c].item() if hasattr(row[c], "item")
                                             else row[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def wa_chart(summary: pd.DataFrame, path: Path, title: str) -> Path:
    """Stacked bars: logical WA per component, one bar per (workload, engine/profile), with the
    physical WA as a black tick on each bar."""
    frame = summary.sort_values(["workload", "engine", "profile"]).reset_index(drop=True)
    layouts = frame["layout"] if "layout" in frame else ["-"] * len(frame)
    labels = [f"{w}\n{e}" + ("" if p in ("-", None) else f"/{p}")
              + ("" if lay in ("-", None, "", p) else f"\n({lay})")
              for w, e, p, lay in zip(frame["workload"], frame["engine"], frame["profile"],
                                      layouts)]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(frame) + 2), 5.5))
    bottom = [0.0] * len(frame)
    xs = range(len(frame))
    for column, label, colour in STACK:
        if column not in frame or not frame[column].any():
            continue
        heights = (frame[column] / frame["payload_bytes"]).tolist()
        ax.bar(xs, heights, bottom=bottom, label=label, color=colour, width=0.7)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.scatter(xs, frame["wa_physical"], marker="_", s=600, color="black", zorder=5,
               label="physical WA (/proc/self/io)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("bytes written / payload bytes")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def pareto_chart(frame: pd.DataFrame, x: str, y: str, label_cols: Iterable[str], path: Path,
                 title: str, front: pd.Series | None = None) -> Path:
    """Scatter of ``y`` against ``x`` (both lower is better), one colour per workload, the
    Pareto-optimal points circled."""
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    label_cols = list(label_cols)
    for workload, group in frame.groupby("workload"):
        ax.scatter(group[x], group[y], label=str(workload), s=40)
        for _, row in group.iterrows():
            ax.annotate(" ".join(str(row[c]) for c in label_cols), (row[x], row[y]),
                        fontsize=7, xytext=(3, 3), textcoords="offset points")
    if front is not None and front.any():
        best = frame[front]
        ax.scatter(best[x], best[y], s=160, facecolors="none", edgecolors="black",
                   label="Pareto front (per workload)")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


__all__ = ["STACK", "markdown_table", "pareto_chart", "wa_chart"]
