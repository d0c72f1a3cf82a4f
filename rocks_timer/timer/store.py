"""The ``TimerStore`` protocol every timer engine implements, and the records it moves.

The deliverer, the broker, the CLI, the benchmarks and the Spark jobs take a ``TimerStore`` and
never special-case an engine. A store owns pending messages; the deliverer moves due ones into
the CommitLog:

    claim_due(now)  -> records marked in flight (cancel now answers False for them)
    put each record's ``message`` into the CommitLog (asynchronously, retried on failure)
    complete(records, commitlog_end) -> keys deleted / read position advanced, in one atomic step

Exactly-once engines also take part in restart reconciliation: every delivered copy carries
``TIMER_OUT_MS`` = its key's due time, so after a crash the deliverer reads the CommitLog from
``reconcile_from()`` and calls ``reconcile(keys, end)`` with the keys found delivered there.

Every engine declares what it is: it subclasses ``TimerStore`` (the required methods are
abstract, so an engine missing one cannot be built) and inherits the defaults of the optional
ones (``sync``, ``check``, ``set_aside``, ...), overriding those it does better. Callers call
them and never probe an engine with ``getattr``. The extras only some engines have are small
protocols of their own (``Compacting``); a claim held column by column is a ``ColumnClaim``.
"""
from __future__ import annotations

import functools
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple, Protocol, Sequence, runtime_checkable

from rocks_timer.errors import InvalidMessageError
from rocks_timer.message import Message


@dataclass(frozen=True, slots=True)
class TimerKey:
    """What identifies a scheduled message: due time, real topic and message id (32 hex)."""

    due_ms: int
    topic: str
    msg_id: str


class TimerRecord(NamedTuple):
    """A message to park until ``due_ms``. ``message`` has its real topic and queue id (a
    NamedTuple: every send builds one)."""

    due_ms: int
    message: Message


class Scheduled(NamedTuple):
    """What ``schedule`` returns per record: the cancel handle and the due time the key uses
    (a NamedTuple: the RocksDB store builds one per send, and a tuple is the cheapest)."""

    handle: str
    key_due_ms: int


def maker(cls: type) -> Any:
    """``cls`` (a NamedTuple) from one tuple of its fields, made in C: for building one per
    message, ``list(map(maker(cls), zip(...)))``. A NamedTuple's own constructor is a Python
    function, which this skips (measured: docs/BENCHMARKS.md)."""
    return functools.partial(tuple.__new__, cls)


new_scheduled = maker(Scheduled)
new_timer_record = maker(TimerRecord)


@dataclass(slots=True)
class DueRecord:
    """A due message claimed for delivery. ``message`` is the copy to put (topic and queue set)."""

    key: TimerKey
    message: Message
    handle: str
    size: int = 0
    token: Any = None  # engine-private (raw key bytes, wheel unit position, ...)
    copy: Any = None  # the CommitLog copy, once built (rocks_timer.timer.delivery)


def join_records(parts: Sequence[Sequence[DueRecord]]) -> Sequence[DueRecord]:
    """The records of several claims of one store as one sequence for ``complete``: joined by
    the claims' own ``join`` when they are of one type that has it (a batch held column by
    column stays so), else listed."""
    if len(parts) == 1:
        return parts[0]
    kind = type(parts[0])
    if is_column_claim(parts[0]) and all(type(part) is kind for part in parts):
        return kind.join(parts)
    return [record for part in parts for record in part]


@runtime_checkable
class ColumnClaim(Protocol):
    """A claim held column by column (the RocksDB engine's): ``tokens`` are the records' raw
    keys and ``copies`` their CommitLog copies, both built in bulk by the claim and in record
    order; ``join`` makes one claim of several of its kind. The deliverer puts ``copies`` as
    they are and the tally reads due times and topics from ``tokens``; a plain list of
    ``DueRecord`` (the other engines) has each record build its own copy."""

    tokens: Sequence[bytes]
    copies: Sequence[Message]

    def __len__(self) -> int: ...

    @classmethod
    def join(cls, parts: Sequence[Any]) -> Any: ...


_COLUMN_KINDS: dict[type, bool] = {}


def is_column_claim(records: Sequence[DueRecord]) -> bool:
    """``isinstance(records, ColumnClaim)``, remembered per type: a runtime protocol's check
    looks up every member (docs/BENCHMARKS.md), and the deliverer asks once or twice per claimed
    batch, a trickle of one-message batches included. A claim type sets its columns in
    ``__init__``, so the answer holds for every instance of the type."""
    kind = type(records)
    known = _COLUMN_KINDS.get(kind)
    if known is None:
        known = _COLUMN_KINDS[kind] = isinstance(records, ColumnClaim)
    return known


