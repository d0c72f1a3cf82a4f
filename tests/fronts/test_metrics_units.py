"""The metric counters and the collector in-process, under a manual clock, for every engine:
the native tally equals its Python reference, histograms put each value where it belongs, the
collector's values equal ``stats()``, and a bad ``--metrics-label`` is refused."""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from cli.metrics_front import parse_address, parse_labels
from rocks_timer import Broker, BrokerConfig, ManualClock, Message
from rocks_timer.errors import ConfigError
from rocks_timer.metrics import BrokerCollector, dashboard_document
from rocks_timer.metrics.collector import SNAPSHOT_BOUNDS_S
from rocks_timer.timer import keys as K
from rocks_timer.timer import tally as T
from tests.support.metrics_support import samples, series, value

T0 = 1_767_225_600_000
native = pytest.mark.skipif(T._native_tally is None, reason="the native extension is not built")


def _key(due_ms: int, topic: str, i: int) -> bytes:
    return K.encode_key_parts(due_ms, topic, f"{i:032X}")


@native
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200_000), st.sampled_from(
    ["a", "orders", "bb", "ÿ-topic"] + [f"t{i}" for i in range(20)])), max_size=300),
    st.integers(0, 200_000))
def test_native_tally_equals_its_reference(entries, store_ms):
    raws = [_key(due, topic, i) for i, (due, topic) in enumerate(entries)]
    assert T._native_tally(raws, store_ms, T.LATENESS_BOUNDS_MS) == \
        T.tally_keys_py(raws, store_ms, T.LATENESS_BOUNDS_MS)


@pytest.mark.parametrize("tally", [T.tally_keys_py] + ([T._native_tally] if T._native_tally
                                                        else []))
def test_tally_buckets_sum_and_early(tally):
    bounds = (0, 10, 100)
    raws = [_key(1000, "x", 0), _key(995, "x", 1), _key(990, "y", 2), _key(989, "y", 3),
            _key(500, "y", 4), _key(1001, "z", 5)]
    topics, counts, total, early = tally(raws, 1000, bounds)
    # lateness 0, 5, 10, 11, 500, -1: <=0 twice (0 and -1), (0,10] twice, (10,100] once, past once
    assert counts == [2, 2, 1, 1]
    assert total == 0 + 5 + 10 + 11 + 500 - 1
    assert early == 1
    assert topics == {b"x": 2, b"y": 3, b"z": 1}
    with pytest.raises(ValueError):
        tally([b"short"], 1000, bounds)


DELAY_TALLIES = [T.DelayTallyPy] + ([lambda: T._NativeDelayTally(T.DELAY_BOUNDS_MS)]
                                     if T._NativeDelayTally is not None else [])
native_delays = pytest.mark.skipif(T._NativeDelayTally is None,
                                   reason="the native DelayTally is not built")


@pytest.mark.parametrize("make", DELAY_TALLIES, ids=["python", "native"][:len(DELAY_TALLIES)])
def test_delay_tally_one_bucket_batches_and_mixed_batches(make):
    tally = make()
    tally.add([T0 + 30_000], T0)  # one send, 30 s
    tally.add([T0 + 120_000] * 3, T0)  # a batch with one delay, 2 min
    tally.add([T0 + 1_000, T0 + 7_200_000, T0 + 40 * 86_400_000], T0)  # mixed
    got = tally.as_dict()
    assert got["count"] == 7
    assert got["sum"] == 30_000 + 3 * 120_000 + 1_000 + 7_200_000 + 40 * 86_400_000
    assert got["counts"][0] == 2  # <= 60 s
    assert got["counts"][1] == 3  # <= 10 min
    assert got["counts"][3] == 1  # 2 h: <= 12 h
    assert got["counts"][-1] == 1  # past 30 d


@native_delays
@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(-10 * 86_400_000, 60 * 86_400_000), max_size=120),
                max_size=40), st.integers(0, 2 ** 62))
def test_native_delay_tally_equals_its_reference(batches, now_ms):
    """Singles, batches with one delay, mixed batches, negative delays (due in the past) and
    empty batches: the same histogram, sum and count."""
    native, reference = T._NativeDelayTally(T.DELAY_BOUNDS_MS), T.DelayTallyPy()
    for delays in batches:
        dues = [now_ms + d for d in delays]
        native.add(dues, now_ms)
        reference.add(dues, now_ms)
    assert native.as_dict() == reference.as_dict()


