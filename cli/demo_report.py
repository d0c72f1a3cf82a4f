"""Bookkeeping and the summary table of ``rtimer demo``: what was sent, cancelled and delivered,
per route, and the checks (lost, early, duplicated, delivered after cancel)."""
from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from rocks_timer import Message, SendResult
from rocks_timer.message import TIMER_DELIVER_MS

from .durations import format_duration_ms
from .render import size

ROUTE_LABELS = {"timer": "timer", "level": "levels 1-3", "immediate": "immediate"}


def percentile(values: list[int], q: float) -> int | None:
    """Nearest-rank percentile (q in 0..100) of integer values; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


class DemoLedger:
    """Owns what the demo knows: each message's route and due time, cancels, and deliveries."""

    def __init__(self) -> None:
        self.created = time.monotonic()
        self.route: dict[str, str] = {}
        self.due_ms: dict[str, int] = {}
        self.handle: dict[str, str] = {}
        self.cancelled: set[str] = set()
        self.cancel_refused = 0
        self.copies: Counter[str] = Counter()
        self.lateness: dict[str, list[int]] = defaultdict(list)
        self.early: Counter[str] = Counter()
        self.unexpected = 0
        self.first_store_ms: int | None = None
        self.last_store_ms: int | None = None
        self.send_seconds = 0.0
        self.watch_seconds = 0.0

    def sent(self, kind: str, result: SendResult) -> None:
        self.route[result.msg_id] = kind
        self.due_ms[result.msg_id] = result.deliver_at_ms
        if result.handle:
            self.handle[result.msg_id] = result.handle

    def handles(self) -> list[tuple[str, str]]:
        return sorted(self.handle.items())

    def cancel_result(self, msg_id: str, cancelled: bool) -> None:
        if cancelled:
            self.cancelled.add(msg_id)
        else:
            self.cancel_refused += 1

    def delivered(self, kind: str, message: Message) -> None:
        msg_id = message.msg_id
        if msg_id not in self.route or self.route[msg_id] != kind:
            self.unexpected += 1
            return
        self.copies[msg_id] += 1
        if self.copies[msg_id] > 1:
            return
        due = self.due_ms[msg_id]
        if kind == "timer":  # the due time the producer asked for, as the copy carries it
            due = int(message.properties.get(TIMER_DELIVER_MS, due))
        late = message.store_ms - due
        if late < 0:
            self.early[kind] += 1
        if kind != "immediate":
            self.lateness[kind].append(late)
        self.first_store_ms = min(self.first_store_ms or message.store_ms, message.store_ms)
        self.last_store_ms = max(self.last_store_ms or message.store_ms, message.store_ms)

    # -- figures ---------------------------------------------------------------------------
    def sent_count(self, kind: str) -> int:
        return sum(1 for k in self.route.values() if k == kind)

    def total_sent(self) -> int:
        return len(self.route)

    def cancelled_count(self, kind: str) -> int:
        return sum(1 for m in self.cancelled if self.route[m] == kind)

    def expected(self, kind: str) -> int:
        return self.sent_count(kind) - self.cancelled_count(kind)

    def delivered_count(self, kind: str) -> int:
        return sum(1 for m in self.copies if self.route[m] == kind and m not in self.cancelled)

    def duplicates(self, kind: str) -> int:
        return sum(n - 1 for m, n in self.copies.items() if self.route[m] == kind and n > 1)

    def cancelled_delivered(self, kind: str) -> int:
        return sum(1 for m in self.copies if self.route[m] == kind and m in self.cancelled)

    def lost(self, kind: str) -> int:
        return self.expected(kind) - self.delivered_count(kind)

    def all_arrived(self) -> bool:
        return all(self.lost(kind) == 0 for kind in ROUTE_LABELS)

    def last_due_ms(self) -> int:
        return max(self.due_ms.values(), default=0)


def _ms(value: int | None) -> str:
    return "-" if value is None else format_duration_ms(value)


def render_summary(console: Console, ledger: DemoLedger, stats: dict[str, Any]) -> bool:
    """Print the summary table; True when every promise held."""
    table = Table(title="rtimer demo: delivery summary", box=box.SIMPLE_HEAVY,
                  caption="late = store time of the delivered copy - its due time; "
                          "cxl+dlv = delivered although cancelled")
    for column in ("route", "sent", "cancelled", "delivered", "lost", "early", "dups",
                   "cxl+dlv", "late p50", "late p99", "late max"):
        table.add_column(column, justify="left" if column == "route" else "right")
    failures = []
    for kind, label in ROUTE_LABELS.items():
        label = f"{stats['engine']} timer" if kind == "timer" else label
        late = ledger.lateness.get(kind, [])
        row = (ledger.sent_count(kind), ledger.cancelled_count(kind), ledger.delivered_count(kind),
               ledger.lost(kind), ledger.early[kind], ledger.duplicates(kind),
               ledger.cancelled_delivered(kind))
        table.add_row(label, *(str(v) for v in row), _ms(percentile(late, 50)),
                      _ms(percentile(late, 99)), _ms(max(late) if late else None))
        for name, value in zip(("lost", "early", "duplicates", "cancelled but delivered"), row[3:]):
            if value:
                failures.append(f"{value} {name} ({label})")
    if ledger.unexpected:
        failures.append(f"{ledger.unexpected} unexpected messages")
    console.print(table)
    span_s = ((ledger.last_store_ms or 0) - (ledger.first_store_ms or 0)) / 1000
    delivered = sum(ledger.delivered_count(kind) for kind in ROUTE_LABELS)
    console.print(f"send: {ledger.total_sent()} messages in {ledger.send_seconds:.2f} s "
                  f"({ledger.total_sent() / max(ledger.send_seconds, 1e-6):,.0f} msg/s)")
    console.print(f"delivery: {delivered} messages over {span_s:.1f} s from first to last "
                  f"({delivered / max(span_s, 1e-3):,.0f} msg/s, paced by the due times); "
                  f"whole run {ledger.watch_seconds:.1f} s")
    timer = stats["timer"]
    extra = (f", profile {timer['profile']}, WAL {size(timer['bytes_written'].get('wal'))}"
             if timer.get("profile") else "")
    console.print(f"timer engine {stats['engine']}{extra}; {ledger.cancel_refused} cancels refused; "
                  f"{stats['pending']} still pending")
    if failures:
        console.print("[bold red]FAILED:[/] " + "; ".join(failures))
        return False
    console.print("[bold green]OK:[/] nothing lost, nothing early, no duplicates, "
                  "no cancelled message delivered")
    return True
