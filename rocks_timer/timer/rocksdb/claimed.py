"""What a RocksDB claim returns: ``ClaimedBatch``, one claim's records held column by column.

A burst claims a million records a second; the deliverer needs only each record's prepared
CommitLog copy (``copies``) and ``complete`` only its raw key (``tokens``), its index value
(the store's in-flight map) and, in a keyed store, its KEYS. So a claim builds no object per
record: the batch is a ``Sequence[DueRecord]`` whose items (``ClaimedRecord``, with the key,
message and handle decoded on first read) are made only when someone indexes or iterates it,
as tests, the CLI and other engines' callers do.

A claim also records its ``spans``: the key ranges it emptied. The walk takes every key from the
claim cursor up to its last one, and no key can land below the claim cursor afterwards (``schedule``
clamps due times to the low watermark), so ``complete`` may forget a whole batch with one range
delete per claim instead of a point delete per key. A batch whose walk met a key already in flight,
or a slice of a batch, has no spans (None) and is completed key by key.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Iterator

from rocks_timer.message import Message
from rocks_timer.timer import keys as K
from rocks_timer.timer.handles import encode_handle
from rocks_timer.timer.rocksdb.claim_codec import ReadBodies
from rocks_timer.timer.store import DueRecord, TimerKey
from rocks_timer.timer.values import decode_value, peek_keys


class ClaimedRecord(DueRecord):
    """A claimed record whose key, message and handle are decoded only if someone reads them
    (the deliverer reads only ``copy``, ``size`` and ``token``)."""

    __slots__ = ("_key", "_message", "_value")

    def __init__(self, raw: bytes, value: bytes, size: int, copy, message=None):
        self.token, self.size, self.copy = raw, size, copy
        self._value, self._message, self._key = value, message, None

    @property
    def key(self) -> TimerKey:
        if self._key is None:
            self._key = K.decode_key(self.token)
        return self._key

    @property
    def message(self) -> Message:
        if self._message is None:
            self._message = decode_value(self.token, self._value)
        return self._message

    def message_keys(self) -> tuple[str, ...]:
        """Its distinct KEYS (``keyindex.message_keys``), read without decoding the message."""
        return distinct_keys(self._message, self.token, self._value)

    @property
    def handle(self) -> str:
        key = self.key
        return encode_handle(key.topic, key.due_ms, key.msg_id)


def distinct_keys(message: Message | None, raw: bytes, value: bytes) -> tuple[str, ...]:
    keys = message.keys if message is not None else peek_keys(raw, value)
    return tuple(dict.fromkeys(keys)) if len(keys) > 1 else keys


class Joined(Sequence):
    """Several sequences end to end, items read through (the bodies of joined claims)."""

    __slots__ = ("_parts", "_starts")

    def __init__(self, parts: list[Sequence]) -> None:
        self._parts = parts
        self._starts = [0]
        for part in parts:
            self._starts.append(self._starts[-1] + len(part))

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        k = bisect_right(self._starts, i) - 1
        return self._parts[k][i - self._starts[k]]


class ClaimedBatch(Sequence):
    """Claimed records, column by column: raw keys (``tokens``), stored values (``bodies``: a
    list, or a sequence slicing each on access, ``claim_codec.ReadBodies``/``Joined``),
    sizes, prepared copies and the messages the claim decoded already (None where it did not).
    Items are ``ClaimedRecord``s, made on first access and kept, so ``batch[0] is batch[0]``.
    ``spans``: the ``[begin, end)`` key ranges holding exactly these records, or None."""

    __slots__ = ("tokens", "bodies", "sizes", "copies", "messages", "spans", "_items")

    def __init__(self, tokens: list[bytes], bodies: Sequence[bytes], sizes: list[int],
                 copies: list, messages: list, spans: list[tuple[bytes, bytes]] | None = None):
        self.tokens, self.bodies, self.sizes = tokens, bodies, sizes
        self.copies, self.messages, self.spans = copies, messages, spans
        self._items: list[ClaimedRecord | None] | None = None

    @classmethod
    def join(cls, parts: Sequence["ClaimedBatch"]) -> "ClaimedBatch":
        if len(parts) == 1:
            return parts[0]
        tokens: list[bytes] = []
        sizes: list[int] = []
        copies: list = []
        messages: list = []
        spans: list[tuple[bytes, bytes]] | None = []
        for part in parts:
            tokens += part.tokens
            sizes += part.sizes
            copies += part.copies
            messages += part.messages
            spans = None if spans is None or part.spans is None else spans + part.spans
        bodies = Joined([part.bodies for part in parts])  # bodies read lazily stay so
        return cls(tokens, bodies, sizes, copies, messages, spans)

    def _columns(self) -> tuple[list, list, list, list, list]:
        return self.tokens, self.bodies, self.sizes, self.copies, self.messages

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ClaimedBatch(*(column[i] for column in self._columns()))
        items = self._items
        if items is None:
            items = self._items = [None] * len(self.tokens)
        item = items[i]
        if item is None:
            item = items[i] = ClaimedRecord(self.tokens[i], self.bodies[i], self.sizes[i],
                                            self.copies[i], self.messages[i])
        return item

    def __iter__(self) -> Iterator[ClaimedRecord]:
        return (self[i] for i in range(len(self.tokens)))

    def __eq__(self, other) -> bool:
        if isinstance(other, ClaimedBatch):
            return self.tokens == other.tokens
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # mutable columns, like a list

    def __repr__(self) -> str:
        return f"ClaimedBatch({len(self)} records)"

    def message_keys(self, i: int) -> tuple[str, ...]:
        """Distinct KEYS of item ``i`` without building a ``ClaimedRecord``."""
        return distinct_keys(self.messages[i], self.tokens[i], self.bodies[i])

    def index_entries(self, indexes: list[int] | None = None) -> list[bytes]:
        """The key index entries of the records (all, or those at ``indexes``): a keyed
        store's completion deletes them. The KEYS of a record the claim decoded come from its
        message; the others are read from the stored values by one native call
        (:func:`index_removals`), which leaves to :func:`distinct_keys` only the values it does
        not read the way the reference does (and those that are corrupt: the reference
        raises)."""
        tokens, messages, bodies = self.tokens, self.messages, self.bodies
        at = range(len(tokens)) if indexes is None else indexes
        decoded = [i for i in at if messages[i] is not None]
        if decoded:
            at = [i for i in at if messages[i] is None]
        raws = tokens if isinstance(at, range) else [tokens[i] for i in at]
        values = bodies.take(at) if isinstance(bodies, ReadBodies) else [bodies[i] for i in at]
        entries, slow = index_removals(raws, values, K.META_KEY_INDEX_PREFIX)
        for j in slow:
            entries += K.index_entries([raws[j]], [distinct_keys(None, raws[j], values[j])])
        for i in decoded:
            entries += K.index_entries([tokens[i]], [distinct_keys(messages[i], tokens[i], None)])
        return entries


def index_removals_py(raws: list[bytes], values: list[bytes], prefix: bytes
                      ) -> tuple[list[bytes], list[int]]:
    """The reference of the native ``index_removals``: the key index entries (``prefix`` is
    ``keys.META_KEY_INDEX_PREFIX``) of the distinct KEYS of every stored value, read by
    ``values.peek_keys`` (CorruptRecordError for a corrupt one), and no index left over."""
    assert prefix == K.META_KEY_INDEX_PREFIX
    return K.index_entries(raws, [distinct_keys(None, raw, value)
                                  for raw, value in zip(raws, values)]), []


try:
    from rocks_timer._native.codec import index_removals
except ImportError:  # pragma: no cover - no C compiler at install time, or an older build
    index_removals = index_removals_py
