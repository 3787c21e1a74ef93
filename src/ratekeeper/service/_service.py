"""`Service`: what the HTTP and gRPC transports share.

The engine (`ratekeeper.policy.Engine`), the live policies (`ratekeeper.policy.PolicyHolder`),
the stats, the body limit and the "stopping" flag that turns ``/readyz`` and ``/healthz`` to
503 during a graceful shutdown.
"""

from __future__ import annotations

from collections.abc import Callable

from ..http.headers import ratelimit_headers, rejection_headers
from ..policy._engine import CheckResult, Engine
from ..policy._holder import PolicyHolder
from ..policy._stats import NullStats, Stats
from ..stores._base import AsyncStore

__all__ = ["Service", "result_headers"]

#: Default limit on an HTTP request body or a gRPC message (a check is a few hundred bytes).
DEFAULT_MAX_BODY = 64 * 1024


class Service:
    """Everything the HTTP and gRPC transports share."""

    def __init__(
        self,
        holder: PolicyHolder,
        store: AsyncStore,
        *,
        stats: Stats | None = None,
        clock: Callable[[], float] | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        store_name: str = "memory",
    ) -> None:
        self.holder = holder
        self.store = store
        self.stats: Stats = NullStats() if stats is None else stats
        self.engine = Engine(holder, store, clock=clock, stats=self.stats)
        self.max_body = max_body
        self.store_name = store_name
        self.stopping = False

    def __repr__(self) -> str:
        return f"Service({self.holder!r}, store={self.store_name}, stopping={self.stopping})"


def result_headers(result: CheckResult) -> list[tuple[str, str]]:
    """The response fields a caller should send its client for `result` (the RateLimit
    fields; on a rejection Retry-After too), as the middleware sends them."""
    d = result.decision
    if d is None:
        return []
    if d.allowed:
        return ratelimit_headers(d, legacy=result.legacy_headers, policies=result.policies)
    return rejection_headers(d, legacy=result.legacy_headers, policies=result.policies,
                             content_type=False)
