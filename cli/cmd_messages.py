"""The message commands: ``send``, ``scan``, ``cancel``, ``consume``."""
from __future__ import annotations

import base64
import contextlib
import json
import signal
import sys
import threading
import time
from typing import Any, Iterator

import click

from . import ops, render
from .durations import (DURATION_HELP, TIME_HELP, InputError, parse_bound_ms,
                           parse_duration_ms, parse_time_ms)
from .session import Settings, call
from .remote import BrokerClient, BrokerSocketServer

BODY_RULE = ("Bodies print as UTF-8 text; in --json, `body` is the text and, when the body is "
             "not valid UTF-8, `body_base64` carries the exact bytes.")
FOLLOW_POLL_S = 0.2


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _properties(pairs: tuple[str, ...]) -> dict[str, str]:
    props = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise InputError(f"--prop {pair!r} is not name=value")
        props[name] = value
    return props


@click.command()
@click.argument("topic")
@click.argument("body", required=False)
@click.option("--body-file", type=click.Path(dir_okay=False, allow_dash=True, path_type=str),
              help="Read the body from this file instead, byte for byte ('-' = stdin): "
                   "binary and large bodies, up to max_message_size.")
@click.option("--delay", help=f"Deliver after this long: {DURATION_HELP}.")
@click.option("--at", "at", help=f"Deliver at this time: {TIME_HELP}.")
@click.option("--level", type=int, help="RocketMQ delay level (1 = 1s, 2 = 5s, 3 = 10s, ...).")
@click.option("--tag", help="Message tag (TAGS).")
@click.option("--key", "keys", multiple=True, help="Message key (KEYS); repeatable.")
@click.option("--prop", "props", multiple=True, help="User property name=value; repeatable.")
@click.option("--count", type=int, default=1, show_default=True,
              help="Send this many copies in one batch.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def send(settings: Settings, topic: str, body: str | None, body_file: str | None,
         delay: str | None, at: str | None, level: int | None, tag: str | None,
         keys: tuple[str, ...], props: tuple[str, ...], count: int, as_json: bool) -> None:
    """Send a message now, after a delay, at a time, or on a delay level.

    The body is BODY (text, sent as UTF-8) or the bytes of --body-file. Prints the message
    id, the route (immediate, level, rocksdb, wheel, memory), the due time and the cancel
    handle (timer messages only). Creates the data dir if needed.

    Example: rtimer send orders "close order 42" --delay 30s --key order-42

    Example: rtimer send images --body-file photo.jpg --delay 1h
    """
    if level is not None and level < 1:
        raise InputError(f"--level {level} is invalid; delay levels start at 1")
    if not 1 <= count <= 100_000:
        raise InputError(f"--count {count} is invalid; allowed: 1..100000")
    if (body is None) == (body_file is None):
        raise InputError("give the body as BODY or as --body-file PATH ('-' = stdin), "
                         "exactly one of them")
    payload: dict[str, str] = {"body": body} if body is not None else {
        "body_base64": base64.b64encode(_read_body(body_file, settings)).decode("ascii")}
    results = call(settings, "send", create=True, topic=topic, **payload,
                   delay_ms=parse_duration_ms(delay, "--delay") if delay is not None else None,
                   deliver_at_ms=parse_time_ms(at, "--at") if at is not None else None,
                   delay_level=level, tags=tag, keys=list(keys), properties=_properties(props),
                   count=count)
    render.echo_json(results) if as_json else render.sent(results)


def _read_body(path: str, settings: Settings) -> bytes:
    """The bytes of ``path`` (``-``: stdin), refused past the broker's max_message_size before
    more than one byte over it is read (a body file can be anything, /dev/zero included)."""
    limit = settings.config().max_message_size
    name = "stdin" if path == "-" else path
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as file:
                data = file.read(limit + 1)
    except OSError as exc:
        raise InputError(f"--body-file {name}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(f"--body-file {name} holds more than max_message_size {limit} bytes; "
                         "nothing was sent")
    return data


