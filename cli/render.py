"""Human-readable output of the commands (``--json`` bypasses this module).

Everything here takes the JSON documents of :mod:`cli.ops`, so the direct and the remote path
print the same thing.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable, Sequence

import click

from .durations import format_ms

MiB = 1 << 20
# What a terminal would act on rather than show: C0 and C1 controls and DEL (escape sequences,
# carriage return, backspace, bell), the line and paragraph separators, and the bidirectional
# overrides that reorder what follows them
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                          "\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on written as its Python escape
    (``\\x1b``, ``\\n``, ``\\u202e``): a body printed as text cannot move the cursor, clear the
    screen, retitle the window or hide what follows. ``--json`` output is left exact."""
    return _UNPRINTABLE.sub(_escaped, text)


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


def cancelled_by_key(result: dict[str, Any]) -> None:
    n = result["cancelled"]
    click.echo(f"cancelled {n} pending message{'s' if n != 1 else ''} of {result['topic']} "
               f"with key {result['key']}")
    for handle in result["handles"]:
        click.echo(f"  {handle}")


def rescheduled(results: list[dict[str, Any]]) -> None:
    if not results:
        click.echo("no pending message with that key")
        return
    outcome = {"in_flight": "being delivered: not changed",
               "not_found": "not found, delivered or cancelled: not changed"}
    table(("msg_id", "status", "due", "new handle"),
          ((r["msg_id"], outcome.get(r["status"], r["status"]),
            format_ms(r["deliver_at_ms"]) if r["deliver_at_ms"] is not None else None,
            r["handle"]) for r in results))


def due(document: dict[str, Any]) -> None:
    """The due histogram: buckets from now, then one line per UTC day."""
    click.echo(f"{document['pending']} pending ({document['engine']}; by {document['basis']}), "
               f"counted from {format_ms(document['from_ms'])}")
    labels = {"now": "due now", "minute": "next minute", "hour": "next hour",
              "day": "next day", "week": "next week", "later": "later"}
    table(("due", "pending"), ((labels[name], count)
                               for name, count in document["buckets"].items()))
    if document["days"]:
        click.echo("")
        table(("day (UTC)", "pending"), ((d["day"], d["count"]) for d in document["days"]))


def body_text(message: dict[str, Any]) -> str:
    if "body_base64" in message:
        return f"(binary, base64) {message['body_base64']}"
    return printable(message["body"])


def consumed(document: dict[str, Any]) -> None:
    for m in document["messages"]:
        tags = f" tags={printable(m['tags'])}" if m.get("tags") else ""
        click.echo(f"{printable(m['topic'])}/{m['queue_id']}@{m['queue_offset']}  {m['msg_id']}  "
                   f"stored {format_ms(m['store_ms'])}{tags}  {body_text(m)}")


