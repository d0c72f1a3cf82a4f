"""``TopicTable``: the topics this broker serves, their queue counts, and the route it answers.

Every valid topic has a route, made on first use (as a development RocketMQ broker with
``autoCreateTopicEnable`` does): ``QUEUES`` read/write queues for a normal topic, one for a
retry or dead-letter topic (as RocketMQ makes them). The table also feeds REGISTER_BROKER: the
topics a NameServer should route here, with a data version bumped whenever one is added.
Used from the front's event loop only.
"""
from __future__ import annotations

import json
from typing import Callable, Iterable

QUEUES = 4
DEFAULT_TOPIC = "TBW102"       # the topic producers fall back on for a topic nobody routes yet
PERM_READ_WRITE = 6
PERM_INHERIT = 1
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
MAX_TOPICS = 100_000


def queue_count(topic: str) -> int:
    return 1 if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)) else QUEUES


class TopicTable:
    """Known topics and the route answers built from them."""

    def __init__(self, broker_name: str, cluster: str, address: str,
                 topics: Iterable[str] = (), now_ms: int = 0):
        self.broker_name = broker_name
        self.cluster = cluster
        self.address = address
        self.known: set[str] = {t for t in topics if not t.startswith("rmq_sys_")
                                and t != "SCHEDULE_TOPIC_XXXX"}
        self.version = 1
        self.version_ms = now_ms
        self.on_new: Callable[[str], None] | None = None

    def note(self, topic: str) -> None:
        """Remember ``topic`` (a send, pull or subscription named it)."""
        if topic in self.known or len(self.known) >= MAX_TOPICS:
            return
        self.known.add(topic)
        self.version += 1
        if self.on_new is not None:
            self.on_new(topic)

    def route(self, topic: str) -> bytes:
        """GET_ROUTEINFO_BY_TOPIC's body: this broker alone, as master (id 0)."""
        queues = queue_count(topic)
        doc = {"orderTopicConf": None,
               "queueDatas": [{"brokerName": self.broker_name, "readQueueNums": queues,
                               "writeQueueNums": queues, "perm": PERM_READ_WRITE,
                               "topicSysFlag": 0}],
               "brokerDatas": [{"cluster": self.cluster, "brokerName": self.broker_name,
                                "brokerAddrs": {"0": self.address}, "enableActingMaster": False}],
               "filterServerTable": {}}
        return json.dumps(doc, separators=(",", ":")).encode("utf-8")

    def topic_configs(self) -> dict[str, dict]:
        """REGISTER_BROKER's topicConfigTable: every known topic, plus the default topic with
        the inherit permission (so producers of a topic nobody routes yet can find us) and the
        broker's own topic."""
        configs = {DEFAULT_TOPIC: _config(DEFAULT_TOPIC, QUEUES, PERM_READ_WRITE | PERM_INHERIT),
                   # a RocketMQ broker also routes a topic named after itself (tools send to
                   # one broker through it); a NameServer takes a first registration of a
                   # single topic as a late single-topic update and refuses it
                   self.broker_name: _config(self.broker_name, 1, PERM_READ_WRITE)}
        for topic in sorted(self.known):
            configs[topic] = _config(topic, queue_count(topic), PERM_READ_WRITE)
        return configs


def _config(topic: str, queues: int, perm: int) -> dict:
    return {"topicName": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": perm,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False, "attributes": {}}


__all__ = ["TopicTable", "queue_count", "QUEUES", "DEFAULT_TOPIC"]
