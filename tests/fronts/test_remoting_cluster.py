"""Two rtimer brokers registered with the real Apache RocketMQ NameServer (5.5.0: Maven Central
has no rocketmq-namesrv 5.5.1): the unmodified Java 4.x producer (namesrvAddr = the NameServer)
spreads its sends over both, both deliver their timer, level and plain messages, and a broker
killed with pending timers and restarted loses none of them. Partitioning without replication:
each message lives on one broker."""
from __future__ import annotations

import time
from collections import Counter

from tests.support.remoting_support import (JavaClient, NameServer, RtimerProcess, free_port, need_java,
                              need_namesrv, now_ms)


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"{what} did not happen in {timeout_s} s")


def brokers_of(namesrv: NameServer, topic: str) -> set[str]:
    route = namesrv.route(topic)
    return {b["brokerName"] for b in route["brokerDatas"]} if route else set()


def test_two_brokers_behind_the_real_nameserver_share_a_topic_and_lose_nothing(tmp_path):
    need_java()
    need_namesrv()
    namesrv = NameServer(tmp_path / "namesrv").start()
    ports = {"rt-a": free_port(), "rt-b": free_port()}

    def broker(name: str) -> RtimerProcess:
        return RtimerProcess(tmp_path / name, ports[name], "--namesrv-addr", namesrv.address,
                             "--broker-name", name).start()
    brokers = {name: broker(name) for name in ports}
    producer = consumer = None
    try:
        wait_for(lambda: brokers_of(namesrv, "TBW102") == set(ports), 30,
                 "both brokers registering")
        topic, group = f"CT_{now_ms() % 100000}", "cluster-group"
        producer = JavaClient.producer(namesrv.address)
        due_ms = now_ms() + 8_000
        sent = []
        for i in range(16):
            doc = {"topic": topic, "tag": "t", "keys": f"k{i}", "body": f"msg-{i}"}
            if i % 2:
                doc["props"] = {"TIMER_DELIVER_MS": str(due_ms)}
            elif i % 4 == 0:
                doc["level"] = 1
            reply = producer.send(doc)
            assert reply["status"] == "SEND_OK", reply
            sent.append(reply)
        per_broker = Counter(r["broker"] for r in sent)
        assert set(per_broker) == set(ports), per_broker  # the sends were spread over both
        wait_for(lambda: brokers_of(namesrv, topic) == set(ports), 30,
                 "both brokers registering the topic")
        # one broker dies with its timers pending and comes back on its port and data dir
        victim = sent[1]["broker"]
        brokers[victim].kill9()
        brokers[victim] = broker(victim)
        consumer = JavaClient.consumer(namesrv.address, group, topic)
        want = {f"msg-{i}" for i in range(16)}
        got = consumer.collect("received", lambda found: want <= {m["body"] for m in found},
                               timeout_s=90)
        time.sleep(2)
        while not consumer.events.empty():
            event = consumer.events.get()
            if event.get("event") == "received":
                got.append(event)
        counts = Counter(m["body"] for m in got)
        assert want <= set(counts), sorted(want - set(counts))
        assert all(counts[f"msg-{i}"] == 1 for i in range(1, 16, 2)), counts  # timers: once
        assert {m["brokerName"] for m in got} == set(ports)
        for msg in got:
            if int(msg["body"].split("-")[1]) % 2:
                assert msg["storeMs"] >= due_ms  # never early, on either broker
    finally:
        for client in (consumer, producer):
            if client is not None:
                client.close()
        for proc in brokers.values():
            proc.stop()
        namesrv.stop()