def size(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    if n < MiB:
        return f"{n / 1024:.1f} KiB"
    return f"{n / MiB:.1f} MiB"


def health_lines(health: dict[str, Any] | None) -> list[tuple[str, str]]:
    """``stats()["health"]`` as labelled lines: ``healthy``, or one DEGRADED line per failure
    kind (count, since when, the last error)."""
    if not health or health.get("status") == "healthy":
        return [("health", "healthy")]
    return [("DEGRADED", printable(f"{f['kind']}: failing {f['count']} time(s) in a row since "
                                   f"{format_ms(f['since_ms'])}: {f['last_error']}"))
            for f in health["failures"]]


def stats(figures: dict[str, Any]) -> None:
    timer = figures["timer"]
    profile = f" (profile {timer['profile']})" if timer.get("profile") else ""
    cut = "" if figures["pending_by_topic_complete"] else " (per-topic counts cut short)"
    pending = "?" if figures["pending"] is None else figures["pending"]
    lag = "unknown" if figures["lag_ms"] is None else f"{figures['lag_ms']} ms"
    lines = [("data dir", figures["data_dir"]),
             ("engine", f"{figures['engine']}{profile}"),
             *health_lines(figures.get("health")),
             ("pending", f"{pending} timer messages, lag {lag}{cut}")]
    lines += [("", f"{topic:<24} {count}") for topic, count in figures["pending_by_topic"].items()]
    lines += [("stored", f"{name:<24} offsets {q['min_offset']}..{q['max_offset']}")
              for name, q in figures["topics"].items()]
    lines += [("consumer", f"{c['group']} on {c['topic']}/{c['queue_id']}: next "
                           f"{c['next_offset']} of {c['max_offset']}, lag {c['lag']}"
                           + (" (BEYOND THE END: clamped on next consume)"
                              if c.get("beyond_end") else ""))
              for c in figures["consumer_lag"]]
    sent_counts = figures["sent"]
    level_delivered = (figures.get("levels") or {}).get("delivered", 0)
    lines.append(("this process", f"sent {sent_counts['immediate']} immediate / "
                                  f"{sent_counts['level']} level / {sent_counts['timer']} timer; "
                                  f"delivered {figures['delivered']} timer / {level_delivered} "
                                  f"level; cancelled {figures['cancelled']}; in flight "
                                  f"{figures['in_flight']}; failed puts {figures['failed_puts']}"))
    deliveries = figures.get("deliveries")
    if deliveries:  # a broker of this version: lateness and early deliveries since start
        late = deliveries["lateness_ms"]
        seen = (f"mean {late['sum'] / late['count']:.1f} ms over {late['count']} deliveries"
                if late["count"] else "no timer delivery yet")
        lines.append(("lateness", f"{seen}; early {deliveries['early']} (must be 0)"))
    lines.append(("timer writes", ", ".join(f"{k} {size(v)}" for k, v in
                                            timer["bytes_written"].items()) + " (since open)"))
    if figures["engine"] == "rocksdb":
        lines.append(("rocksdb", f"live SST {size(timer.get('live_sst_bytes'))}, memtable "
                                 f"{size(timer.get('memtable_bytes'))}, L0 files "
                                 f"{timer.get('l0_files')}, pending compaction "
                                 f"{size(timer.get('pending_compaction_bytes'))}"))
        lines.append(("compaction", f"read {size(timer.get('compact_read_bytes'))}, written "
                                    f"{size(timer.get('compact_write_bytes'))}, running "
                                    f"{timer.get('num_running_compactions')}, stalls "
                                    f"{timer.get('stall_micros')} us"))
        lines.append(("cursor", format_ms(timer.get("cursor_due_ms"))))
        lines.append(("layout", timer.get("layout", "inline")))
        if timer.get("layout") == "vlog":
            lines.append(("vlog", f"{timer['vlog_segments']} segment(s) "
                                  f"({timer['vlog_arrival_segments']} arrival, "
                                  f"{timer['vlog_long_segments']} long), live "
                                  f"{size(timer['vlog_live_bytes'])} of "
                                  f"{size(timer['vlog_segment_bytes'])} "
                                  f"({timer['vlog_live_fraction']:.0%})"))
            lines.append(("", f"relocated {size(timer['vlog_relocated_bytes'])} "
                              f"({timer['vlog_relocated_count']} records), reclaimed "
                              f"{size(timer['vlog_released_bytes'])} "
                              f"({timer['vlog_released_segments']} segments), set aside "
                              f"{timer['vlog_lost']}"))
            damaged = timer["vlog_short_segments"] + timer["vlog_missing_segments"]
            if damaged:
                lines.append(("DAMAGED", f"value segments short or missing: {damaged} "
                                         f"(their records are set aside when due)"))
    log = figures["commitlog"]
    lines.append(("commitlog", f"{size(log['max_offset'] - log['min_offset'])} held, offsets "
                               f"{log['min_offset']}..{log['max_offset']}, "
                               f"{log['segments']} segment(s)"))
    damage = [*log.get("corrupt_regions", []), *log.get("recovery", {}).get("problems", []),
              *(f"commitlog segment {name} is short" for name in log.get("short_segments", [])),
              *figures.get("clamped_consumer_offsets", [])]
    recovery = timer.get("recovery") or {}  # the wheel's
    damage += [f"wheel recovery: {line}" for line in recovery.get("lost", [])]
    if recovery.get("corrupt_units"):
        damage.append(f"wheel recovery: {recovery['corrupt_units']} corrupt TimerLog unit(s) "
                      "skipped")
    if log.get("truncated_bytes"):
        damage.insert(0, f"recovery cut a torn commitlog tail of {log['truncated_bytes']} bytes")
    if figures.get("lost_unaccepted"):
        damage.insert(0, f"{figures['lost_unaccepted']} acknowledged message(s) lost with "
                         "commitlog files (rtimer lost list)")
    if figures.get("set_aside"):
        damage.insert(0, f"{figures['set_aside']} timer message(s) set aside, not delivered "
                         "(rtimer set-aside list)")
    lines += [("DAMAGED", printable(line)) for line in damage[:20]]
    if damage:
        lines.append(("", "run `rtimer check` for the full invariant walk"))
    for label, text in lines:
        click.echo(f"{label:<13} {text}".rstrip())


def compacted(result: dict[str, Any]) -> None:
    profile = f" (profile {result['profile']})" if result.get("profile") else ""
    if not result["compacted"]:
        click.echo(f"the {result['engine']} engine{profile} has nothing to compact")
        return
    click.echo(f"compacted the {result['engine']} timer store{profile}: live SST "
               f"{size(result['before_live_sst_bytes'])} -> "
               f"{size(result['after_live_sst_bytes'])} in {result['seconds']} s")
    if result.get("vlog"):
        vlog = result["vlog"]
        click.echo(f"vlog: relocated {vlog['relocated_records']} records from "
                   f"{vlog['segments']} sparse segment(s), released "
                   f"{size(vlog['released_bytes'])}")


def check(report: dict[str, Any]) -> None:
    """``rtimer check``: what was walked, then each problem."""
    timer = report.get("timer", {})
    pending = timer.get("pending", timer.get("live_keys", "?"))
    pending = "an uncounted number of" if pending is None else pending
    click.echo(f"checked {report['commitlog_records']} commitlog records, "
               f"{report['consume_queue_entries']} consume queue entries in "
               f"{report['queues']} queue(s), {pending} pending timer messages")
    for note in report.get("notes", []):
        click.echo(f"note: {note}")
    if report["ok"]:
        click.echo("ok: every invariant holds")
        return
    more = report.get("more_problems", 0)
    total = len(report["problems"]) + more
    click.echo(f"{total} problem(s):")
    for problem in report["problems"]:
        click.echo(f"  {printable(problem)}")
    if more:
        click.echo(f"  ... and {more} more")


def repaired(result: dict[str, Any]) -> None:
    """``rtimer repair``: what it did, what it recovered, and every message it could not."""
    action = {"none": "nothing to repair", "rebuilt": "rebuilt",
              "created-empty": "made an empty store"}.get(result["action"], result["action"])
    click.echo(f"{result['path']} ({result['layout']} layout): {action}; "
               f"{result['recovered']} pending message(s) recovered, {len(result['lost'])} lost"
               + (" and an unknown number more" if result["lost_unnamed"] < 0 else
                  f" and {result['lost_unnamed']} more whose names are unreadable"
                  if result["lost_unnamed"] else ""))
    if result["kept_as"]:
        click.echo(f"the old store is kept as {result['kept_as']} (delete it once satisfied)")
    for note in result["notes"]:
        click.echo(f"  note: {note}")
    for lost in result["lost"][:1000]:
        click.echo(f"  LOST msg_id={lost['msg_id']} topic={lost['topic']} "
                   f"due_ms={lost['due_ms']} keys={','.join(lost['keys']) or '-'}: "
                   f"{lost['reason']}")
    if len(result["lost"]) > 1000:
        click.echo(f"  ... and {len(result['lost']) - 1000} more (--json lists every one)")
    for problem in result["problems"][:20]:
        click.echo(f"  problem: {problem}")


def set_aside(rows: list[dict[str, Any]]) -> None:
    """``rtimer set-aside list``: one line per message, then how many."""
    for row in rows:
        keys = "unknown" if row["keys"] is None else (",".join(row["keys"]) or "-")
        due = row["due_ms"]
        click.echo(f"{row['msg_id']}  {row['topic']}  keys {keys}  due {_iso(due)} "
                   f"({due})  {'restorable' if row['restorable'] else 'not restorable'}")
        click.echo(f"    reason: {row['reason']}")
    restorable = sum(1 for row in rows if row["restorable"])
    click.echo(f"{len(rows)} set-aside message(s), {restorable} restorable now")


def lost(record: dict[str, Any]) -> None:
    """``rtimer lost list``: the ranges, then the messages."""
    for r in record["ranges"]:
        where = f"segment {r['segment']} " if r["segment"] != "-" else ""
        click.echo(f"range {r['start']}..{r['end']}: {where}{r['why']}")
    for m in record["messages"]:
        who = f"{m['msg_id']}  " if m.get("msg_id") else ""
        click.echo(f"{who}{m['topic']}/{m['queue_id']} offset {m['queue_offset']}  "
                   f"(commitlog offset {m['commitlog_offset']}, {m['size']} bytes)")
    click.echo(f"{record['lost_messages']} lost message(s), {record['accepted']} accepted")


def _iso(ms: int | None) -> str:
    if ms is None:
        return "?"
    import datetime as dt
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"
    except (OverflowError, OSError, ValueError):
        return str(ms)