@native_delays
def test_native_delay_tally_is_exact_past_64_bits_and_counts_nothing_on_bad_input():
    tally = T._NativeDelayTally((10,))
    tally.add([2 ** 62] * 4, -2 ** 62)  # four delays of 2^63: the sum needs 66 bits
    tally.add([-2 ** 63], 2 ** 63 - 1)  # the most negative delay there is
    assert tally.as_dict() == {"bounds": [10], "counts": [1, 4], "sum": 2 ** 64 + 1, "count": 5}
    before = tally.as_dict()
    with pytest.raises(OverflowError):
        tally.add([1, 2 ** 64], 0)  # the first due is fine, the second is not: nothing counted
    with pytest.raises(TypeError):
        tally.add([1, "2"], 0)
    assert tally.as_dict() == before
    with pytest.raises(ValueError):
        T._NativeDelayTally((5, 5))  # bounds must increase


@pytest.mark.parametrize("make", DELAY_TALLIES, ids=["python", "native"][:len(DELAY_TALLIES)])
def test_delay_tally_under_concurrent_senders_equals_the_truth(make):
    """Four threads adding at once (the GIL switched every 10 µs, so they interleave inside
    add): the histogram equals the one counted afterwards from the same batches."""
    tally, truth = make(), T.DelayTallyPy()
    rng = random.Random(7)
    work = [[[T0 + rng.choice([500, 90_000, 7_200_000, 40 * 86_400_000]) for _ in range(
        rng.choice([1, 1, 1, 3, 100]))] for _ in range(3_000)] for _ in range(4)]
    start = threading.Barrier(len(work))

    def sender(batches):
        start.wait()
        for dues in batches:
            tally.add(dues, T0)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=sender, args=(batches,)) for batches in work]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    for batches in work:
        for dues in batches:
            truth.add(dues, T0)
    assert tally.as_dict() == truth.as_dict()
    assert truth.as_dict()["count"] == sum(len(d) for batches in work for d in batches)


