"""The timer loop's sleep after a step: to the engine's next due time, or to the precision grid."""

from rocks_timer.broker import wake_in_ms


def test_an_engine_that_knows_its_next_due_time_is_woken_then():
    assert wake_in_ms(10_000, 10_040, 100) == 40


def test_a_next_due_time_beyond_one_interval_is_cut_to_one_interval():
    assert wake_in_ms(10_000, 99_000, 100) == 100


def test_a_next_due_time_already_past_wakes_at_once():
    assert wake_in_ms(10_000, 9_000, 100) == 0


def test_an_engine_that_cannot_say_is_woken_where_the_next_slot_opens():
    # the wheel at 1 s slots: a step that ended 300 ms into a slot sleeps the 700 ms to its end,
    # not a whole second from wherever it ended
    assert wake_in_ms(12_300, None, 1000) == 700
    assert wake_in_ms(12_999, None, 1000) == 1
    assert wake_in_ms(13_000, None, 1000) == 1000
