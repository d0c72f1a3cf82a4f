"""The claim's per-record work after the index walk, as one call: the byte budget, value-segment
reads, and prepared CommitLog copies (see :mod:`rocks_timer.timer.delivery`).

``claim_batch`` is the native ``claim_batch`` (``rocks_timer/_native/claim.c``) when it was
built, else :func:`claim_batch_py`, its reference; tests/engines/rocksdb/test_claim_native.py
holds the two equal. Codes name why an entry cannot be delivered; the claim turns them into
``CorruptRecordError``s and sets those entries aside.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence

from rocks_timer.timer import keys as K
from rocks_timer.timer.delivery import native_copies
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.vlog import segments as S

try:
    from rocks_timer._native.codec import claim_batch as _native_claim
    from rocks_timer._native.codec import due_second_counts as _native_second_counts
except ImportError:  # pragma: no cover - no C compiler at install time
    _native_claim = _native_second_counts = None


def claim_batch_py(keys: list[bytes], values: list[bytes], fds: dict[int, int] | None,
                   max_bytes: int, now_ms: int) -> tuple[int, list, list, list, list]:
    """(cut, sizes, bodies, copies, codes) for the entries before ``cut`` (see the module
    docstring of ``claim.c`` for each part)."""
    sizes, bodies, codes = [], [], []
    used = 0
    for i, (key, value) in enumerate(zip(keys, values)):
        pointer = code = None
        size = len(value)
        if fds is not None and value[:1] == bytes([I.POINTER_VERSION]):
            if len(value) >= I.SIZE:
                pointer = I.POINTER.unpack_from(value)[1:4]
                size = pointer[2]
            else:
                code = "short-pointer"
        if i > 0 and used + size > max_bytes:
            break
        used += size
        if len(key) < K.FIXED_KEY_SIZE + 1 or key[K.DUE_SIZE] == 0 or \
                len(key) != K.FIXED_KEY_SIZE + key[K.DUE_SIZE]:
            code = "bad-key"
        elif pointer is not None and code is None:
            fd = fds.get(pointer[0])
            if fd is None:
                code = "missing"
            else:
                result = S.parse_run_py(os.pread(fd, pointer[2], pointer[1]),
                                        [(0, pointer[2], key)])[0]
                if type(result) is bytes:
                    value = result
                else:
                    code, value = result, None
        sizes.append(size)
        bodies.append(value)
        codes.append(code)
    cut = len(sizes)
    copies = [None] * cut
    good = [i for i in range(cut) if codes[i] is None]
    made = native_copies([bodies[i] for i in good], [K.key_due_ms(keys[i]) for i in good],
                         now_ms)
    for i, copy in zip(good, made):
        copies[i] = copy
    return cut, sizes, bodies, copies, codes


SPAN = struct.Struct("<qq")


class ReadBodies(Sequence):
    """The bodies of a native claim: each value read from a value segment stays in the one
    buffer the claim read into (``blob``, at its ``spans`` pair) and becomes a bytes object only
    when someone asks for it (a test, the CLI, a keyed store's KEYS, an entry left to Python);
    the others (inline values, refusals) are held as given. Equal to any sequence with the same
    bodies."""

    __slots__ = ("_given", "_blob", "_spans")

    def __init__(self, given: list, blob: bytes, spans: bytes) -> None:
        self._given, self._blob, self._spans = given, blob, spans

    def __len__(self) -> int:
        return len(self._given)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        body = self._given[i]
        if body is not None:
            return body
        offset, length = SPAN.unpack_from(self._spans, SPAN.size * (i % len(self._given)))
        return None if length < 0 else self._blob[offset:offset + length]

    def take(self, indexes: Iterable[int]) -> list:
        """The bodies at ``indexes`` as a list, in one pass (a keyed completion reads every
        body's KEYS)."""
        given, blob, spans, unpack = self._given, self._blob, self._spans, SPAN.unpack_from
        out = []
        add = out.append
        for i in indexes:
            body = given[i]
            if body is None:
                offset, length = unpack(spans, SPAN.size * i)
                body = None if length < 0 else blob[offset:offset + length]
            add(body)
        return out

    def __eq__(self, other) -> bool:
        if isinstance(other, Sequence):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ReadBodies({len(self)} bodies)"


def claim_batch_native(keys: list[bytes], values: list[bytes], fds: dict[int, int] | None,
                       max_bytes: int, now_ms: int) -> tuple[int, list, Sequence, list, list]:
    """The native claim (``claim.c``), its bodies left in the buffer they were read into."""
    cut, sizes, given, copies, codes, blob, spans = _native_claim(keys, values, fds, max_bytes,
                                                                  now_ms)
    return cut, sizes, ReadBodies(given, blob, spans), copies, codes


claim_batch = claim_batch_native if _native_claim is not None else claim_batch_py


def due_second_counts_py(raws: Iterable[bytes]) -> dict[int, int]:
    """How many of the timer keys ``raws`` fall due in each second (``{second: count}``); a
    delivered batch's due counters change by these (``keyindex.removed_unkeyed``)."""
    counts: dict[int, int] = {}
    for raw in raws:
        if type(raw) is not bytes or len(raw) < K.DUE_SIZE:
            raise ValueError("due_second_counts: a key is not bytes of 8 or more")
        second = K.key_due_ms(raw) // 1000
        counts[second] = counts.get(second, 0) + 1
    return counts


due_second_counts = (_native_second_counts if _native_second_counts is not None
                     else due_second_counts_py)
