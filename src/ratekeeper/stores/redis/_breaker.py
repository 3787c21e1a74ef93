"""The circuit breaker of the Redis stores."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Literal

from ..._errors import ConfigError, StoreUnavailable

log = logging.getLogger("ratekeeper.redis")


class CircuitBreaker:
    """Stops calling an unavailable server for a while, so requests stop paying its timeout.

    * **closed**: calls go through; `failures` consecutive failures open the breaker.
    * **open**: calls raise `StoreUnavailable` at once, without I/O, for `cooldown` seconds.
    * **half-open**: after the cool-down, one call (the probe) goes through while the others
      still fail fast. If the probe succeeds the breaker closes; if it fails it opens for
      another cool-down. A probe that never reports back is replaced after a cool-down.

    Only unavailability counts as a failure; a server that answers (even with an error)
    is available. ``failures=0`` disables the breaker. Thread-safe; the closed fast path
    takes no lock.

    A hot path that wants no call at all while nothing is wrong reads `clean` (one attribute)
    and calls `before` and `success` only when it is False::

        if not breaker.clean:
            breaker.before()    # raises while open, or lets this call probe
        reply = send()          # on StoreUnavailable: breaker.failure()
        if not breaker.clean:
            breaker.success()
    """

    def __init__(
        self,
        failures: int = 5,
        cooldown: float = 0.25,
        *,
        name: str = "redis",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(failures, bool) or not isinstance(failures, int) or failures < 0:
            raise ConfigError(f"breaker failures must be a whole number >= 0, got {failures!r}")
        if not (isinstance(cooldown, (int, float)) and 0 < cooldown < math.inf):
            raise ConfigError(f"breaker cooldown must be a number of seconds > 0, got {cooldown!r}")
        self.failures = failures
        self.cooldown = float(cooldown)
        self.name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._consecutive = 0
        self._open_until: float | None = None  # None: closed
        self._probe_until: float | None = None  # a probe is out until then
        self.opened = 0  # how many times it opened
        #: Closed with no failure counted: `before` and `success` would do nothing. Read it,
        #: never set it (the breaker keeps it in step, under its lock).
        self.clean = True

    @property
    def state(self) -> Literal["closed", "open", "half-open"]:
        until = self._open_until
        if until is None:
            return "closed"
        return "open" if self._clock() < until else "half-open"

    def __repr__(self) -> str:
        return f"CircuitBreaker({self.name!r}, {self.state}, failures={self._consecutive})"

    def before(self) -> None:
        """Raise `StoreUnavailable` if no call should be made now."""
        if self._open_until is None:
            return
        with self._lock:
            until = self._open_until
            if until is None:
                return
            now = self._clock()
            if now < until:
                raise StoreUnavailable(
                    f"circuit breaker for {self.name} is open after {self._consecutive} "
                    f"consecutive failures; next probe in {until - now:.3f}s"
                )
            if self._probe_until is not None and now < self._probe_until:
                raise StoreUnavailable(
                    f"circuit breaker for {self.name} is half-open and a probe is in flight"
                )
            self._probe_until = now + self.cooldown  # this call is the probe

    def success(self) -> None:
        if self._consecutive == 0 and self._open_until is None:
            return
        with self._lock:
            was_open = self._open_until is not None
            self._consecutive = 0
            self._open_until = None
            self._probe_until = None
            self.clean = True
        if was_open:
            log.info("circuit breaker for %s closed: the store answers again", self.name)

    def failure(self) -> None:
        if self.failures == 0:
            return
        with self._lock:
            self._consecutive += 1
            self.clean = False
            now = self._clock()
            if self._open_until is not None:  # a probe (or a call from before) failed
                self._open_until = now + self.cooldown
                self._probe_until = None
                return
            if self._consecutive >= self.failures:
                self._open_until = now + self.cooldown
                self._probe_until = None
                self.opened += 1
                opened = True
            else:
                opened = False
        if opened:
            log.warning(
                "circuit breaker for %s opened after %d consecutive failures; failing fast "
                "for %.3gs", self.name, self._consecutive, self.cooldown,
            )

