"""The legacy 4.x delay-level service: 18 levels, one ``SCHEDULE_TOPIC_XXXX`` queue per level."""
from legacy_levels.async_deliver import PendingQueue, PutResultProcess, PutStatus, resend_backoff_ms
from legacy_levels.level import LevelScanner, build_delivery_copy
from legacy_levels.offsets import DelayOffsetFile, DelayOffsetTable, decode_offsets
from legacy_levels.service import ScheduleMessageService

__all__ = [
    "DelayOffsetFile", "DelayOffsetTable", "LevelScanner", "PendingQueue", "PutResultProcess",
    "PutStatus", "ScheduleMessageService", "build_delivery_copy", "decode_offsets",
    "resend_backoff_ms",
]