@dataclass(frozen=True, slots=True)
class PendingEntry:
    """One pending message as ``scan`` lists it."""

    deliver_at_ms: int
    topic: str
    msg_id: str
    handle: str
    size: int
    queue_id: int = 0
    tags: str | None = None


class Rescheduled(NamedTuple):
    """What a reschedule did to one pending message. ``status`` is ``"rescheduled"`` (``handle``
    and ``deliver_at_ms`` name the new key), ``"in_flight"`` (being delivered: nothing changed)
    or ``"not_found"`` (delivered, cancelled, rescheduled already or never there: nothing
    changed); ``old_handle`` is the handle it was asked about."""

    status: str
    topic: str
    msg_id: str
    old_handle: str
    handle: str | None
    deliver_at_ms: int | None


class KeyCancel(int):
    """How many messages ``cancel_by_key`` cancelled (an int), with their handles in
    ``handles``: each will never be delivered."""

    handles: tuple[str, ...]

    def __new__(cls, handles: Sequence[str] = ()) -> "KeyCancel":
        self = super().__new__(cls, len(handles))
        self.handles = tuple(handles)
        return self


class ScanPage(list):
    """A page of ``PendingEntry`` in due order; ``next_after`` resumes the scan (None at the end)."""

    def __init__(self, entries: Iterable[PendingEntry] = (), next_after: str | None = None):
        super().__init__(entries)
        self.next_after = next_after


@dataclass
class StoreStats:
    """Engine figures for ``Broker.stats()``; ``bytes_written`` is logical bytes per component."""

    engine: str
    pending: int
    bytes_written: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "pending": self.pending,
                "bytes_written": dict(self.bytes_written), **self.extra}