@pytest.mark.parametrize("engine", ["rocksdb", "memory"])
def test_send_delays_in_stats_equal_the_sends_under_concurrent_senders(tmp_path, engine):
    """Broker.send and send_batch from four threads at once: stats()'s send delays (the
    rocketmq_delay_message_latency histogram) equal the delays of every SendResult."""
    clock = ManualClock(T0)
    with Broker.open(tmp_path / engine, BrokerConfig(timer_engine=engine), clock=clock) as broker:
        results: list[list] = [[] for _ in range(4)]

        def sender(k):
            rng = random.Random(k)
            for i in range(150):
                delay = rng.choice([800, 90_000, 5 * 3_600_000, 3 * 86_400_000])
                if i % 10 == 0:
                    results[k].extend(broker.send_batch(
                        [Message("bulk", b"b") for _ in range(rng.randint(2, 20))],
                        delay_ms=delay))
                else:
                    results[k].append(broker.send(Message("orders", b"s"), delay_ms=delay))

        threads = [threading.Thread(target=sender, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        truth = T.DelayTallyPy()
        sent = [r for part in results for r in part]
        truth.add([r.deliver_at_ms for r in sent], T0)
        assert broker.stats()["send_delays_ms"] == truth.as_dict()
        assert truth.as_dict()["count"] == len(sent) == broker.stats()["sent"]["timer"]


@pytest.mark.parametrize("engine", ["rocksdb", "wheel", "memory"])
def test_collector_equals_stats_for_every_engine(tmp_path, engine):
    clock = ManualClock(T0)
    rng = random.Random(28)
    with Broker.open(tmp_path / engine, BrokerConfig(timer_engine=engine), clock=clock) as broker:
        sent = []
        for i in range(40):
            topic = rng.choice(["orders", "billing"])
            sent.append(broker.send(Message(topic, b"x" * 50), delay_ms=rng.choice(
                [500, 2_000, 90_000, 7_200_000, 2 * 86_400_000])))
        broker.send_batch([Message("bulk", b"y") for _ in range(10)], delay_ms=3_000)
        far = broker.send(Message("orders", b"z"), delay_ms=86_400_000)
        if engine != "wheel":  # the wheel's cancel is best effort (a delete marker)
            assert broker.cancel(far.handle) is True
        clock.advance(5_000)
        for _ in range(20):
            broker.tick()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BrokerCollector(broker, {"cluster": "c", "node_type": "broker",
                                                   "node_id": "n"}))
        stats = broker.stats()
        found = samples(generate_latest(registry).decode())
        assert stats["delivered"] > 0
        assert value(found, "rtimer_pending_messages") == stats["pending"]
        assert series(found, "rtimer_pending_by_due", "bucket") == stats["due"]["buckets"]
        assert series(found, "rocketmq_timer_dequeue_total", "topic") == \
            stats["deliveries"]["by_topic"]
        assert sum(stats["deliveries"]["by_topic"].values()) == stats["delivered"]
        assert value(found, "rtimer_early_deliveries_total") == 0
        assert value(found, "rtimer_delivery_lateness_seconds_count") == stats["delivered"]
        assert value(found, "rocketmq_timer_enqueue_total") == stats["sent"]["timer"] == 51
        by_topic, complete = broker.pending_by_topic()
        assert complete and sum(by_topic.values()) == stats["pending"]
        assert series(found, "rocketmq_timing_messages", "topic") == by_topic
        snapshot = series(found, "rocketmq_timer_message_snapshot", "timer_bound_s")
        assert set(snapshot) == {str(b) for b in SNAPSHOT_BOUNDS_S} | {"+Inf"}
        assert sum(snapshot.values()) == stats["pending"]
        doc = dashboard_document(broker)  # what the dashboard draws, for every engine
        assert (doc["engine"], doc["pending"], doc["due"]) == (engine, stats["pending"],
                                                               stats["due"])
        assert doc["early"] == 0 and doc["lateness_ms"]["count"] == stats["delivered"]
        assert json.loads(json.dumps(doc)) == doc  # plain JSON
        # the snapshot from the pending entries themselves
        t0 = -(-clock.now_ms() // 1000) * 1000
        dues = [e.deliver_at_ms for e in broker.scan(limit=1000)]
        edges = [t0 + b * 1000 for b in SNAPSHOT_BOUNDS_S]
        for bound, lo, hi in zip(SNAPSHOT_BOUNDS_S, [None, *edges], edges):
            assert snapshot[str(bound)] == sum(
                1 for d in dues if (lo is None or d >= lo) and d < hi), bound


def test_pending_by_topic_stops_at_its_budget(tmp_path):
    # an engine without per-topic counters (the wheel) walks pending entries, within the budget
    config = BrokerConfig(timer_engine="wheel")
    with Broker.open(tmp_path / "b", config, clock=ManualClock(T0)) as broker:
        broker.send_batch([Message("a", b"x") for _ in range(30)], delay_ms=60_000)
        for _ in range(3):
            broker.tick()  # the wheel indexes what was sent
        assert broker.pending_by_topic(10) == ({"a": 10}, False)
        assert broker.pending_by_topic(30) == ({"a": 30}, True)


def test_rocksdb_pending_by_topic_reads_counters_past_any_budget(tmp_path):
    # RocksDB keeps exact per-topic counters (issue 28): no walk, so no budget to stop at
    with Broker.open(tmp_path / "b", BrokerConfig(), clock=ManualClock(T0)) as broker:
        broker.send_batch([Message("a", b"x") for _ in range(30)], delay_ms=60_000)
        assert broker.pending_by_topic(10) == ({"a": 30}, True)


def test_open_reports_whether_the_last_stop_was_clean(tmp_path):
    broker = Broker.open(tmp_path / "b", BrokerConfig(), clock=ManualClock(T0))
    assert broker.previous_stop_clean is True  # a new data dir
    assert broker.stats()["open"]["open_ms"] >= 0
    broker.close()
    assert (tmp_path / "b" / "broker.lock").read_bytes() == b""
    with Broker.open(tmp_path / "b", BrokerConfig(), clock=ManualClock(T0)) as broker:
        assert broker.previous_stop_clean is True
    (tmp_path / "b" / "broker.lock").write_text("12345")  # a pid left by a killed broker
    with Broker.open(tmp_path / "b", BrokerConfig(), clock=ManualClock(T0)) as broker:
        assert broker.previous_stop_clean is False


def test_metrics_options_are_checked():
    assert parse_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_address("[::1]:5557") == ("::1", 5557)
    for bad in ("5557", "host:", "host:99999", ":80"):
        with pytest.raises(ConfigError, match="HOST:PORT"):
            parse_address(bad)
    assert parse_labels(("cluster=prod", "node_id=b1")) == {"cluster": "prod", "node_id": "b1"}
    for bad in ("cluster", "=x", "1abc=x", "a-b=x"):
        with pytest.raises(ConfigError, match="NAME=VALUE"):
            parse_labels((bad,))


def test_bench_metrics_cost_smoke():
    from bench import metrics_cost
    result = metrics_cost.bench_metrics(500, 1, scrape_s=0.05)
    for variant in metrics_cost.VARIANTS:
        assert all(v > 0 for v in result[variant].values())
    assert set(result["on_vs_off"]) == {"send1", "send100", "deliver"}
    assert set(result["on_vs_off_cpu"]) == {"send1", "send100", "deliver"}
    assert result["scrape_cost"]["metrics_cpu_ms"] > 0
    assert len(metrics_cost.summary(result)) == 7


def test_bench_scraper_child_scrapes_a_real_server_until_stopped(tmp_path):
    """The "on" rounds' scraper is a process of its own (as Prometheus is): it fetches both
    pages from the real metrics server until its stdin closes, and says how many times."""
    from bench import metrics_cost
    from rocks_timer.metrics import MetricsServer

    served: list[str] = []

    class Counting(MetricsServer):
        def render(self, path):
            served.append(path)
            return super().render(path)

    with Broker.open(tmp_path / "b", BrokerConfig(), clock=ManualClock(T0)) as broker:
        server = Counting(broker, "127.0.0.1", 0, dashboard=True).start()
        try:
            scraper = metrics_cost.Scraper(f"http://{server.address}", 0.02)
            deadline = time.monotonic() + 60
            while served.count("/api/dashboard") < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            scrapes = scraper.stop()
        finally:
            server.stop()
    assert scrapes >= 3
    assert served.count("/metrics") == served.count("/api/dashboard") == scrapes


@pytest.mark.parametrize("path,n,messages", [("send1", 30, 30), ("send100", 3, 300),
                                              ("deliver", 500, 500)])
@pytest.mark.parametrize("variant", ["off", "counters"])
def test_bench_instructions_child_runs_each_path(capsys, variant, path, n, messages):
    """What callgrind counts (bench.metrics_instructions), run here without valgrind: each
    path runs and reports the messages it handled inside the counted call."""
    from bench import metrics_instructions
    metrics_instructions.child(variant, path, n)
    assert capsys.readouterr().out.split() == [str(messages)]


GRAFANA = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


def _grafana_exprs() -> list[str]:
    doc = json.loads(GRAFANA.read_text())
    return [t["expr"] for p in doc["panels"] for t in p["targets"]]


def test_grafana_dashboard_names_only_metrics_rtimer_exports(tmp_path):
    clock = ManualClock(T0)
    with Broker.open(tmp_path / "b", BrokerConfig(), clock=clock) as broker:
        broker.send(Message("orders", b"x"), delay_ms=1_000)
        clock.advance(2_000)
        broker.tick()
        broker.send(Message("orders", b"pending"), delay_ms=60_000)
        broker.consumer_offsets.commit("orders", "g", 0, 0)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BrokerCollector(broker, {"cluster": "c", "node_type": "broker",
                                                   "node_id": "n"},
                                          {"socket": lambda: ({"send": 1}, {})}))
        exported = {name for name, _ in samples(generate_latest(registry).decode())}
    used = {name for expr in _grafana_exprs()
            for name in re.findall(r"\b(?:rocketmq|rtimer)_[a-z_]+", expr)}
    assert used and used <= exported, used - exported


def test_grafana_queries_parse_in_promtool(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing under CI=true (`make prometheus` installs it)")
        pytest.skip("promtool is not installed (`make prometheus` installs Debian's prometheus)")
    rules = {"groups": [{"name": "grafana", "rules": [
        {"record": f"rtimer:grafana_{i}", "expr": expr.replace("$cluster", ".*")
         .replace("$node_id", ".*")} for i, expr in enumerate(_grafana_exprs())]}]}
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_rocksdb_count_by_topic_equals_a_scan_walk_across_pages(tmp_path):
    clock = ManualClock(T0)
    rng = random.Random(7)
    with Broker.open(tmp_path / "b", BrokerConfig(), clock=clock) as broker:
        for _ in range(30):
            broker.send_batch([Message(rng.choice(["a", "bb", "ccc"]), b"x") for _ in range(100)],
                              delay_ms=rng.randrange(1_000, 100_000))
        clock.advance(20_000)
        broker.tick()  # some delivered: the walk starts at the cursor
        expected: dict[str, int] = {}
        after = None
        while True:
            page = broker.scan(limit=500, after=after)
            for entry in page:
                expected[entry.topic] = expected.get(entry.topic, 0) + 1
            after = page.next_after
            if after is None:
                break
        pending = broker.stats()["pending"]
        assert 0 < pending < 3000 and sum(expected.values()) == pending
        assert broker.timer.count_by_topic(10_000, page=7) == (expected, True)
        assert broker.timer.count_by_topic(pending, page=300) == (expected, True)
        # read from the per-topic counters: exact whatever the budget (no keys are walked)
        assert broker.timer.count_by_topic(pending - 1, page=300) == (expected, True)


def test_bench_rocks_metrics_only_writes_its_results(tmp_path, capsys):
    from bench import rocks as bench_rocks
    assert bench_rocks.main(["--metrics-only", "--messages", "300", "--runs", "2",
                             "--scrape-every", "0.05", "--control",
                             "--results-dir", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "rocks-metrics.json").read_text())
    assert report["on"]["deliver_msgs_per_s"] > 0 and report["off"]["send1_msgs_per_cpu_s"] > 0
    for variant in ("counters", "on", "off-again"):  # one paired ratio per run and path
        assert all(len(ratios) == 2 for ratios in report[f"{variant}_vs_off_cpu_by_run"].values())
    out = capsys.readouterr().out
    assert "metrics on / off: Broker.send" in out and "control: off / off again" in out


def test_run_refuses_bad_metrics_options_before_opening_anything(tmp_path):
    from click.testing import CliRunner

    from cli.main import cli
    for args, message in ((["--dashboard"], "give --metrics-listen"),
                          (["--metrics-label", "a=b"], "goes with --metrics-listen"),
                          (["--metrics-listen", "127.0.0.1:x"], "HOST:PORT"),
                          (["--metrics-listen", "127.0.0.1:0", "--metrics-label", "9=x"],
                           "NAME=VALUE")):
        result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path / "d"), "run",
                                          "--grpc-listen", "off", *args])
        assert result.exit_code != 0 and message in result.output, (args, result.output)
        assert not (tmp_path / "d").exists()


