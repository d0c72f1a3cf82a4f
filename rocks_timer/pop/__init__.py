"""Pop consumption (RocketMQ 5's receive / ack / change-invisible-duration) over a Broker, with
the invisibility deadlines kept as records in the broker's own timer engine."""
from rocks_timer.pop.handles import ReceiptHandle, dlq_topic, retry_topic
from rocks_timer.pop.service import (DEFAULT_MAX_ATTEMPTS, InvalidInvisibleTimeError, Popped,
                                     PopService, ReceiptExpiredError)

__all__ = ["DEFAULT_MAX_ATTEMPTS", "InvalidInvisibleTimeError", "Popped", "PopService",
           "ReceiptExpiredError", "ReceiptHandle", "dlq_topic", "retry_topic"]
