"""``b64url_decode`` (rocks_timer/timer/handles.py: a handle decoded on every ack and cancel,
without base64's wrappers) decodes exactly what ``base64.urlsafe_b64decode`` decodes, and fails
where it fails, on handles, on their padded and unpadded forms, and on junk."""
from __future__ import annotations

import base64
import random

import pytest

from rocks_timer.errors import InvalidHandleError
from rocks_timer.timer.handles import Handle, b64url_decode, encode_handle


def reference(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def outcome(fn, text: str):
    """The bytes, or "refused" for a ValueError (binascii.Error and UnicodeError are ones; the
    handle decoders catch the three)."""
    try:
        return fn(text)
    except ValueError:
        return "refused"


def test_it_decodes_what_base64_decodes_and_refuses_what_it_refuses():
    rng = random.Random(3)
    texts = [encode_handle(f"T{i}", 1_700_000_000_000 + i, f"{i:032X}") for i in range(40)]
    texts += [base64.urlsafe_b64encode(rng.randbytes(n)).decode() for n in range(12)]
    texts += ["", "=", "a", "ab", "abc", "a-_b", "+/+/", "ab=c", "a b c d", "!!!!",
              "ab\ncd", "é", "\x00\x01", "Zg", "Zm8", "Zm9v", "Zm9v===", "-_-_-_"]
    alphabet = "ABCxyz019-_+/=!. é"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 14)))
              for _ in range(300)]
    for text in texts:
        assert outcome(b64url_decode, text) == outcome(reference, text), repr(text)


def test_handles_round_trip_and_junk_stays_invalid():
    handle = Handle("orders", 1_700_000_000_123, "AB" * 16)
    assert Handle.decode(handle.encode()) == handle
    for junk in ("", "!!", "é", "x" * 401, base64.urlsafe_b64encode(b"v1 T 12 nope").decode()):
        with pytest.raises(InvalidHandleError):
            Handle.decode(junk)
