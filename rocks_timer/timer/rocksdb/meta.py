"""The ``meta`` column family of the RocksDB timer store: format settings, counters, cursor.

Meta values are small: format settings are ASCII strings, counters and offsets are ``U64``
(8 bytes big-endian), the cursor is a raw timer key. Keys come from :mod:`rocks_timer.timer.keys`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from rocksdict import AccessType, Options, Rdict, WriteBatch

from rocks_timer.errors import ConfigError, CorruptRecordError
from rocks_timer.timer import keys
from rocks_timer.timer.values import VALUE_CODEC_VERSION

U64 = struct.Struct(">Q")
SIZE = U64.size  # 8
STORE_FORMAT_VERSION = 1


def format_settings(compaction_style: str) -> dict[bytes, bytes]:
    """The settings that define how the bytes on disk must be read; checked on every open."""
    return {
        keys.META_FORMAT_VERSION: str(STORE_FORMAT_VERSION).encode(),
        keys.META_KEY_LAYOUT: str(keys.KEY_LAYOUT_VERSION).encode(),
        keys.META_VALUE_CODEC: str(VALUE_CODEC_VERSION).encode(),
        keys.META_COMPACTION_STYLE: compaction_style.encode(),
    }


LAYOUTS = ("inline", "vlog")


NEW_META_COMPACTION = "universal"


def compactions(path: Path, layout: str, configured: str,
                meta_cf: str = "meta") -> tuple[str, str]:
    """How to open the ``timer`` and ``meta`` column families of the store at ``path``: the
    index ``universal`` or ``profile`` (``profiles.index_options``), ``meta`` ``universal`` or
    ``level`` (``profiles.meta_options``). A new store takes ``configured`` for a vlog index
    (``profile`` for an inline one) and a universal ``meta``; a store on disk keeps what its
    ``meta`` says, read through a read-only open before the real one (RocksDB cannot be
    reopened with another compaction style once it runs). A store made before either setting
    existed has ``profile`` and ``level``.
    """
    new = (configured if layout == "vlog" else "profile", NEW_META_COMPACTION)
    old = ("profile", "level")
    if not (path / "CURRENT").exists():
        return new
    try:
        families = [name for name in Rdict.list_cf(str(path)) if name != "default"]
        if meta_cf not in families:
            return new
        db = Rdict(str(path), Options(raw_mode=True),
                   column_families={name: Options(raw_mode=True) for name in families},
                   access_type=AccessType.read_only())
    except Exception:  # noqa: BLE001 - the real open reports what is wrong with the store
        return old
    try:
        meta = db.get_column_family(meta_cf)
        version, index, meta_style = meta.get([keys.META_FORMAT_VERSION,
                                               keys.META_INDEX_COMPACTION,
                                               keys.META_META_COMPACTION])
        del meta
    finally:
        db.close()
    if version is None:
        return new  # created, never written: load() treats it as new
    return tuple(bytes(value).decode(errors="replace") if value is not None else default
                 for value, default in zip((index, meta_style), old))


def load(db: Any, meta_cf: str, compaction_style: str, path: str,
         layout: str = "inline", index_compaction: str = "profile",
         meta_compaction: str = "level") -> "StoredState":
    """Check the format settings in ``meta`` (writing them on a new store) and read the state.

    The layout is a format setting too, but not a mismatch: a new store takes ``layout``, a store
    that has one keeps it, and a store made before layouts existed (format settings present,
    no layout) is ``inline``. ``index_compaction`` is how the index was opened
    (:func:`compactions`): a new vlog store records it, a store that has one must match it;
    likewise ``meta_compaction`` for every new store.

    The column family handles are dropped before anything can raise: a handle kept alive by a
    traceback would hold the RocksDB LOCK after ``db.close()``.
    """
    expected = format_settings(compaction_style)
    names = list(expected) + [keys.META_CURSOR, keys.META_PENDING, keys.META_CORRUPT,
                              keys.META_RECONCILE_OFFSET, keys.META_LAYOUT,
                              keys.META_INDEX_COMPACTION, keys.META_META_COMPACTION]
    meta = db.get_column_family(meta_cf)
    stored = dict(zip(names, (None if v is None else bytes(v) for v in meta.get(names))))
    del meta
    missing = check_format(stored, expected, path)
    stored_layout = stored.get(keys.META_LAYOUT)
    is_new = stored.get(keys.META_FORMAT_VERSION) is None
    if stored_layout is None:
        stored_layout = layout.encode() if is_new else b"inline"
        missing[keys.META_LAYOUT] = stored_layout
    stored_index = stored.get(keys.META_INDEX_COMPACTION)
    if is_new and stored_layout == b"vlog":
        missing[keys.META_INDEX_COMPACTION] = stored_index = index_compaction.encode()
    if (stored_index or b"profile") != index_compaction.encode():
        raise ConfigError(f"timer store {path}: format.index_compaction is "
                          f"{(stored_index or b'profile').decode(errors='replace')!r} on disk but "
                          f"the index was opened as {index_compaction!r}; reopen the store")
    stored[keys.META_INDEX_COMPACTION] = stored_index
    stored_meta = stored.get(keys.META_META_COMPACTION)
    if is_new:
        missing[keys.META_META_COMPACTION] = stored_meta = meta_compaction.encode()
    if (stored_meta or b"level") != meta_compaction.encode():
        raise ConfigError(f"timer store {path}: format.meta_compaction is "
                          f"{(stored_meta or b'level').decode(errors='replace')!r} on disk but "
                          f"meta was opened as {meta_compaction!r}; reopen the store")
    if stored_layout.decode(errors="replace") not in LAYOUTS:
        raise ConfigError(f"timer store {path}: format.layout is "
                          f"{stored_layout.decode(errors='replace')!r}; this build reads "
                          f"{', '.join(LAYOUTS)}")
    stored[keys.META_LAYOUT] = stored_layout
    state = StoredState.parse(stored)
    if missing:
        handle = db.get_column_family_handle(meta_cf)
        batch = WriteBatch(raw_mode=True)
        for name, value in missing.items():
            batch.put(name, value, handle)
        del handle
        db.write(batch)
    return state


def check_format(stored: Mapping[bytes, bytes | None], expected: Mapping[bytes, bytes],
                 path: str) -> dict[bytes, bytes]:
    """Compare stored settings with ``expected``; return the ones to write (missing ones).

    A stored value that differs is a ConfigError naming the setting and both values: the store
    never reinterprets bytes written under another format.
    """
    missing: dict[bytes, bytes] = {}
    for name, want in expected.items():
        have = stored.get(name)
        if have is None:
            missing[name] = want
        elif have != want:
            raise ConfigError(
                f"timer store {path}: {name.decode()} is {have.decode(errors='replace')!r} "
                f"on disk but this build/config uses {want.decode()!r}; open it with the matching "
                f"setting (for compaction style: a rocksdb_profile with that style) or use a new "
                f"data directory"
            )
    return missing


def pack_u64(value: int) -> bytes:
    return U64.pack(value)


def unpack_u64(name: bytes, raw: bytes | None) -> int | None:
    if raw is None:
        return None
    if len(raw) != SIZE:
        raise CorruptRecordError(f"meta value {name.decode()} is {len(raw)} bytes, expected {SIZE}",
                                 where=name.decode(), raw=bytes(raw))
    return U64.unpack(raw)[0]


@dataclass(frozen=True)
class StoredState:
    """The durable state read from ``meta`` on open."""

    cursor: bytes
    pending: int  # the pending row, 0 when absent (the key index's topic counters hold it then)
    corrupt: int
    reconcile_offset: int | None
    layout: str = "inline"
    index_compaction: str = "profile"
    meta_compaction: str = "level"

    @classmethod
    def parse(cls, stored: Mapping[bytes, bytes | None]) -> "StoredState":
        return cls(
            cursor=stored.get(keys.META_CURSOR) or b"",
            pending=unpack_u64(keys.META_PENDING, stored.get(keys.META_PENDING)) or 0,
            corrupt=unpack_u64(keys.META_CORRUPT, stored.get(keys.META_CORRUPT)) or 0,
            reconcile_offset=unpack_u64(keys.META_RECONCILE_OFFSET,
                                        stored.get(keys.META_RECONCILE_OFFSET)),
            layout=(stored.get(keys.META_LAYOUT) or b"inline").decode(),
            index_compaction=(stored.get(keys.META_INDEX_COMPACTION) or b"profile").decode(),
            meta_compaction=(stored.get(keys.META_META_COMPACTION) or b"level").decode(),
        )
