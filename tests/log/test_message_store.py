"""CommitLog + ConsumeQueue: recovery, rebuild, group commit, retention."""
import os
import shutil
import threading

import pytest

from rocks_timer import (BrokerConfig, CorruptRecordError, ManualClock, Message, PutFailedError,
                         message_store)
from rocks_timer.batch_encoder import encode_batch_py, native, prepare_batch_py
from rocks_timer.message_store import MessageStore


@pytest.fixture(autouse=True, params=["native", "python"])
def encoder(request, monkeypatch):
    """Every test here runs on the C batch encoder and on the Python reference."""
    if request.param == "python":
        monkeypatch.setattr(message_store, "encode_batch", encode_batch_py)
        monkeypatch.setattr(message_store, "prepare_batch", prepare_batch_py)
    elif native is None:
        pytest.skip("the C extension was not built")
    return request.param


def open_store(path, clock, config):
    return MessageStore.open(path, config, clock)


def put_n(store, n, topic="t", size=100, tag=None):
    return store.put_messages([Message(topic, bytes([i % 251]) * size, tags=tag) for i in range(n)])


def test_put_then_pull(tmp_path, clock, small_config):
    store = open_store(tmp_path, clock, small_config)
    results = put_n(store, 10, tag="TagA")
    assert [r.queue_offset for r in results] == list(range(10))
    pulled = store.pull("t", 0, 3, 4)
    assert [m.queue_offset for m in pulled] == [3, 4, 5, 6]
    assert pulled[0].body == bytes([3]) * 100 and pulled[0].tags == "TagA"
    assert pulled[0].store_ms == clock.now_ms()
    assert store.consume_queue("t", 0).get(2).tags_code == 2598919  # Java "TagA".hashCode()
    assert store.pull("nothing", 0, 0, 10) == []
    store.close()


def test_torn_tail_is_truncated_and_earlier_records_survive(tmp_path, clock, small_config):
    store = open_store(tmp_path, clock, small_config)
    results = put_n(store, 20)
    store.close()
    segment = tmp_path / "commitlog" / f"{0:020d}"
    cut = results[15].commitlog_offset + 37  # in the middle of record 15
    os.truncate(segment, cut)
    store = open_store(tmp_path, clock, small_config)
    assert store.max_offset == results[15].commitlog_offset
    assert [m.queue_offset for m in store.pull("t", 0, 0, 100)] == list(range(15))
    assert store.consume_queue("t", 0).max_offset == 15  # index entries past the tail dropped
    again = put_n(store, 3)
    assert [r.queue_offset for r in again] == [15, 16, 17]
    assert [m.body[:1] for m in store.pull("t", 0, 15, 10)] == [b"\x00", b"\x01", b"\x02"]
    store.close()


def test_flipped_byte_is_caught_by_crc_on_read_and_on_recovery(tmp_path, clock, small_config):
    store = open_store(tmp_path, clock, small_config)
    results = put_n(store, 10)
    store.close()
    segment = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(segment.read_bytes())
    data[results[7].commitlog_offset + 95] ^= 0xFF  # inside record 7's body
    segment.write_bytes(bytes(data))
    store = open_store(tmp_path, clock, small_config)
    # the newest segment is checked on open: record 7 is reported, the records after it kept
    assert store.max_offset == results[9].commitlog_offset + results[9].size
    assert [d.offset for d in store.commitlog.damage] == [results[7].commitlog_offset]
    assert store.stats()["corrupt_region_count"] == 1
    messages, next_offset = store.pull_page("t", 0, 0, 100)
    assert [m.queue_offset for m in messages] == [0, 1, 2, 3, 4, 5, 6, 8, 9]
    assert next_offset == 10 and store.corrupt_reads == 1
    again = put_n(store, 1)
    assert again[0].queue_offset == 10
    store.close()


def test_corrupt_record_in_an_older_segment_raises_on_read(tmp_path, clock):
    config = BrokerConfig(commitlog_segment_size=64 * 1024 + 32 * 1024,
                          max_message_size=64 * 1024).validate()
    store = open_store(tmp_path, clock, config)
    results = put_n(store, 400, size=1000)  # several segments
    store.close()
    first = results[1]
    path = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[first.commitlog_offset + 100] ^= 0x01
    path.write_bytes(bytes(data))
    store = open_store(tmp_path, clock, config)
    with pytest.raises(CorruptRecordError):
        store.get_message(first.commitlog_offset)
    pulled = store.pull("t", 0, 0, 5)  # the corrupt one is reported and skipped, not fatal
    assert [m.queue_offset for m in pulled] == [0, 2, 3, 4]
    assert store.corrupt_reads == 1
    store.close()


def test_consume_queue_is_rebuilt_after_its_files_are_deleted(tmp_path, clock, small_config):
    store = open_store(tmp_path, clock, small_config)
    put_n(store, 150, topic="a")
    put_n(store, 70, topic="b", tag="x")
    before = [(m.msg_id, m.commitlog_offset) for m in store.pull("a", 0, 0, 1000)]
    store.close()
    shutil.rmtree(tmp_path / "consumequeue" / "a")
    store = open_store(tmp_path, clock, small_config)
    assert store.rebuilt_entries == 150
    after = [(m.msg_id, m.commitlog_offset) for m in store.pull("a", 0, 0, 1000)]
    assert after == before
    assert store.consume_queue("b", 0).max_offset == 70
    store.close()


