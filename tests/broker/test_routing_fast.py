"""``route`` (with its common-case fast path) against ``route_reference``: the same route, the
same stored message byte for byte, the same error, for generated messages and schedules."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocks_timer import BrokerConfig, Message
from rocks_timer.errors import RocksTimerError
from rocks_timer.message import encode_properties_py
from rocks_timer import routing

NOW = 1_767_225_600_000
CONFIG = BrokerConfig(max_message_size=64).validate()

names = st.sampled_from(["a", "k", "TAGS", "KEYS", "UNIQ_KEY", "DELAY", "TIMER_DELAY_MS",
                         "TIMER_DELIVER_MS", "REAL_TOPIC", "x\x01y", "", "ü", "n\x02"])
values = st.one_of(st.sampled_from(["1", "v", "", "0123456789ABCDEF0123456789ABCDEF",
                                    "a\x01b", "c\x02", "ß", "7 8"]), st.text(max_size=4))
topics = st.sampled_from(["orders", "a-b_c|%", "bad topic", "", "rmq_sys_x", "SCHEDULE_TOPIC_XXXX",
                          "x" * 127, "x" * 128, "orders\n"])
ids = st.one_of(st.none(), st.sampled_from(["0123456789abcdef0123456789ABCDEF", "123", "Z" * 32]))


@st.composite
def messages(draw):
    props = draw(st.dictionaries(names, values, max_size=3))
    try:
        return Message(draw(topics), draw(st.binary(max_size=80)), tags=draw(
            st.one_of(st.none(), st.sampled_from(["t", "a b"]))), properties=props,
            msg_id=draw(ids), queue_id=draw(st.one_of(st.none(), st.sampled_from([0, 3, 1024, -1]))),
            flag=draw(st.sampled_from([0, 5, -1, 1 << 31])),
            born_ms=draw(st.one_of(st.none(), st.just(NOW - 5))))
    except RocksTimerError:
        return None


schedules = st.one_of(
    st.just({}),
    st.builds(lambda v: {"delay_ms": v}, st.sampled_from([-5, 0, 1, 5000, 40 * 86_400_000, True])),
    st.builds(lambda v: {"deliver_at_ms": v},
              st.sampled_from([NOW - 1, NOW, NOW + 1, NOW + 3 * 86_400_000, NOW + 10 ** 12])),
    st.builds(lambda v: {"delay_level": v}, st.sampled_from([0, 3])))


def outcome(fn, msg, schedule):
    routing._valid_topics.clear()
    try:
        r = fn(msg, now_ms=NOW, config=CONFIG, **schedule)
    except (RocksTimerError, TypeError) as exc:
        return ("error", type(exc), str(exc))
    m = r.message
    return (r.kind, r.due_ms, r.level, m, m.encoded_properties,
            encode_properties_py(m.properties), m.msg_id, m.tags, m.keys, m.born_ms)


def strip_ids(result, generated):
    """Ids generated for id-less messages differ between two calls; compare the rest."""
    if result[0] == "error" or not generated or result[6] is None:
        return result
    text = repr(result).replace(result[6], "<id>")
    return text


@settings(max_examples=400, deadline=None)
@given(messages(), schedules)
def test_route_equals_the_reference(msg, schedule):
    if msg is None:
        return
    fast = outcome(routing.route, msg, schedule)
    ref = outcome(routing.route_reference, msg, schedule)
    generated = msg.msg_id is None
    assert strip_ids(fast, generated) == strip_ids(ref, generated)
    if fast[0] != "error":
        assert fast[4] == fast[5]  # the cached property string is the encoding of the map


def test_the_fast_path_is_taken_for_the_common_send():
    msg = Message("orders", b"x", tags="t", keys=["k1"])
    calls = []
    original = routing.route_reference
    routing.route_reference = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        r = routing.route(msg, now_ms=NOW, config=CONFIG, delay_ms=5000)
    finally:
        routing.route_reference = original
    assert calls == [] and r.kind == "timer" and r.due_ms == NOW + 5000
    assert r.message.properties["TIMER_DELIVER_MS"] == str(NOW + 5000)


@pytest.mark.parametrize("schedule", [{"delay_ms": 40 * 86_400_000}, {"delay_level": 3}])
def test_uncommon_sends_fall_back_to_the_reference(schedule):
    msg = Message("orders", b"x")
    assert outcome(routing.route, msg, schedule)[0] == outcome(routing.route_reference, msg,
                                                               schedule)[0]


@pytest.mark.skipif(routing._native_route is None, reason="no C extension built")
@settings(max_examples=400, deadline=None)
@given(messages(), schedules)
def test_native_route_equals_the_python_fast_path(msg, schedule):
    """Where the C router answers, it answers as ``_route_common`` does (ids aside)."""
    if msg is None or set(schedule) - {"delay_ms", "deliver_at_ms"}:
        return
    routing._valid_topics.clear()
    python = routing._route_common(msg, NOW, CONFIG, schedule.get("delay_ms"),
                                   schedule.get("deliver_at_ms"))  # also fills the topic cache
    native = routing._native_route(msg, NOW, schedule.get("delay_ms"),
                                   schedule.get("deliver_at_ms"), CONFIG.max_message_size,
                                   CONFIG.max_delay_ms, routing.MAX_PROPERTIES_SIZE,
                                   routing._valid_topics, routing._FORBIDDEN, Message,
                                   routing.new_msg_id)
    if native is None:
        return
    assert python is not None
    got = routing.Route(*native)
    generated = msg.msg_id is None
    as_outcome = (lambda r: (r.kind, r.due_ms, r.level, r.message, r.message.encoded_properties,
                             encode_properties_py(r.message.properties), r.message.msg_id,
                             r.message.tags, r.message.keys, r.message.born_ms))
    assert strip_ids(as_outcome(got), generated) == strip_ids(as_outcome(python), generated)


def test_the_native_router_answers_the_common_send():
    if routing._native_route is None:
        pytest.skip("no C extension built")
    routing._valid_topics.add("orders")
    routed = routing._native_route(Message("orders", b"x"), NOW, 5000, None, 64, 10 ** 9, 32767,
                                   routing._valid_topics, routing._FORBIDDEN, Message,
                                   routing.new_msg_id)
    assert routed is not None and routed[0] == "timer" and routed[2] == NOW + 5000


def batch_outcome(msgs, schedule):
    """``route_batch`` over ``msgs``: each message's outcome, or the batch's error."""
    routing._valid_topics.clear()
    try:
        routes = routing.route_batch(msgs, now_ms=NOW, config=CONFIG, **schedule)
    except (RocksTimerError, TypeError) as exc:
        return ("error", type(exc), str(exc))
    return [(r.kind, r.due_ms, r.level, r.message, r.message.encoded_properties,
             encode_properties_py(r.message.properties), r.message.msg_id, r.message.tags,
             r.message.keys, r.message.born_ms) for r in routes]


@settings(max_examples=300, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=5), schedules)
def test_route_batch_equals_route_per_message(msgs, schedule):
    """The same routes as ``route`` message by message, and the first bad message's error."""
    msgs = [m for m in msgs if m is not None]
    one_by_one = []
    for msg in msgs:
        single = outcome(routing.route, msg, schedule)
        if single[0] == "error":
            one_by_one = single
            break
        one_by_one.append(single)
    got = batch_outcome(msgs, schedule)
    if got and got[0] == "error":
        assert got == one_by_one
        return
    assert len(got) == len(one_by_one)
    for msg, a, b in zip(msgs, got, one_by_one):
        generated = msg.msg_id is None
        assert strip_ids(a, generated) == strip_ids(b, generated)


