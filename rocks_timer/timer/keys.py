"""The RocksDB key codec: the only module that builds or parses RocksDB keys.

Timer keys (column family ``timer``)::

    +----------------+-----------+----------------------+------------------+
    | due_ms         | topic_len | topic                | msg id           |
    | 8 B big-endian | 1 B       | topic_len B (UTF-8)  | 16 B raw         |
    +----------------+-----------+----------------------+------------------+

Byte order of two keys equals the order of the tuples
``(due_ms, len(topic bytes), topic bytes, msg id bytes)``: due time first (big-endian unsigned
integers compare like their byte strings), then shorter topics before longer ones, then topic
bytes, then id bytes. In particular byte order is due-time order, which is all the deliverer
relies on; the rest only makes the order total and deterministic.

``due_prefix(due_ms)`` is the 8-byte bound for iterator seeks and upper bounds: every key due at
``due_ms`` sorts at or after it, and every key due before ``due_ms`` sorts before it.

Meta keys (column family ``meta``) are fixed ASCII names, listed here too so no other module
spells a key.
"""
from __future__ import annotations

import struct

from rocks_timer.errors import CorruptRecordError, InvalidMessageError
from rocks_timer.message import msg_id_bytes
from rocks_timer.names import MAX_KEY_BYTES, validate_key
from rocks_timer.timer.store import TimerKey

DUE = struct.Struct(">Q")
DUE_SIZE = DUE.size  # 8
MSG_ID_SIZE = 16
MAX_TOPIC_BYTES = 255
MAX_DUE_MS = (1 << 64) - 1
# due (8) + topic length (1) + id (16); the topic bytes come on top
FIXED_KEY_SIZE = DUE_SIZE + 1 + MSG_ID_SIZE
KEY_LAYOUT_VERSION = 1
_LENGTH_BYTES = [bytes((n,)) for n in range(256)]

# --- meta column family keys -------------------------------------------------------------------
META_FORMAT_VERSION = b"format.version"
META_KEY_LAYOUT = b"format.key_layout"
META_VALUE_CODEC = b"format.value_codec"
META_COMPACTION_STYLE = b"format.compaction_style"
META_CURSOR = b"cursor"  # raw timer key: the smallest key not yet completed
META_RECONCILE_OFFSET = b"reconcile.offset"  # u64: CommitLog offset reconciled up to
# u64: exact number of keys in ``timer`` while the key index is off or not yet built; with the
# key index at ``KEY_INDEX_VERSION`` the pending count is the sum of the topic counters and
# this row is absent (KeyIndex.ensure_built, ``stored_pending``)
META_PENDING = b"count.pending"
META_CORRUPT = b"count.corrupt"  # u64: values moved to the quarantine column family
META_LAYOUT = b"format.layout"  # "inline" or "vlog"; absent on stores made before vlog: inline
# vlog: "universal" (the index's own universal compaction) or "profile" (the index follows
# rocksdb_profile); absent on vlog stores made before it: "profile"
META_INDEX_COMPACTION = b"format.index_compaction"
META_META_COMPACTION = b"format.meta_compaction"  # absent: level (stores made before)
# vlog layout (rocks_timer.timer.rocksdb.vlog): one liveness row per value segment, and counters
META_VLOG_SEGMENT_PREFIX = b"vlog.seg."  # + u32 big-endian segment id
META_VLOG_NEXT_ID = b"vlog.next_id"  # u64
META_VLOG_COUNTERS = (b"vlog.appended_bytes", b"vlog.relocated_bytes", b"vlog.relocated_count",
                      b"vlog.released_bytes", b"vlog.released_segments", b"vlog.lost")
_SEGMENT_ID = struct.Struct(">I")


def segment_meta_key(segment_id: int) -> bytes:
    """The ``meta`` key of a value segment's liveness row."""
    return META_VLOG_SEGMENT_PREFIX + _SEGMENT_ID.pack(segment_id)


def segment_id_of(meta_key: bytes) -> int | None:
    """Inverse of :func:`segment_meta_key`; None for any other key."""
    prefix = META_VLOG_SEGMENT_PREFIX
    if len(meta_key) != len(prefix) + 4 or not meta_key.startswith(prefix):
        return None
    return _SEGMENT_ID.unpack_from(meta_key, len(prefix))[0]


def encode_key(key: TimerKey) -> bytes:
    """The timer key bytes of ``key``; InvalidMessageError for an unencodable topic, id or time."""
    return encode_key_parts(key.due_ms, key.topic, key.msg_id)


def encode_key_parts(due_ms: int, topic: str, msg_id: str) -> bytes:
    """:func:`encode_key` without building a TimerKey (the schedule hot path)."""
    if not 0 <= due_ms <= MAX_DUE_MS:
        raise InvalidMessageError(f"due time {due_ms} ms is outside 0..{MAX_DUE_MS}")
    topic_bytes = topic.encode("utf-8")
    size = len(topic_bytes)
    if not 1 <= size <= MAX_TOPIC_BYTES:
        raise InvalidMessageError(
            f"topic {topic!r} is {size} bytes; a timer key holds 1..{MAX_TOPIC_BYTES}")
    return DUE.pack(due_ms) + _LENGTH_BYTES[size] + topic_bytes + msg_id_bytes(msg_id)


