"""One error tree for everything rocks-timer rejects or detects.

Every rejection a caller can see is a subclass of :class:`RocksTimerError`; the CLI turns them
into one-line messages. Messages name the bad value and the limit it broke.
"""
from __future__ import annotations


class RocksTimerError(Exception):
    """Root of every error rocks-timer raises on purpose."""


class InvalidMessageError(RocksTimerError, ValueError):
    """A message (topic, body, properties, scheduling arguments) that cannot be stored."""


class DelayOutOfRangeError(InvalidMessageError):
    """A due time further ahead than ``timer_max_delay_sec`` allows."""


class InvalidHandleError(RocksTimerError, ValueError):
    """A cancel handle that does not decode."""


class ConfigError(RocksTimerError, ValueError):
    """A configuration value (or a stored format setting) that is out of range or mismatched."""


class EngineNotAvailableError(RocksTimerError):
    """The configured timer engine or level service is not available in this build."""


class StoreClosedError(RocksTimerError):
    """An operation on a store or broker that has been closed."""


class StoreLockedError(RocksTimerError):
    """The data directory is held by another process (for instance ``rtimer run``)."""


class TimerFlowControlError(RocksTimerError):
    """The wheel refused a send because its slot is congested (RocketMQ's
    WHEEL_TIMER_FLOW_CONTROL, ``timer_congest_num_each_slot``); nothing was stored."""


class InvalidArgumentError(RocksTimerError, ValueError):
    """A command or socket request argument outside its bounds (count, limit, queue id...)."""


class ServerBusyError(RocksTimerError):
    """The running broker's socket refused or closed a connection (connection cap, buffered
    bytes limit, idle time); nothing was done for it."""


class UnsupportedOperationError(RocksTimerError):
    """An operation the configured timer engine cannot do exactly (for instance find or
    reschedule on the file wheel, which keeps no index by key); nothing was changed."""


class StoreIOError(RocksTimerError):
    """The disk refused a read or a write (no space left, permission denied, read-only file
    system, an I/O error): not damage, and nothing to repair; ``errno`` says which when known.
    Fix the cause and try again."""

    def __init__(self, message: str, *, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


class PutFailedError(RocksTimerError):
    """A CommitLog put that did not land; callers retry it."""


class CorruptRecordError(RocksTimerError):
    """A stored record that fails its checks (CRC, magic, length, decode).

    ``where`` names the key or offset; ``raw`` keeps the bytes so nothing is silently lost.
    """

    def __init__(self, message: str, *, where: object = None, raw: bytes | None = None):
        super().__init__(message)
        self.where = where
        self.raw = raw