def test_group_commit_under_eight_producer_threads(tmp_path, clock, small_config):
    store = open_store(tmp_path, clock, small_config)
    per_thread, threads, results = 500, 8, {}

    def produce(t):
        futures = [store.put_message_async(Message("g", f"{t}:{i}".encode() * 10))
                   for i in range(per_thread)]
        results[t] = [f.result(30) for f in futures]

    workers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    pulled = store.pull("g", 0, 0, 10_000)
    assert len(pulled) == per_thread * threads
    assert [m.queue_offset for m in pulled] == list(range(per_thread * threads))
    bodies = {m.body for m in pulled}
    assert len(bodies) == per_thread * threads  # nothing lost, nothing interleaved
    for t in range(threads):  # each producer's order is kept
        offsets = [r.queue_offset for r in results[t]]
        assert offsets == sorted(offsets)
    assert store.groups_written < per_thread * threads  # puts really were grouped
    store.close()
    reopened = open_store(tmp_path, clock, small_config)
    assert len(reopened.pull("g", 0, 0, 10_000)) == per_thread * threads
    reopened.close()


def test_segments_roll_and_retention_follows_the_injected_clock(tmp_path, small_config):
    clock = ManualClock(0)
    store = open_store(tmp_path, clock, small_config)
    put_n(store, 2000, size=1000)  # ~2.2 MB: three 1 MiB segments
    assert len(store.commitlog.segments()) >= 3
    clock.advance(73 * 3_600_000)
    put_n(store, 1)
    removed = store.delete_expired(clock.now_ms())
    assert removed >= 2 and len(store.commitlog.segments()) >= 1
    remaining = store.pull("t", 0, 0, 5000)
    assert remaining and all(m.commitlog_offset >= store.min_offset for m in remaining)
    assert remaining[-1].store_ms == clock.now_ms()
    store.close()


def test_sync_flush_mode_round_trips(tmp_path, clock):
    config = BrokerConfig(flush_disk_type="sync").validate()
    store = open_store(tmp_path, clock, config)
    put_n(store, 50)
    assert len(store.pull("t", 0, 0, 100)) == 50
    store.close()


def test_a_sync_put_on_an_idle_store_is_written_by_the_caller(tmp_path, clock, small_config):
    store = open_store(tmp_path, clock, small_config)
    writers = []
    write = store.commitlog.write

    def recording_write(*args):
        writers.append(threading.current_thread().name)
        return write(*args)

    store.commitlog.write = recording_write
    store.put_message(Message("t", b"sync"))
    store.put_message_async(Message("t", b"async")).result()
    assert writers == [threading.current_thread().name, "commitlog-writer"]
    store.close()


def test_a_sync_put_never_overtakes_a_queued_one(tmp_path, clock, small_config):
    store = open_store(tmp_path, clock, small_config)
    future = store.put_messages_async([Message("t", b"q" * 100) for _ in range(500)])
    after = store.put_message(Message("t", b"after"))
    assert after.queue_offset == 500 and after.commitlog_offset > future.result()[-1].commitlog_offset
    store.close()


@pytest.mark.parametrize("path", ["caller", "writer thread"])
def test_a_failed_write_fails_its_puts_and_the_store_goes_on(tmp_path, clock, small_config, path):
    store = open_store(tmp_path, clock, small_config)
    write, calls = store.commitlog.write, []

    def failing_once(*args):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return write(*args)

    store.commitlog.write = failing_once
    with pytest.raises(PutFailedError, match="No space left"):
        if path == "caller":
            store.put_message(Message("t", b"lost"))
        else:
            store.wait(store.put_message_async(Message("t", b"lost")))
    assert store.put_message(Message("t", b"kept")).queue_offset == 0  # nothing was assigned
    assert [m.body for m in store.pull("t", 0, 0, 10)] == [b"kept"]
    store.close()


def test_a_message_put_alone_is_stored_as_in_a_group(tmp_path, clock, small_config):
    """Messages put alone (``put_message``) are stored as the same messages written in groups
    of many: the same records, byte for byte, the same ConsumeQueue entries, results, counts
    and arrivals, across segment rolls and several queues."""
    messages = [Message(f"t{i % 3}", bytes([i % 251]) * (20_000 + 400 * i),
                        tags=None if i % 4 else f"Tag{i}", keys=f"k{i}", msg_id=f"{i:032X}",
                        queue_id=i % 2) for i in range(90)]  # ~3.4 MB: four 1 MiB segments
    alone, grouped = (open_store(tmp_path / name, clock, small_config)
                      for name in ("alone", "grouped"))
    arrivals: dict[str, list] = {"alone": [], "grouped": []}
    alone.arrival_listeners.append(arrivals["alone"].append)
    grouped.arrival_listeners.append(arrivals["grouped"].append)
    one_by_one = [alone.put_message(m) for m in messages]
    in_groups = [r for at in range(0, len(messages), 7)
                 for r in grouped.put_messages(messages[at:at + 7])]
    assert one_by_one == in_groups
    assert len(alone.commitlog.segments()) >= 4
    for r in one_by_one:
        assert alone.commitlog.read(r.commitlog_offset, r.size) == \
            grouped.commitlog.read(r.commitlog_offset, r.size)
    for topic in ("t0", "t1", "t2"):
        for queue_id in (0, 1):
            a, g = alone.consume_queue(topic, queue_id), grouped.consume_queue(topic, queue_id)
            assert a.max_offset == g.max_offset == 15
            assert [a.get(i) for i in range(15)] == [g.get(i) for i in range(15)]
    assert alone.messages_written == grouped.messages_written == 90
    assert alone.groups_written == 90
    assert [t for topics in arrivals["alone"] for t in sorted(topics)] == \
        [m.topic for m in messages]
    assert set().union(*arrivals["alone"]) == set().union(*arrivals["grouped"])
    assert [m.body for m in alone.pull("t1", 1, 0, 20)] == \
        [m.body for m in grouped.pull("t1", 1, 0, 20)]
    alone.close()
    grouped.close()
