"""The native value-segment parser gives exactly what its Python reference gives (ARCHITECTURE §1:
every C hot path beside its Python reference, checked byte for byte)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb import transaction
from rocks_timer.timer.rocksdb.vlog import segments as S

native = pytest.importorskip("rocks_timer._native.codec")

records = st.lists(st.tuples(st.binary(min_size=1, max_size=60), st.binary(max_size=300)),
                   min_size=1, max_size=8)


def layout(pairs):
    data, items = b"", []
    for key, value in pairs:
        record = S.frame(key, value)
        items.append((len(data), len(record), key))
        data += record
    return data, items


def damaged(data: bytes, damage: str, where: int, byte: int) -> bytes:
    """``data`` with one byte flipped or cut short, for the damages that touch the bytes."""
    if damage == "flip":
        at = where % len(data)
        return data[:at] + bytes([data[at] ^ (byte or 1)]) + data[at + 1:]
    if damage == "cut":
        return data[:where % len(data)]
    return data


@settings(max_examples=300, deadline=None)
@given(records, st.integers(min_value=0), st.integers(min_value=0, max_value=255),
       st.sampled_from(["flip", "cut", "wrong-key", "wrong-length", "none"]))
def test_native_parse_matches_the_reference(pairs, where, byte, damage):
    data, items = layout(pairs)
    data = damaged(data, damage, where, byte)
    if damage == "wrong-key":
        at, length, key = items[where % len(items)]
        items[where % len(items)] = (at, length, key + b"x")
    elif damage == "wrong-length":
        at, length, key = items[where % len(items)]
        items[where % len(items)] = (at, length + 1 + byte, key)
    expected = S.parse_run_py(data, items)
    assert native.vlog_parse(data, items) == expected
    if damage == "none":
        assert expected == [value for _, value in pairs]


def test_every_refusal_has_a_reason():
    data, items = layout([(b"k", b"v")])
    assert S.parse_run_py(data, [(0, len(data), b"k")]) == [b"v"]
    codes = {S.parse_run_py(data, [(5, len(data), b"k")])[0],
             S.parse_run_py(b"\x00" + data[1:], items)[0],
             S.parse_run_py(data, [(0, len(data) - 1, b"k")])[0],
             S.parse_run_py(data[:-1] + b"w", items)[0],
             S.parse_run_py(data, [(0, len(data), b"q")])[0]}
    assert codes == set(S.REFUSED)


@settings(max_examples=200, deadline=None)
@given(records)
def test_native_framing_matches_the_reference(pairs):
    keys, values = [k for k, _ in pairs], [v for _, v in pairs]
    assert native.vlog_frame(keys, values) == S.frame_many_py(keys, values)


index_values = st.lists(st.one_of(
    st.none(),
    st.binary(max_size=40),  # inline values, short or odd pointers among them
    st.builds(lambda seg, offset, length, extra: I.encode_pointer(seg, offset, length, 0, 1, None)
              + extra, st.integers(0, 3), st.integers(0, 2**40), st.integers(0, 2**32 - 1),
              st.binary(max_size=4))), max_size=30)


@settings(max_examples=300, deadline=None)
@given(index_values, st.dictionaries(st.integers(0, 3),
                                     st.tuples(st.integers(-5, 5), st.integers(-9, 9)),
                                     max_size=3))
def test_native_drop_pointers_matches_the_reference(values, start):
    """The liveness deltas of pointers leaving the index: same counts, same dict, same order."""
    ours = {seg: list(pair) for seg, pair in start.items()}
    theirs = {seg: list(pair) for seg, pair in start.items()}
    assert native.drop_pointers(ours, values) == transaction.drop_pointers_py(theirs, values)
    assert ours == theirs and list(ours) == list(theirs)


def test_drop_pointers_refuses_what_is_not_bytes():
    with pytest.raises(TypeError):
        native.drop_pointers({}, ["not bytes"])
