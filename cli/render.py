"""Human-readable output of the commands (``--json`` bypasses this module).

Everything here takes the JSON documents of :mod:`cli.ops`, so the direct and the remote path
print the same thing.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

import click

from cli.durations import format_ms

MiB = 1 << 20


def echo_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Left-aligned columns separated by two spaces."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def sent(results: list[dict[str, Any]]) -> None:
    table(("msg_id", "route", "due", "handle"),
          ((r["msg_id"], r["route"], format_ms(r["deliver_at_ms"]), r["handle"])
           for r in results))


def pending(document: dict[str, Any]) -> None:
    entries = document["entries"]
    if not entries:
        click.echo("no pending messages")
        return
    table(("due", "topic", "msg_id", "size", "handle"),
          ((format_ms(e["deliver_at_ms"]), e["topic"], e["msg_id"], e["size"], e["handle"])
           for e in entries))
    more = "; more follow (raise --limit or move --from)" if document["more"] else ""
    click.echo(f"{len(entries)} pending{more}")


def cancelled(results: list[dict[str, Any]]) -> None:
    for r in results:
        outcome = "cancelled" if r["cancelled"] else "not found or already delivered"
        click.echo(f"{r['handle']}: {outcome}")


def body_text(message: dict[str, Any]) -> str:
    if "body_base64" in message:
        return f"(binary, base64) {message['body_base64']}"
    return message["body"]


def consumed(document: dict[str, Any]) -> None:
    for m in document["messages"]:
        tags = f" tags={m['tags']}" if m.get("tags") else ""
        click.echo(f"{m['topic']}/{m['queue_id']}@{m['queue_offset']}  {m['msg_id']}  "
                   f"stored {format_ms(m['store_ms'])}{tags}  {body_text(m)}")


def size(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    if n < MiB:
        return f"{n / 1024:.1f} KiB"
    return f"{n / MiB:.1f} MiB"


def stats(figures: dict[str, Any]) -> None:
    timer = figures["timer"]
    click.echo(f"data dir     {figures['data_dir']}")
    click.echo(f"engine       {figures['engine']}"
               + (f" (profile {timer['profile']})" if timer.get("profile") else ""))
    more = "" if figures["pending_by_topic_complete"] else " (per-topic counts cut short)"
    click.echo(f"pending      {figures['pending']}{more}")
    for topic, count in figures["pending_by_topic"].items():
        click.echo(f"  {topic:<24} {count}")
    sent_counts = figures["sent"]
    click.echo("sent         " + ", ".join(f"{k} {v}" for k, v in sent_counts.items())
               + "  (by this broker process)")
    click.echo(f"delivered    {figures['delivered']} timer"
               + (f", {figures['levels'].get('delivered', 0)} level"
                  if figures.get("levels") else "") + "  (by this broker process)")
    click.echo(f"cancelled    {figures['cancelled']}  (by this broker process)")
    click.echo(f"in flight    {figures['in_flight']}   failed puts {figures['failed_puts']}")
    click.echo(f"lag          {figures['lag_ms']} ms (oldest pending message past its due time)")
    click.echo("timer bytes  " + ", ".join(f"{k} {size(v)}"
                                          for k, v in timer["bytes_written"].items()))
    if figures["engine"] == "rocksdb":
        click.echo(f"rocksdb      live SST {size(timer.get('live_sst_bytes'))}, "
                   f"memtable {size(timer.get('memtable_bytes'))}, "
                   f"L0 files {timer.get('l0_files')}, "
                   f"pending compaction {size(timer.get('pending_compaction_bytes'))}")
        click.echo(f"compaction   read {size(timer.get('compact_read_bytes'))}, "
                   f"written {size(timer.get('compact_write_bytes'))}, "
                   f"running {timer.get('num_running_compactions')}, "
                   f"stalls {timer.get('stall_micros')} us")
        click.echo(f"cursor       {format_ms(timer.get('cursor_due_ms'))}")
    log = figures["commitlog"]
    click.echo(f"commitlog    {size(log['commitlog_bytes'])} written, offsets "
               f"{log['min_offset']}..{log['max_offset']}, {log['segments']} segment(s)")


def compacted(result: dict[str, Any]) -> None:
    profile = f" (profile {result['profile']})" if result.get("profile") else ""
    if not result["compacted"]:
        click.echo(f"the {result['engine']} engine{profile} has nothing to compact")
        return
    click.echo(f"compacted the {result['engine']} timer store{profile}: live SST "
               f"{size(result['before_live_sst_bytes'])} -> "
               f"{size(result['after_live_sst_bytes'])} in {result['seconds']} s")
