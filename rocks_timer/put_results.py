"""What a CommitLog put returns: where each message landed (``PutResult``), and the results of
a batch put built on access from the writer's packed per-message metadata (``PutResults``)."""
from __future__ import annotations

from typing import NamedTuple, Sequence

from rocks_timer.batch_encoder import META
from rocks_timer.message import Message
from rocks_timer.record import prepared_identity


class PutResult(NamedTuple):
    """Where a put landed (a NamedTuple: the writer builds one per message, cheaply)."""

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    size: int
    store_ms: int


_new = tuple.__new__


class PutResults(Sequence):
    """The results of one batch put, built on access from the writer's packed per-message
    metadata: a group writes many messages, and most callers read only a few results (or just
    the end offset), so none is allocated up front."""

    __slots__ = ("_messages", "_meta", "_store_ms", "_start", "_stop")

    def __init__(self, messages: list[Message], meta: bytes, store_ms: int, start: int = 0,
                 stop: int | None = None):
        self._messages = messages
        self._meta = meta  # batch_encoder.META per message
        self._store_ms = store_ms
        self._start = start
        self._stop = len(messages) if stop is None else stop

    def __len__(self) -> int:
        return self._stop - self._start

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return PutResults(self._messages, self._meta, self._store_ms, self._start + start,
                              self._start + stop)
        count = self._stop - self._start  # len(self), without the call
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError(index)
        i = self._start + index
        queue_offset, position, size, queue_id = META.unpack_from(self._meta, i * META.size)
        msg = self._messages[i]
        msg_id, topic = prepared_identity(msg) if type(msg) is bytes else (msg.msg_id, msg.topic)
        return _new(PutResult,  # PutResult(...) without its Python __new__
                    (msg_id, topic, queue_id, queue_offset, position, size, self._store_ms))

    def __iter__(self):
        """The results in order (``Sequence``'s own iteration indexes until an IndexError)."""
        for i in range(len(self)):
            yield self[i]

    @property
    def end_offset(self) -> int:
        """CommitLog offset just past the last record of these results."""
        _, position, size, _ = META.unpack_from(self._meta, (self._stop - 1) * META.size)
        return position + size