def test_a_taken_port_is_a_clear_error(tmp_path):
    import socket

    from rocks_timer.metrics import MetricsServer
    with socket.socket() as taken, \
            Broker.open(tmp_path / "b", BrokerConfig(), clock=ManualClock(T0)) as broker:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ConfigError, match="metrics cannot listen on 127.0.0.1"):
            MetricsServer(broker, "127.0.0.1", taken.getsockname()[1])


def test_a_failing_service_makes_the_store_unhealthy_in_the_scrape(tmp_path):
    from rocks_timer.errors import CorruptRecordError
    with Broker.open(tmp_path / "b", BrokerConfig(), clock=ManualClock(T0)) as broker:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BrokerCollector(broker, {"cluster": "c", "node_type": "broker",
                                                   "node_id": "n"}))
        found = samples(generate_latest(registry).decode())
        assert value(found, "rtimer_store_healthy") == 1
        assert series(found, "rtimer_service_failures", "where") == {}
        for _ in range(3):
            broker.health.failed("timer delivery", CorruptRecordError("a damaged block"),
                                 quiet=True)
        found = samples(generate_latest(registry).decode())
        assert value(found, "rtimer_store_healthy") == 0
        assert value(found, "rtimer_store_problems", kind="service_failures") == 1
        assert value(found, "rtimer_service_failures", where="timer delivery",
                     error_type="CorruptRecordError") == 3


