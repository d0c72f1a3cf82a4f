"""What the front tells a client on its Telemetry stream, and how a filter expression reads.

The settings reply echoes the client's settings with the server's part filled in: producers get
``publishing.max_body_size`` (a client that receives 0 refuses every send), consumers get the
retry policy (RocketMQ's default: 17 delivery attempts, then the dead-letter topic, with the
customized backoff 10s 30s 1m 2m ... 2h), a non-FIFO subscription, a batch size and a long-polling
timeout. Metrics stay off (``on`` starts an OTLP exporter in the client), except for push
consumers, which cannot run without one: they export to the broker's own sink (metrics_sink).
"""
from __future__ import annotations

import re

from rocks_timer.pop import DEFAULT_MAX_ATTEMPTS
from rocks_timer.proxy.protocol import Code, pb
from rocks_timer.proxy.status import ProxyError

BACKOFF_S = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
DEFAULT_LONG_POLL_S = 20
_TAG = re.compile(r"\s*\|\|\s*")


def reply(client: "pb.Settings", config, metrics: "pb.Endpoints | None" = None
          ) -> "pb.Settings":
    """``metrics``: where push consumers export their metrics (None: metrics off for all)."""
    out = pb.Settings()
    out.CopyFrom(client)
    out.ClearField("metric")
    out.metric.on = False
    if metrics is not None and client.client_type == pb.PUSH_CONSUMER:
        out.metric.on = True  # the PushConsumer logs errors without a meter provider
        out.metric.endpoints.CopyFrom(metrics)
    if client.client_type == pb.PRODUCER or client.HasField("publishing"):
        out.publishing.max_body_size = config.max_message_size
        out.publishing.validate_message_type = True
    if client.HasField("subscription") or client.client_type in (
            pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER):
        out.subscription.fifo = False
        out.subscription.receive_batch_size = out.subscription.receive_batch_size or 32
        if not out.subscription.long_polling_timeout.seconds:
            out.subscription.long_polling_timeout.seconds = DEFAULT_LONG_POLL_S
        attempts = client.backoff_policy.max_attempts or DEFAULT_MAX_ATTEMPTS
        out.ClearField("backoff_policy")
        out.backoff_policy.max_attempts = max(1, min(attempts, 64))
        for seconds in BACKOFF_S:
            out.backoff_policy.customized_backoff.next.add(seconds=seconds)
    return out


def tag_filter(expression: "pb.FilterExpression") -> frozenset[str] | None:
    """The tags a TAG expression accepts (None: any). SQL92 is not supported."""
    if expression.type not in (pb.FILTER_TYPE_UNSPECIFIED, pb.TAG):
        raise ProxyError(Code.UNSUPPORTED, "only TAG filter expressions are supported")
    text = expression.expression.strip()
    if not text or text == "*":
        return None
    tags = frozenset(t for t in _TAG.split(text) if t)
    if not tags or len(text) > 4096:
        raise ProxyError(Code.ILLEGAL_FILTER_EXPRESSION, f"tag expression {text[:80]!r} is "
                         "not valid")
    return tags
