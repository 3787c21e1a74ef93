"""Exceptions raised by ratekeeper.

Every error says what was wrong, quotes the offending value, and says how to fix it.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "InvalidCost",
    "InvalidKey",
    "InvalidLimit",
    "InvalidRate",
    "RateKeeperError",
    "RateLimitExceeded",
    "StoreError",
    "StoreUnavailable",
]


class RateKeeperError(Exception):
    """Base class of every error ratekeeper raises."""


class InvalidLimit(RateKeeperError, ValueError):
    """A `Limit` was built with parameters that cannot describe a working limit."""


class InvalidRate(InvalidLimit):
    """A rate string or rate value could not be understood.

    A kind of `InvalidLimit` (a rate is part of a limit), so a bad rate given to `Limit` is
    caught by ``except InvalidRate`` and by ``except InvalidLimit`` alike.
    """


class InvalidCost(RateKeeperError, ValueError):
    """A request cost is not a finite, positive number."""


class InvalidKey(RateKeeperError, ValueError):
    """A rate-limit key is empty, too long or not a string."""


class ConfigError(RateKeeperError, ValueError):
    """A configuration file or mapping is malformed."""


class StoreError(RateKeeperError):
    """The store answered something ratekeeper cannot interpret (corrupt state, wrong reply)."""


class StoreUnavailable(StoreError):
    """The store could not be reached in time (connection refused, timeout, circuit open)."""


class RateLimitExceeded(RateKeeperError):
    """Raised by `acquire` and the decorators when a request is not admitted.

    `decision` is the rejecting `Decision`: its `retry_after` says when to try again
    (`None` when the cost can never be admitted by the limit).
    """

    def __init__(self, decision: object, message: str | None = None) -> None:
        self.decision = decision
        super().__init__(message or f"rate limit exceeded: {decision!r}")
