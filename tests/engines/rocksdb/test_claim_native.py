"""The native ``claim_batch`` (rocks_timer/_native/claim.c) gives exactly what its Python
reference ``claim_batch_py`` gives: cut, sizes, bodies, copies and refusal codes, for generated
index entries in both layouts, with damaged keys, pointers and segment records."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocks_timer import Message
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import claim_codec
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.vlog import segments as S
from rocks_timer.timer.store import TimerKey
from rocks_timer.timer.values import encode_value

pytestmark = pytest.mark.skipif(claim_codec._native_claim is None, reason="no C extension built")
NOW = 1_767_225_600_000

entries = st.lists(st.tuples(st.integers(0, 40), st.binary(max_size=200),
                             st.sampled_from(["ok", "bad-key", "short", "missing", "flip",
                                              "other-key", "past-end"])),
                   min_size=0, max_size=12)


def build(tmp_path, specs, vlog: bool, rng=None):
    """Index entries for ``specs``; with ``rng`` the records sit in the segment in a shuffled
    order with gaps of 0-6,000 bytes between them, and a ``past-end``
    record may instead run over the end of the file."""
    keys, values, data = [], [], b""
    places: dict[int, int] = {}
    if rng is not None:
        for n in rng.sample(range(len(specs)), len(specs)):
            data += bytes(rng.choice([0, 0, 1, 100, 4000, 6000]))
            places[n] = len(data)
            data += bytes(1000)  # room for its record (at most ~500 bytes)
    for n, (delta, body, damage) in enumerate(specs):
        key = K.encode_key(TimerKey(NOW - delta, "orders", f"{n:032X}"))
        value = encode_value(Message("orders", body, msg_id=f"{n:032X}", born_ms=NOW - 99), 64)
        if damage == "bad-key":
            key = key + b"z"
        if vlog:
            record = S.frame(key if damage != "other-key" else key[:-1] + b"\xff", value)
            if damage == "flip":
                record = record[:-1] + bytes([record[-1] ^ 1])
            if n in places:
                offset = places[n]
                data = data[:offset] + record + data[offset + len(record):]
                if damage == "past-end":
                    offset = len(data) - len(record) // 2 if rng.random() < 0.5 else 10 ** 6
            else:
                offset = len(data) + (10 ** 6 if damage == "past-end" else 0)
                data += record
            segment = 9 if damage == "missing" else 1
            pointer = I.encode_pointer(segment, offset, len(record), 0, len(body), None)
            value = pointer[:10] if damage == "short" else pointer
        keys.append(key)
        values.append(value)
    path = tmp_path / "segment"
    path.write_bytes(data)
    return keys, values, path


@settings(max_examples=200, deadline=None)
@given(entries, st.booleans(), st.integers(1, 4000))
def test_native_claim_batch_matches_the_reference(tmp_path_factory, specs, vlog, max_bytes):
    keys, values, path = build(tmp_path_factory.mktemp("claim"), specs, vlog)
    fd = os.open(path, os.O_RDONLY)
    try:
        fds = {1: fd} if vlog else None
        native = claim_codec.claim_batch_native(keys, values, fds, max_bytes, NOW)
        assert native == claim_codec.claim_batch_py(keys, values, fds, max_bytes, NOW)
    finally:
        os.close(fd)


@settings(max_examples=200, deadline=None)
@given(entries, st.integers(1, 40_000), st.randoms(use_true_random=False))
def test_native_reads_scattered_records(tmp_path_factory, specs, max_bytes, rng):
    """Records scattered through the segment in another order than the keys, near each other
    or not, some running past its end: the native claim reads each as its reference does."""
    keys, values, path = build(tmp_path_factory.mktemp("claim"), specs, True, rng)
    fd = os.open(path, os.O_RDONLY)
    try:
        native = claim_codec.claim_batch_native(keys, values, {1: fd}, max_bytes, NOW)
        assert native == claim_codec.claim_batch_py(keys, values, {1: fd}, max_bytes, NOW)
    finally:
        os.close(fd)


def test_the_budget_always_takes_one_entry():
    key = K.encode_key(TimerKey(NOW, "orders", "0" * 32))
    value = encode_value(Message("orders", b"x" * 100, msg_id="0" * 32), 1 << 20)
    cut, sizes, bodies, copies, codes = claim_codec.claim_batch([key, key], [value, value], None,
                                                                1, NOW)
    assert cut == 1 and sizes == [len(value)] and codes == [None] and type(copies[0]) is bytes


big_entries = st.lists(st.tuples(st.integers(0, 40), st.binary(max_size=64),
                                 st.sampled_from(["ok"] * 12 + ["bad-key", "short", "missing",
                                                                "flip", "other-key", "past-end"])),
                       min_size=200, max_size=700)


@settings(max_examples=15, deadline=None)
@given(big_entries, st.booleans(), st.randoms(use_true_random=False))
def test_large_claims_match_the_reference(tmp_path_factory, specs, vlog, rng):
    """Claims of hundreds of entries, scattered and some damaged, in either layout: the same
    results (bodies read lazily from one buffer included)."""
    keys, values, path = build(tmp_path_factory.mktemp("claim"), specs, vlog, rng if vlog else None)
    fd = os.open(path, os.O_RDONLY)
    try:
        fds = {1: fd} if vlog else None
        native = claim_codec.claim_batch_native(keys, values, fds, 1 << 30, NOW)
        assert native[0] == len(specs)
        assert native == claim_codec.claim_batch_py(keys, values, fds, 1 << 30, NOW)
    finally:
        os.close(fd)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2 ** 64 - 1) | st.integers(NOW, NOW + 5_000), max_size=300),
       st.booleans())
def test_due_second_counts_match_the_reference(dues, in_order):
    raws = [due.to_bytes(8, "big") + b"t" * (due % 30) for due in (sorted(dues) if in_order else dues)]
    counts = claim_codec._native_second_counts(raws)
    assert counts == claim_codec.due_second_counts_py(raws)
    assert sum(counts.values()) == len(raws)


def test_due_second_counts_refuse_what_is_not_a_key():
    for bad in ([b"1234567"], [b"12345678", "not bytes"]):
        with pytest.raises(ValueError):
            claim_codec._native_second_counts(bad)
        with pytest.raises(ValueError):
            claim_codec.due_second_counts_py(bad)
