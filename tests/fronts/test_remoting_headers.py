"""``Header``: a send header's fields under their V2 letters or their long names, range-checked."""
from __future__ import annotations

import pytest

from rocks_timer.remoting.headers import Header, HeaderError


def test_a_v2_header_reads_its_letters_and_falls_back_on_long_names():
    v2 = Header.send(True, {"b": "orders", "e": "3", "m": "true", "queueId": "9",
                            "sysFlag": "1"})
    assert v2.topic() == "orders" and v2.flag("batch")
    assert v2.integer("queueId") == 3           # the letter wins over a stray long name
    assert v2.integer("sysFlag") == 1           # a long name alone is read
    assert v2.integer("flag", 0) == 0           # absent: the default
    with pytest.raises(HeaderError, match="lacks topic"):
        Header.send(True, {"e": "0"}).topic()
    with pytest.raises(HeaderError, match="outside"):
        Header.send(True, {"e": "-5"}).integer("queueId", low=0)


def test_a_v1_header_reads_long_names_only():
    v1 = Header.send(False, {"topic": "orders", "b": "other", "queueId": "2"})
    assert v1.topic() == "orders" and v1.integer("queueId") == 2
    assert Header.send(False, {"b": "x"}).text("topic", "none") == "none"
