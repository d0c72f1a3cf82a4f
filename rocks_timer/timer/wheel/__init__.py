"""The RIP-43 file wheel engine: TimerWheel + TimerLog + checkpoint behind ``TimerStore``."""
from rocks_timer.timer.wheel.engine import WheelTimerStore

__all__ = ["WheelTimerStore"]
