"""Helpers for tests and simulations: a clock you move by hand.

    clock = ManualClock()
    limiter = Limiter(Limit("token-bucket", "1/s", burst=3), clock=clock)
    limiter.hit("a"); clock.advance(0.5)

`ManualClock.sleep` (and `asleep`) advance the clock instead of waiting, so `acquire` and the
decorators can be tested without sleeping: pass ``sleep=clock.sleep`` to the limiter.
"""

from __future__ import annotations

import math
import threading

__all__ = ["ManualClock"]


class ManualClock:
    """A clock that only moves when told to. Calling it returns the current time (seconds)."""

    __slots__ = ("_lock", "_now", "slept")

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()
        self.slept: list[float] = []  # every sleep requested, for assertions

    def __call__(self) -> float:
        return self._now

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now!r})"

    @property
    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move by `seconds` (backwards if negative); returns the new time."""
        if not math.isfinite(seconds):
            raise ValueError(f"cannot advance a clock by {seconds!r}")
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, t: float) -> None:
        """Jump to time `t` (backwards jumps allowed: tests of clock skew need them)."""
        self._now = float(t)

    def sleep(self, seconds: float) -> None:
        """A `time.sleep` stand-in that advances the clock instead of waiting."""
        self.slept.append(seconds)
        if seconds > 0:
            self.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        """An `asyncio.sleep` stand-in that advances the clock instead of waiting."""
        self.sleep(seconds)
