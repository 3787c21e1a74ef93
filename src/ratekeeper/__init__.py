"""ratekeeper: exact rate limiting from one process to a fleet.

    from ratekeeper import Limit, Limiter
    limiter = Limiter(Limit("gcra", "10/s", burst=20))
    decision = limiter.hit("user:42")
    if not decision.allowed:
        ...  # 429, Retry-After: decision.retry_after

See the README for the algorithms and their references.
"""

from __future__ import annotations

# First: importing it chooses how the compiled modules load (see ratekeeper._compiled).
from . import _compiled  # noqa: F401
from ._errors import (
    ConfigError,
    InvalidCost,
    InvalidKey,
    InvalidLimit,
    InvalidRate,
    RateKeeperError,
    RateLimitExceeded,
    StoreError,
    StoreUnavailable,
)
from ._rates import Rate, parse_rate
from ._types import ALGORITHMS, GLOBAL_KEY, Decision, Limit
from .core import FailurePolicy, merge_decisions
from .limiter import AsyncLimiter, AsyncReservation, Limiter, Reservation
from .stores import AsyncStore, MemoryStore, Store

__version__ = "0.1.0"

__all__ = [
    "ALGORITHMS",
    "GLOBAL_KEY",
    "AsyncLimiter",
    "AsyncReservation",
    "AsyncStore",
    "ConfigError",
    "Decision",
    "FailurePolicy",
    "InvalidCost",
    "InvalidKey",
    "InvalidLimit",
    "InvalidRate",
    "Limit",
    "Limiter",
    "MemoryStore",
    "Rate",
    "RateKeeperError",
    "RateLimitExceeded",
    "Reservation",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "__version__",
    "merge_decisions",
    "parse_rate",
]
