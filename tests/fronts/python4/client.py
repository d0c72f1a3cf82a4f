"""Drives the unmodified PyPI ``rocketmq`` 0.4.4 client (the C++ core it bundles) for rtimer's
remoting tests, one JSON object per line on stdin and stdout, like tests/fronts/java.

Run with the interpreter of ``.venv-rocketmq4`` (``make rocketmq4-venv``):

    client.py send NAMESRV GROUP
    client.py consume NAMESRV GROUP TOPIC EXPRESSION

``send`` reads {"topic","tag","keys","body","level","props":{}} (or {"batch": [...]}) per line
and prints {"event":"sent",...} or {"event":"error",...}. ``consume`` prints
{"event":"received",...} per message; a body starting with "fail" is answered RECONSUME_LATER
while its reconsume_times is 0. A "stop" line ends it: the consumer shuts down (offsets
committed) and the process leaves with os._exit, keeping the client objects alive to the end
(the core may still touch them from its threads).
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

from rocketmq.client import (Message, Producer, PushConsumer, RecvMessage, SendStatus, dll,
                             ffi_check)
from rocketmq.ffi import _CConsumeStatus as ConsumeStatus

_lock = threading.Lock()


def emit(event: dict) -> None:
    with _lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def as_text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def to_message(line: dict) -> Message:
    msg = Message(line["topic"])
    if line.get("tag"):
        msg.set_tags(line["tag"])
    if line.get("keys"):
        msg.set_keys(line["keys"])
    msg.set_body(line["body"])
    if line.get("level"):
        msg.set_delay_time_level(int(line["level"]))
    for name, value in (line.get("props") or {}).items():
        msg.set_property(name, value)
    return msg


def send(namesrv: str, group: str) -> None:
    producer = Producer(group, timeout=15000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    emit({"event": "ready"})
    for text in sys.stdin:
        text = text.strip()
        if not text:
            continue
        if text == "stop":
            break
        line = json.loads(text)
        try:
            if "batch" in line:
                result = producer.send_batch([to_message(m) for m in line["batch"]])
            else:
                result = producer.send_sync(to_message(line))
            status = "SEND_OK" if result.status == SendStatus.OK else result.status.name
            emit({"event": "sent", "msgId": result.msg_id, "status": status,
                  "offset": result.offset, "sentMs": int(time.time() * 1000)})
        except Exception as exc:  # noqa: BLE001 - reported to the test
            emit({"event": "error", "error": f"{type(exc).__name__}: {exc}"})
    producer.shutdown()
    emit({"event": "stopped"})
    os._exit(0)


def consume(namesrv: str, group: str, topic: str, expression: str) -> None:
    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)

    def on_message(_consumer, handle) -> int:
        msg = RecvMessage(handle)
        body = as_text(msg.body)
        emit({"event": "received", "receivedMs": int(time.time() * 1000), "msgId": as_text(msg.id),
              "topic": as_text(msg.topic), "tags": as_text(msg.tags), "keys": as_text(msg.keys),
              "body": body,
              "reconsumeTimes": msg.reconsume_times, "queueId": msg.queue_id,
              "queueOffset": msg.queue_offset, "bornMs": msg.born_timestamp,
              "storeMs": msg.store_timestamp})
        if body.startswith("fail") and msg.reconsume_times == 0:
            return ConsumeStatus.RECONSUME_LATER.value
        return ConsumeStatus.CONSUME_SUCCESS.value

    # the wrapper's subscribe signals a failed consume by raising through ctypes (its return
    # value is then undefined): register a callback that returns the status instead
    ffi_check(dll.Subscribe(consumer._handle, topic.encode(), expression.encode()))
    consumer._register_callback(on_message)
    consumer.start()
    emit({"event": "ready"})
    for text in sys.stdin:
        if text.strip() == "stop":
            break
    consumer.shutdown()
    emit({"event": "stopped"})
    os._exit(0)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {"send": send, "consume": consume}[mode](*args)
