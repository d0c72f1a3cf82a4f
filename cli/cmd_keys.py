"""The commands by business key: ``find`` and ``reschedule`` (``cancel --key`` lives with
``cancel``, ``stats --due`` with ``stats``)."""
from __future__ import annotations

import click

from . import render
from .durations import DURATION_HELP, TIME_HELP, InputError, parse_duration_ms, parse_time_ms
from .session import Settings, call


@click.command()
@click.argument("topic")
@click.argument("key")
@click.option("--limit", type=int, default=100, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def find(settings: Settings, topic: str, key: str, limit: int, as_json: bool) -> None:
    """List the pending timer messages of TOPIC whose KEYS hold KEY, in due order.

    The RocksDB engine answers from its key index (exact, no scan); the file wheel keeps no
    such index and says so. Level messages are not listed.

    Example: rtimer find orders order-42
    """
    if not 0 <= limit <= 1_000_000:
        raise InputError(f"--limit {limit} is invalid; allowed: 0..1000000")
    result = call(settings, "find", topic=topic, key=key, limit=limit)
    render.echo_json(result["entries"]) if as_json else render.pending(result)


@click.command()
@click.argument("handles", nargs=-1)
@click.option("--topic", help="With --key: the topic of the messages.")
@click.option("--key", help="Reschedule every pending message of --topic with this key.")
@click.option("--delay", help=f"New due time, this long from now: {DURATION_HELP}.")
@click.option("--at", "at", help=f"New due time: {TIME_HELP}.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def reschedule(settings: Settings, handles: tuple[str, ...], topic: str | None, key: str | None,
               delay: str | None, at: str | None, as_json: bool) -> None:
    """Move pending timer messages to a new due time, by handle or by --topic and --key.

    Each move is atomic: the message is delivered once, at the new time, and gets a new
    handle (the old one names nothing afterwards). A time in the past delivers at once; one
    beyond timer_max_delay_sec is refused. Exits 1 if a message was already being delivered,
    delivered or cancelled (nothing changed for it).

    Example: rtimer reschedule --topic orders --key order-42 --delay 2h
    """
    if (delay is None) == (at is None):
        raise InputError("give exactly one of --delay and --at")
    if bool(handles) == (key is not None):
        raise InputError("give handles, or --topic and --key, not both")
    if key is not None and topic is None:
        raise InputError("--key needs --topic")
    results = call(settings, "reschedule", handles=list(handles) or None, topic=topic, key=key,
                   delay_ms=parse_duration_ms(delay, "--delay") if delay is not None else None,
                   deliver_at_ms=parse_time_ms(at, "--at") if at is not None else None)
    render.echo_json(results) if as_json else render.rescheduled(results)
    if not results or any(r["status"] != "rescheduled" for r in results):
        raise SystemExit(1)
