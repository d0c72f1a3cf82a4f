"""The consumer offset table lives in the library (``rocks_timer.consumer_offsets``): the broker
clamps it on open and ``Broker.check`` walks it. Kept here for the CLI's imports."""
from rocks_timer.consumer_offsets import FILE_NAME, ConsumerOffsets, check_group

__all__ = ["FILE_NAME", "ConsumerOffsets", "check_group"]