@click.command()
@click.option("--from", "from_", help=f"Earliest due time: now, a duration from now, or {TIME_HELP}.")
@click.option("--to", help="Latest due time (same forms as --from).")
@click.option("--topic", help="Only this topic.")
@click.option("--limit", type=int, default=100, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def scan(settings: Settings, from_: str | None, to: str | None, topic: str | None, limit: int,
         as_json: bool) -> None:
    """List pending timer messages in due order (level messages are not listed).

    Example: rtimer scan --to 10m --topic orders --limit 20
    """
    if not 0 <= limit <= 1_000_000:
        raise InputError(f"--limit {limit} is invalid; allowed: 0..1000000")
    now_ms = _now_ms()
    result = call(settings, "scan", from_ms=parse_bound_ms(from_, now_ms, "--from"),
                  to_ms=parse_bound_ms(to, now_ms, "--to"), topic=topic, limit=limit)
    render.echo_json(result["entries"]) if as_json else render.pending(result)


@click.command()
@click.argument("handles", nargs=-1)
@click.option("--topic", help="With --key: the topic of the messages.")
@click.option("--key", help="Cancel every pending message of --topic with this key (KEYS).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def cancel(settings: Settings, handles: tuple[str, ...], topic: str | None, key: str | None,
           as_json: bool) -> None:
    """Cancel timer messages by the handle `send` printed, or all of a key.

    Exits 1 if any handle was not found or already delivered (with --key: if none was
    pending); a malformed handle stops the command before anything is cancelled. With
    --topic and --key every pending message whose KEYS hold the key is cancelled at once.

    Example: rtimer cancel djEgb3JkZXJzIDE3OTUzMTkyNDM4NjIgMkFENDE2M0YzM0VERUQwOUNGMUQ2Q0Y1QkIyQTAwMDE

    Example: rtimer cancel --topic orders --key order-42
    """
    if key is not None or topic is not None:
        if handles or key is None or topic is None:
            raise InputError("give handles, or --topic and --key, not both")
        result = call(settings, "cancel_by_key", topic=topic, key=key)
        render.echo_json(result) if as_json else render.cancelled_by_key(result)
        if not result["cancelled"]:
            raise SystemExit(1)
        return
    if not handles:
        raise InputError("give the handles to cancel, or --topic and --key")
    results = call(settings, "cancel", handles=list(handles))
    render.echo_json(results) if as_json else render.cancelled(results)
    if not all(r["cancelled"] for r in results):
        raise SystemExit(1)


@click.command(help=f"""Print delivered messages of TOPIC for a consumer group.

The group's next offset is kept in <data-dir>/config/consumerOffset.json, so each run
continues where the last one stopped. Without a running broker, consume first delivers
what is due. With --follow it polls until Ctrl-C (with --json: one JSON object per line).
{BODY_RULE}

Example: rtimer consume orders --group billing --max 10
""")
@click.argument("topic")
@click.option("--group", default="rtimer", show_default=True, help="Consumer group.")
@click.option("--queue", "queue_id", type=int, default=0, show_default=True, help="Queue id.")
@click.option("--max", "max_messages", type=int, default=32, show_default=True,
              help="At most this many per pull.")
@click.option("--follow", is_flag=True, help="Keep polling until Ctrl-C.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def consume(settings: Settings, topic: str, group: str, queue_id: int, max_messages: int,
            follow: bool, as_json: bool) -> None:
    if not 0 <= queue_id < 1024:
        raise InputError(f"--queue {queue_id} is invalid; allowed: 0..1023")
    if not 1 <= max_messages <= 10_000:
        raise InputError(f"--max {max_messages} is invalid; allowed: 1..10000")
    args = {"topic": topic, "group": group, "queue_id": queue_id, "max_messages": max_messages}
    if not follow:
        result = call(settings, "consume", deliver=True, **args)
        render.echo_json(result["messages"]) if as_json else render.consumed(result)
        return
    try:
        _follow(settings, args, as_json)
    except KeyboardInterrupt:
        pass


def _print_lines(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        for message in result["messages"]:
            click.echo(json.dumps(message, ensure_ascii=False))
    else:
        render.consumed(result)


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM while the block runs.

    ``--follow`` must not depend on Python's default SIGINT handler: Python does not install
    it when the process starts with SIGINT ignored (a background job of a non-interactive
    shell, some CI runners), and Ctrl-C was then never honoured. Here both signals only set
    the event; the loop notices it between polls, so the broker closes cleanly, never in the
    middle of an operation."""
    stop = threading.Event()
    previous = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    except ValueError:  # not the main thread (an embedding program): it stops us its own way
        pass
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _follow(settings: Settings, args: dict[str, Any], as_json: bool) -> None:
    with _stop_on_signals() as stop:
        client = BrokerClient.connect(settings.data_dir)
        if client is not None:
            with client:
                while not stop.is_set():
                    result = client.call("consume", {**args, "deliver": False})
                    _print_lines(result, as_json)
                    if not result["messages"]:
                        stop.wait(FOLLOW_POLL_S)
            return
        settings.require_data_dir()
        ops.check_topic(args["topic"])
        # Nobody runs the data dir: run the broker here, and serve other commands meanwhile.
        with settings.open_broker() as broker, \
                BrokerSocketServer(broker, settings.data_dir) as server:
            broker.start()
            while not stop.is_set():
                result = server.run_op("consume", args)
                _print_lines(result, as_json)
                if not result["messages"]:
                    stop.wait(FOLLOW_POLL_S)
