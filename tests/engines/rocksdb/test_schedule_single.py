"""The single-send path of the ``vlog`` layout (``Writer.send_one``, rocksdb/transaction.py) writes exactly
what the batch path writes for the same send: every column family and every value segment,
byte for byte, after a mix of sends it takes and sends it leaves to the batch path."""
from __future__ import annotations

import random
from pathlib import Path

from rocksdict import Options, Rdict

from rocks_timer import BrokerConfig
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.rocksdb.transaction import Writer
from tests.support.rocks_support import T0, count_taken, rec

CONFIG = BrokerConfig(vlog_segment_bytes=64 << 10, rocksdb_layout="vlog")


def contents(path: Path) -> dict:
    """Every key and value of every column family, and every value segment's bytes."""
    families = Rdict.list_cf(str(path))
    db = Rdict(str(path), Options(raw_mode=True),
               column_families={name: Options(raw_mode=True) for name in families})
    out = {}
    try:
        for name in families:
            cf = db.get_column_family(name)
            out[name] = list(cf.items())
            del cf
    finally:
        db.close()
    for segment in sorted((path / "vlog").glob("*.vlog")):
        out[segment.name] = segment.read_bytes()
    return out


def sends(seed: int) -> list:
    """Sends the single path takes (new keys, 1 KiB bodies, many delay classes) and ones it
    leaves to the batch path (a retry of a stored key, KEYS, a body small enough to stay
    inline), in a seeded order."""
    rng = random.Random(seed)
    out = []
    for i in range(300):
        kind = rng.random()
        due = T0 + rng.choice((1_000, 5_000, 60_000, 3_600_000, 86_400_000 * 3)) + i
        if kind < 0.1 and out:
            out.append(out[rng.randrange(len(out))])  # a producer's retry
        elif kind < 0.2:
            out.append(rec(i, due, body=rng.randbytes(1024), keys=(f"k{i % 7}",)))
        elif kind < 0.3:
            out.append(rec(i, due, body=b"small"))
        else:
            out.append(rec(i, due, body=rng.randbytes(rng.choice((600, 1024, 3000)))))
    return out


def test_the_single_send_path_writes_what_the_batch_path_writes(tmp_path, monkeypatch):
    records = sends(5)
    with RocksTimerStore.open(tmp_path / "single", CONFIG) as store:
        taken = count_taken(monkeypatch, Writer, "send_one")
        for record in records:
            store.schedule([record], T0)
        monkeypatch.undo()
        single_pending = store.stats().pending
    with RocksTimerStore.open(tmp_path / "batch", CONFIG) as store:
        monkeypatch.setattr(Writer, "send_one", lambda *args: False)
        for record in records:
            store.schedule([record], T0)
        monkeypatch.undo()
        assert store.stats().pending == single_pending
    assert 150 < taken[0] < len(records)  # both paths ran
    assert contents(tmp_path / "single") == contents(tmp_path / "batch")
