"""rocks-timer: RocketMQ scheduled messages on a RocksDB timer store, beside the 18-level
ScheduleMessageService and the RIP-43 file time wheel."""
from rocks_timer.broker import Broker, SendResult
from rocks_timer.clock import Clock, ManualClock, SystemClock
from rocks_timer.config import BrokerConfig
from rocks_timer.errors import (ConfigError, CorruptRecordError, DelayOutOfRangeError,
                                EngineNotAvailableError, InvalidHandleError, InvalidMessageError,
                                PutFailedError, RocksTimerError, StoreClosedError, StoreIOError,
                                StoreLockedError, TimerFlowControlError,
                                UnsupportedOperationError)
from rocks_timer.message import Message
from rocks_timer.timer.store import KeyCancel, PendingEntry, Rescheduled, ScanPage, TimerStore

__all__ = [
    "Broker", "BrokerConfig", "Clock", "ConfigError", "CorruptRecordError",
    "DelayOutOfRangeError", "EngineNotAvailableError", "InvalidHandleError",
    "InvalidMessageError", "ManualClock", "Message", "PendingEntry", "PutFailedError",
    "RocksTimerError", "ScanPage", "SendResult", "StoreClosedError", "StoreIOError",
    "StoreLockedError", "SystemClock", "TimerFlowControlError", "TimerStore", "KeyCancel",
    "Rescheduled", "UnsupportedOperationError",
]
__version__ = "0.1.0"