@runtime_checkable
class TimerStore(Protocol):
    """Storage of pending timer messages. All methods are thread-safe.

    An engine subclasses it: the abstract methods are the contract, the others are optional
    capabilities with the defaults below (what an engine that lacks the capability does)."""

    name: str
    exactly_once: bool  # True if reconcile() makes redelivery after a crash impossible
    # True when ``complete`` durably forgets (RocksDB deletes keys), so the deliverer syncs the
    # CommitLog before completing; False when a checkpoint that syncs first forgets (the wheel)
    # or nothing survives a restart anyway (memory)
    forgets_on_complete: bool = True
    # what ``count_due`` counts by: the due time of the key (exact), or what the wheel's
    # slots know (wheel.histogram.BASIS)
    due_basis: str = "key due time"

    @abstractmethod
    def schedule(self, records: Sequence[TimerRecord], now_ms: int) -> list[Scheduled]:
        """Park records atomically (one batch). Keys never land behind the delivery cursor:
        a key's due time may be raised (never lowered) to keep that promise."""

    @abstractmethod
    def cancel(self, handle: str, now_ms: int) -> bool:
        """True only if the message will never be delivered; False if unknown, delivered or in
        flight. Raises InvalidHandleError for a malformed handle. Durable once it returns."""

    @abstractmethod
    def scan(self, *, from_ms: int | None = None, to_ms: int | None = None,
             topic: str | None = None, limit: int = 100, after: str | None = None) -> ScanPage:
        """Pending entries with from_ms <= due <= to_ms in due order, at most ``limit``;
        ``after`` is a previous page's ``next_after``."""

    @abstractmethod
    def find(self, topic: str, key: str, *, limit: int = 100,
             after: str | None = None) -> ScanPage:
        """Pending entries of ``topic`` whose KEYS hold ``key``, as ``scan`` lists them (due
        order, in-flight ones included until completed); ``after`` resumes a page."""

    @abstractmethod
    def cancel_by_key(self, topic: str, key: str, now_ms: int) -> KeyCancel:
        """Cancel every pending entry ``find`` lists that is not in flight; each one counted
        will never be delivered (definite, as ``cancel``). Durable once it returns."""

    @abstractmethod
    def reschedule(self, handles: Sequence[str], due_ms: int, now_ms: int) -> list[Rescheduled]:
        """Move each pending message to ``due_ms`` (raised to the delivery cursor's floor like
        a send, so a time in the past is due at once), atomically in one batch: the old key and
        the new one never both exist, so it is delivered once, at the new time. In-flight or
        missing messages are reported and left alone."""

    @abstractmethod
    def reschedule_by_key(self, topic: str, key: str, due_ms: int, now_ms: int
                          ) -> list[Rescheduled]:
        """``reschedule`` of every entry ``find`` lists, in one batch."""

    @abstractmethod
    def count_due(self, ranges: Sequence[tuple[int | None, int | None]]) -> list[int]:
        """Pending entries with lo <= key due time < hi for each (lo, hi); None is unbounded.
        Bounds are whole seconds (multiples of 1000 ms). Exact, and no full scan."""

    @abstractmethod
    def claim_due(self, now_ms: int, max_messages: int, max_bytes: int) -> Sequence[DueRecord]:
        """Records due at ``now_ms`` (never early), in key order, bounded by the budget, marked
        in flight. Records already in flight are not returned again. A list, or a sequence
        that may also carry ``copies`` (each record's prepared CommitLog copy, in order)."""

    @abstractmethod
    def complete(self, records: Sequence[DueRecord], commitlog_end: int | None) -> None:
        """Forget delivered records and advance the cursor, atomically. ``commitlog_end`` is
        the CommitLog offset up to which every delivery of this store is reconciled."""

    @abstractmethod
    def reconcile_from(self) -> int | None:
        """CommitLog offset to reconcile from on open, or None if the engine does not."""

    @abstractmethod
    def reconcile(self, keys: Iterable[TimerKey], commitlog_end: int) -> int:
        """Drop keys found delivered in the CommitLog; returns how many were still present."""

    @abstractmethod
    def maintain(self, now_ms: int) -> None:
        """Periodic engine work (flush, checkpoint, compaction, wheel enqueue); cheap when idle."""

    @abstractmethod
    def next_due_ms(self) -> int | None:
        """Earliest pending due time not in flight, if the engine knows it cheaply; else None
        (the broker then wakes every ``timer_precision_ms``)."""

    @abstractmethod
    def pending_count(self) -> int: ...

    @abstractmethod
    def stats(self) -> StoreStats: ...

    @abstractmethod
    def close(self) -> None: ...

    # -- optional capabilities: the defaults -------------------------------------------------
    def sync(self) -> None:
        """Make every write acknowledged so far survive power loss (the broker's periodic
        flush in async mode). Default: nothing is held in a buffer (nothing is on disk)."""

    def check(self) -> dict[str, Any]:
        """A read-only walk of the engine's own invariants for ``Broker.check``: a dict of
        figures with ``pending`` and ``problems`` (one line each). Default: none to walk."""
        return {"engine": self.name, "pending": self.pending_count(), "problems": []}

    def count_by_topic(self, max_entries: int) -> tuple[dict[str, int], bool]:
        """Pending messages per topic, and whether the count is complete: at most
        ``max_entries`` looked at (False and a partial count past that). Default: pending
        entries walked in due order through ``scan``; an engine that keeps exact per-topic
        counters (RocksDB) overrides it and answers complete whatever the bound."""
        counts: dict[str, int] = {}
        after, seen = None, 0
        while seen < max_entries:
            page = self.scan(limit=min(10_000, max_entries - seen), after=after)
            for entry in page:
                counts[entry.topic] = counts.get(entry.topic, 0) + 1
            seen += len(page)
            after = page.next_after
            if after is None:
                return dict(sorted(counts.items())), True
        return dict(sorted(counts.items())), False

    def set_aside(self) -> list[Any]:
        """Every set-aside (quarantined) message, each with an ``info`` naming it (msg_id,
        topic, keys, due time, reason). Default: the engine sets nothing aside."""
        return []

    def restore_set_aside(self, msg_ids: Sequence[str] | None, now_ms: int) -> dict[str, Any]:
        """Put back the chosen set-aside messages that decode now (all when ``msg_ids`` is
        None): ``{"restored": [...], "refused": [...]}``. Default: nothing to restore, and
        naming messages is an error (none can be set aside here)."""
        if msg_ids:
            raise InvalidMessageError(f"timer engine {self.name} sets nothing aside")
        return {"restored": [], "refused": []}

    def enqueue_offset(self) -> int | None:
        """The queue offset up to which the engine has read its input topic in the CommitLog
        (the wheel reads its sends from one), for ``check``; None for an engine that sends
        reach directly (the default)."""
        return None


@runtime_checkable
class Compacting(Protocol):
    """An engine with a manual compaction (``rtimer compact``; RocksDB): ``profile`` names its
    options profile, ``compact`` runs it and says what it did, ``relocate`` moves sparse value
    segments and releases empty ones ({} when the engine has no value segments). The broker
    branches on it (``Broker.compact``)."""

    profile: str

    def compact(self) -> dict[str, Any]: ...

    def relocate(self, now_ms: int) -> dict[str, Any]: ...