def test_ids_made_in_bulk_look_like_ids_made_one_at_a_time():
    from rocks_timer.message import MessageIdGenerator, msg_id_supplier
    gen = MessageIdGenerator()
    made = gen.next_ids(70_000) + [gen.next_id()]  # the 16-bit counter wraps inside
    assert len(set(made)) == len(made)
    assert all(len(i) == 32 and i == i.upper() and int(i, 16) >= 0 for i in made)
    assert {i[:20] for i in made} == {made[0][:20]}  # one host/pid/salt prefix
    places = [(int(i[20:28], 16), int(i[28:], 16)) for i in made[:-1]]  # (ms, counter)
    assert all(a < b for a, b in zip(places, places[1:]))  # a wrapped counter moves the ms on
    supply = msg_id_supplier(2)
    got = [supply() for _ in range(4)]  # two from the bulk, then one at a time
    assert len(set(got)) == 4 and all(len(i) == 32 for i in got)


def test_a_batch_takes_generated_ids_in_message_order():
    """The native batch loop stops at a message it leaves to the reference, which is routed
    next, in place: the ids the batch supplies follow the messages' order, as one call per
    message does."""
    class Custom(Message):  # not the common case: routed by the reference
        pass

    made = iter(f"{i:032X}" for i in range(100))
    msgs = [Message("orders", b"a"), Message("orders", b"b"),
            Custom("orders", b"c"), Message("orders", b"d")]
    routing._valid_topics.clear()
    routes = routing.route_batch(msgs, now_ms=NOW, config=CONFIG, new_id=lambda: next(made),
                                 delay_ms=5000)
    ids = [r.message.msg_id for r in routes]  # the reference makes its own id
    assert ids[:2] + ids[3:] == [f"{i:032X}" for i in range(3)] and len(ids[2]) == 32
    assert [r.message.body for r in routes] == [b"a", b"b", b"c", b"d"]
    assert all(type(r) is routing.Route and r.kind == "timer" and r.level == 0 for r in routes)
    assert routes[0].due_ms == NOW + 5000
