"""RocketMQ statuses: the one place where library errors become ``apache.rocketmq.v2.Code``s.

The official clients check only the top-level ``Status`` of a response, and read ``OK = 20000``
as success (0 is rejected; ``MESSAGE_NOT_FOUND`` also reads as success), so every failure is a
non-OK top-level status.
"""
from __future__ import annotations

import logging

from rocks_timer.errors import (DelayOutOfRangeError, InvalidHandleError, InvalidMessageError,
                                PutFailedError, RocksTimerError, StoreClosedError,
                                TimerFlowControlError)
from rocks_timer.pop import InvalidInvisibleTimeError
from rocks_timer.proxy.protocol import Code, pb

log = logging.getLogger(__name__)


class ProxyError(Exception):
    """A request the front answers with ``code`` (a ``Code`` value) and ``message``."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


OK_CODE = Code.OK  # a plain int: ``Code.OK`` is a Python-level lookup on protobuf's enum wrapper
_OK = pb.Status(code=OK_CODE, message="OK")


def ok() -> "pb.Status":
    """The OK status, one shared instance: every response copies a status given to its
    constructor (or to ``add``), so nothing ever changes this one; never mutate it."""
    return _OK


def status(code: int, message: str) -> "pb.Status":
    return pb.Status(code=code, message=message[:1000])


def from_exception(exc: BaseException, handle_code: int = Code.INVALID_RECEIPT_HANDLE
                   ) -> "pb.Status":
    """The status a failed request answers; unexpected errors are logged and stay opaque."""
    if isinstance(exc, ProxyError):
        return status(exc.code, exc.message)
    if isinstance(exc, DelayOutOfRangeError):
        return status(Code.ILLEGAL_DELIVERY_TIME, str(exc))
    if isinstance(exc, InvalidInvisibleTimeError):
        return status(Code.ILLEGAL_INVISIBLE_TIME, str(exc))
    if isinstance(exc, InvalidHandleError):
        return status(handle_code, str(exc))
    if isinstance(exc, InvalidMessageError):
        return status(Code.BAD_REQUEST, str(exc))
    if isinstance(exc, TimerFlowControlError):
        return status(Code.TOO_MANY_REQUESTS, str(exc))
    if isinstance(exc, (StoreClosedError, PutFailedError)):
        return status(Code.INTERNAL_SERVER_ERROR, str(exc))
    if isinstance(exc, RocksTimerError):
        return status(Code.INTERNAL_SERVER_ERROR, str(exc))
    log.exception("gRPC request failed", exc_info=exc)
    return status(Code.INTERNAL_SERVER_ERROR, f"internal error: {type(exc).__name__}")
