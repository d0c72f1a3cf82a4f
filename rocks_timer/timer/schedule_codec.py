"""What ``RocksTimerStore.schedule`` writes per record: the key (due time clamped to the floor),
the value and the cancel handle, for a whole batch at once.

``encode_schedule`` uses the optional C encoder (``rocks_timer/_native/timer.c``) when it was
built and falls back to ``encode_schedule_py``, the reference built from the key, value and
handle codecs, for a batch the C one declines (a record out of the ordinary, whose error the
reference raises and names). The two give the same bytes
(tests/engines/rocksdb/test_schedule_codec.py).
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple, Sequence

import lz4.block

from rocks_timer.errors import InvalidMessageError
from rocks_timer.timer.handles import encode_handle
from rocks_timer.timer.keys import encode_key_parts
from rocks_timer.timer.store import TimerRecord
from rocks_timer.timer.values import encode_value

try:
    from rocks_timer._native import codec as native
except ImportError:  # pragma: no cover - no C compiler at install time
    native = None

_COMPRESS = partial(lz4.block.compress, store_size=False)  # what encode_value does


class ScheduleBatch(NamedTuple):
    keys: list[bytes]
    values: list[bytes]
    key_dues: list[int]
    handles: list[str]


def encode_schedule_py(records: Sequence[TimerRecord], floor_ms: int, threshold: int
                       ) -> ScheduleBatch:
    keys, values, dues, handles = [], [], [], []
    for record in records:
        message = record.message
        if not message.msg_id:
            raise InvalidMessageError(f"message to {message.topic!r} has no msg_id; the "
                                      f"broker sets UNIQ_KEY before scheduling")
        value = encode_value(message, threshold)
        due = record.due_ms if record.due_ms >= floor_ms else floor_ms
        keys.append(encode_key_parts(due, message.topic, message.msg_id))
        handles.append(encode_handle(message.topic, due, message.msg_id))
        values.append(value)
        dues.append(due)
    return ScheduleBatch(keys, values, dues, handles)


def encode_schedule(records: list[TimerRecord], floor_ms: int, threshold: int
                    ) -> tuple[list[bytes], list[bytes], list[int], list[str]]:
    """Keys, values, key due times and handles of ``records`` (the fields of a ScheduleBatch;
    the native result is a plain tuple, one allocation less per single send);
    InvalidMessageError, with nothing encoded, when a record cannot be stored."""
    if native is not None:
        done = native.encode_schedule(records, floor_ms, threshold, _COMPRESS)
        if done is not None:
            return done
    return encode_schedule_py(records, floor_ms, threshold)