def decode_key(raw: bytes) -> TimerKey:
    """Inverse of :func:`encode_key`; CorruptRecordError (keeping ``raw``) on a bad length or topic."""
    raw = bytes(raw)
    if len(raw) < FIXED_KEY_SIZE + 1:
        raise CorruptRecordError(f"timer key {raw.hex()} is {len(raw)} bytes, shorter than "
                                 f"{FIXED_KEY_SIZE + 1}", where=raw.hex(), raw=raw)
    topic_len = raw[DUE_SIZE]
    if topic_len == 0 or len(raw) != FIXED_KEY_SIZE + topic_len:
        raise CorruptRecordError(f"timer key {raw.hex()} is {len(raw)} bytes but its topic length "
                                 f"byte says {FIXED_KEY_SIZE + topic_len}", where=raw.hex(), raw=raw)
    try:
        topic = raw[DUE_SIZE + 1:DUE_SIZE + 1 + topic_len].decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptRecordError(f"timer key {raw.hex()} has a topic that is not UTF-8",
                                 where=raw.hex(), raw=raw) from None
    return TimerKey(DUE.unpack_from(raw)[0], topic, raw[-MSG_ID_SIZE:].hex().upper())


def topic_count_key(topic: bytes) -> bytes:
    return META_TOPIC_COUNT_PREFIX + topic


def key_due_ms(raw: bytes) -> int:
    """The due time of a timer key (or of any key at least 8 bytes long, such as a prefix)."""
    return DUE.unpack_from(raw)[0]


def due_prefix(due_ms: int) -> bytes:
    """8-byte bound: keys due before ``due_ms`` sort below it, keys due at or after do not.

    Times below 0 give ``b"\\x00" * 8``; times above the largest due give the largest prefix.
    """
    return DUE.pack(min(max(due_ms, 0), MAX_DUE_MS))


def key_successor(raw: bytes) -> bytes:
    """The smallest byte string sorting strictly after ``raw`` (seek here to skip ``raw``)."""
    return bytes(raw) + b"\x00"


# --- key index (in ``meta``): (topic, KEYS value) -> pending timer keys ------------------------
#
#     +--------+-----------+--------+----------------+---------+----------------+----------+
#     | "kix." | topic_len | topic  | key_len        | key     | due_ms         | msg id   |
#     | 4 B    | 1 B       | UTF-8  | 2 B big-endian | UTF-8   | 8 B big-endian | 16 B raw |
#     +--------+-----------+--------+----------------+---------+----------------+----------+
#
# In ``meta`` rather than a column family of its own, so a store keeps the column families it
# was created with (tools and older builds open it as before).
# The value is empty. Every entry of one (topic, key) shares the prefix up to the key bytes, and
# within it byte order is (due_ms, msg id) order, which is the timer key order of those
# messages (same topic): a prefix walk lists them as ``scan`` would. The entry holds every part
# of the timer key, so no second read is needed to find it.
META_KEY_INDEX_PREFIX = b"kix."
KEY_LEN = struct.Struct(">H")
MAX_INDEX_KEY_BYTES = MAX_KEY_BYTES
META_KEY_INDEX = b"format.key_index"  # present once the key index and due counters are built
# 2: the compact due counters below; a store at 1 (14-byte counter keys, u64 counts) has its
# counters rebuilt on open (KeyIndex.ensure_built). 3: the per-topic pending counters below
# too; a store at 1 or 2 has its counters rebuilt from the timer keys alone on open. 4: the
# topic counters are the durable pending count (their sum), and ``META_PENDING`` is written
# only while the key index is off (a store at 3 is upgraded on open: docs/DECISIONS.md,
# "The pending count lives in the topic counters")
KEY_INDEX_VERSION = b"4"
TOPIC_COUNTED_KEY_INDEX_VERSIONS = (b"3", KEY_INDEX_VERSION)  # topic counters kept exact
READABLE_KEY_INDEX_VERSIONS = (b"1", b"2", b"3", KEY_INDEX_VERSION)
# per-topic pending counters (column family ``meta``): key = "tpc." + the topic's UTF-8 bytes,
# value = the count as ``pack_count`` writes it; absent = 0. Changed in the WriteBatch of every
# change of the timer keys, like the due counters, so a scrape reads them in O(topics)
META_TOPIC_COUNT_PREFIX = b"tpc."
# due counters (column family ``meta``): pending keys per due second, hour and UTC day; key =
# a 2-byte prefix + the bucket number (due_ms // width) as 6 bytes big-endian, value = the
# count as a big-endian unsigned integer of as few bytes as it needs; absent = 0. Every send
# writes about 1.5 of them (a second, an hour, a day counter per distinct due time of its
# batch), so their size is write amplification: 9 B of key and value instead of 22
DUE_COUNTER_WIDTHS = ((b"ds", 1_000), (b"dh", 3_600_000), (b"dd", 86_400_000))
LEGACY_DUE_COUNTER_PREFIXES = (b"due.s.", b"due.h.", b"due.d.")  # key index version 1
DUE_BUCKET_SIZE = 6
MAX_DUE_BUCKET = (1 << (8 * DUE_BUCKET_SIZE)) - 1  # 2^48 s: dues are at most 10 years ahead