def test_the_http_server_is_bounded(tmp_path):
    import socket
    import urllib.error
    import urllib.request

    from rocks_timer.metrics import MetricsServer
    from rocks_timer.metrics.server import MAX_CONNECTIONS
    with Broker.open(tmp_path / "b", BrokerConfig(), clock=ManualClock(T0)) as broker:
        server = MetricsServer(broker, "127.0.0.1", 0).start()
        idle = []
        try:
            url = f"http://{server.address}"
            request = urllib.request.Request(url + "/metrics", data=b"x", method="POST")
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(request, timeout=10)
            assert err.value.code == 501
            with pytest.raises(urllib.error.HTTPError) as err:  # no dashboard unless asked
                urllib.request.urlopen(url + "/api/dashboard", timeout=10)
            assert err.value.code == 404
            for _ in range(MAX_CONNECTIONS):  # clients that connect and send nothing
                sock = socket.create_connection(server.server_address[:2], timeout=10)
                idle.append(sock)
            deadline = time.monotonic() + 10
            while True:  # the slots fill as the server accepts them
                extra = socket.create_connection(server.server_address[:2], timeout=10)
                reply = extra.recv(200)
                extra.close()
                if reply.startswith(b"HTTP/1.1 503") or time.monotonic() > deadline:
                    break
            assert reply.startswith(b"HTTP/1.1 503")
        finally:
            for sock in idle:
                sock.close()
            server.stop()
