"""The delay-level table (rocks_timer/delay_levels.py): RocketMQ behaviours 1-5 and 32."""
from __future__ import annotations

import pytest

from rocks_timer.config import BrokerConfig
from rocks_timer.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevelTable
from rocks_timer.errors import ConfigError

DEFAULT_MS = [1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000,
              480000, 540000, 600000, 1200000, 1800000, 3600000, 7200000]


def test_default_table_has_18_levels():
    table = DelayLevelTable.parse(DEFAULT_DELAY_LEVELS)
    assert table.max_level == 18
    assert list(table.delays_ms) == DEFAULT_MS
    assert list(table.levels()) == list(range(1, 19))
    assert BrokerConfig().delay_levels == table


@pytest.mark.parametrize("text, expected", [
    ("5s 8s", (5000, 8000)),
    ("1d", (86_400_000,)),
    ("2h", (7_200_000,)),
    ("3m", (180_000,)),
    ("0s", (0,)),
    ("-1s", (-1000,)),
])
def test_units_and_numbers(text, expected):
    assert DelayLevelTable.parse(text).delays_ms == expected


@pytest.mark.parametrize("text", ["5x", "1.5s", "s", "1S", "", "1s  5s", " 1s", "1s ", "1 s"])
def test_malformed_tables_are_config_errors(text):
    with pytest.raises(ConfigError):
        DelayLevelTable.parse(text)


def test_malformed_table_in_config_fails_validate():
    with pytest.raises(ConfigError, match="message_delay_level"):
        BrokerConfig(message_delay_level="1s 5x").validate()


def test_queue_and_level_mapping():
    assert DelayLevelTable.queue_id(3) == 2
    assert DelayLevelTable.level_of(3) == 4
    assert DelayLevelTable.queue_id(18) == 17
    assert DelayLevelTable.level_of(17) == 18


def test_deliver_timestamp_and_unknown_level():
    table = DelayLevelTable.parse(DEFAULT_DELAY_LEVELS)
    assert table.deliver_at_ms(3, 1234) == 1234 + 10_000
    assert table.deliver_at_ms(999, 0) == 1000
    assert table.delay_ms(0) == 1000


def test_clamp_to_max_level():
    table = DelayLevelTable.parse("5s 8s")
    assert table.clamp(3) == 2
    assert table.clamp(2) == 2
    assert table.clamp(1) == 1