def key_index_prefix(topic: str, key: str) -> bytes:
    """The prefix every index entry of (``topic``, ``key``) starts with; InvalidMessageError
    for a topic a timer key cannot hold or a key a send refuses (``routing.validate_key``)."""
    topic_bytes = topic.encode("utf-8")
    if not 1 <= len(topic_bytes) <= MAX_TOPIC_BYTES:
        raise InvalidMessageError(
            f"topic {topic!r} is {len(topic_bytes)} bytes; a timer key holds 1..{MAX_TOPIC_BYTES}")
    key_bytes = validate_key(key).encode("utf-8")  # the rule a send's keys passed
    return (META_KEY_INDEX_PREFIX + _LENGTH_BYTES[len(topic_bytes)] + topic_bytes
            + KEY_LEN.pack(len(key_bytes)) + key_bytes)


def index_entry(raw_key: bytes, key: str) -> bytes:
    """The index entry of a timer key (raw) for one of its message's keys."""
    topic_end = DUE_SIZE + 1 + raw_key[DUE_SIZE]
    key_bytes = key.encode("utf-8")
    return (META_KEY_INDEX_PREFIX + raw_key[DUE_SIZE:topic_end] + KEY_LEN.pack(len(key_bytes))
            + key_bytes + raw_key[:DUE_SIZE] + raw_key[topic_end:])


def index_entries(raw_keys: list[bytes], keys: list[tuple[str, ...]]) -> list[bytes]:
    """:func:`index_entry` of every (``raw_keys[i]``, one of ``keys[i]``), in that order (a
    delivery batch's removals the native reader left to Python, and the reference of that
    reader)."""
    return [index_entry(raw_key, key) for raw_key, names in zip(raw_keys, keys) for key in names]


def timer_key_of_entry(entry: bytes) -> bytes:
    """The raw timer key an index entry names (inverse of :func:`index_entry`);
    CorruptRecordError on an entry whose lengths do not add up."""
    entry = bytes(entry)
    if not entry.startswith(META_KEY_INDEX_PREFIX) or len(entry) == len(META_KEY_INDEX_PREFIX):
        raise CorruptRecordError(f"{entry.hex()} is not a key index entry", where=entry.hex(),
                                 raw=entry)
    entry = entry[len(META_KEY_INDEX_PREFIX):]
    topic_end = 1 + entry[0]
    if len(entry) < topic_end + KEY_LEN.size:
        raise CorruptRecordError(f"key index entry {entry.hex()} is too short", where=entry.hex(),
                                 raw=entry)
    key_end = topic_end + KEY_LEN.size + KEY_LEN.unpack_from(entry, topic_end)[0]
    if entry[0] == 0 or len(entry) != key_end + DUE_SIZE + MSG_ID_SIZE:
        raise CorruptRecordError(f"key index entry {entry.hex()} has lengths that do not add up",
                                 where=entry.hex(), raw=entry)
    return entry[key_end:key_end + DUE_SIZE] + entry[:topic_end] + entry[-MSG_ID_SIZE:]


(_SECOND, _SECOND_MS), (_HOUR, _HOUR_MS), (_DAY, _DAY_MS) = DUE_COUNTER_WIDTHS


def due_counter_keys(due_ms: int) -> tuple[bytes, bytes, bytes]:
    """The ``meta`` keys of the second, hour and day counters a key due at ``due_ms`` counts in
    (one per ``DUE_COUNTER_WIDTHS`` level, written out: every send builds them)."""
    top = MAX_DUE_BUCKET
    return (_SECOND + min(due_ms // _SECOND_MS, top).to_bytes(DUE_BUCKET_SIZE, "big"),
            _HOUR + min(due_ms // _HOUR_MS, top).to_bytes(DUE_BUCKET_SIZE, "big"),
            _DAY + min(due_ms // _DAY_MS, top).to_bytes(DUE_BUCKET_SIZE, "big"))


def due_counter_key(prefix: bytes, bucket: int) -> bytes:
    """The ``meta`` key of counter ``bucket`` (due_ms // width) of one level."""
    return prefix + max(0, min(bucket, MAX_DUE_BUCKET)).to_bytes(DUE_BUCKET_SIZE, "big")


def due_counter_bucket(name: bytes) -> int:
    """The bucket number of a due counter key (inverse of :func:`due_counter_key`)."""
    return int.from_bytes(name[-DUE_BUCKET_SIZE:], "big")


def pack_count(count: int) -> bytes:
    """A due counter's value: ``count`` (> 0) big-endian in as few bytes as it needs."""
    return count.to_bytes((count.bit_length() + 7) // 8, "big")


def unpack_count(raw: bytes) -> int:
    return int.from_bytes(raw, "big")
