"""`Service`: what the HTTP and gRPC transports share.

The engine (`ratekeeper.policy.Engine`), the live policies (`ratekeeper.policy.PolicyHolder`),
the stats, the body limit and the "stopping" flag that turns ``/readyz`` and ``/healthz`` to
503 during a graceful shutdown.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, Literal, TypeVar

from .._memo import Memo
from .._types import Limit
from ..core import merge_decisions
from ..http.headers import _ceil_seconds, ratelimit_headers, rejection_headers, sf_string
from ..policy._engine import CheckResult, Engine
from ..policy._holder import PolicyHolder
from ..policy._stats import NullStats, Stats
from ..stores._base import AsyncStore

__all__ = ["STORE_FAILED", "Remembered", "Service", "StoreFailed", "result_headers"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Default limit on an HTTP request body or a gRPC message (a check is a few hundred bytes).
DEFAULT_MAX_BODY = 64 * 1024

#: The detail of the error a store failure is answered with under ``store_failure="error"``.
STORE_FAILED = ("the store did not answer, so no decision was made (failure policy 'error': "
                "the caller decides; Envoy by its failure_mode_deny)")


class StoreFailed(Exception):
    """The store failed and the service answers with an error (``store_failure="error"``)."""


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
        store_failure: Literal["decide", "error"] = "decide",
        health_checks_store: bool = False,
    ) -> None:
        self.holder = holder
        #: When the store fails: ``"decide"`` lets the policies' failure policy answer (open,
        #: closed, local); ``"error"`` answers the call with an error instead (gRPC
        #: UNAVAILABLE, HTTP 503), as envoyproxy/ratelimit does (its TestCacheError), so that
        #: Envoy's ``failure_mode_deny`` decides what a store failure means.
        self.store_failure = store_failure
        #: Whether the gRPC health service and ``/healthcheck`` follow the store (NOT_SERVING
        #: / 500 while it does not answer) or only the process (SERVING until shutdown), as
        #: envoyproxy/ratelimit by default (its REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=false):
        #: the failure policy answers for a store that is down, so the service still serves.
        #: ``/readyz`` always asks the store.
        self.health_checks_store = health_checks_store
        self.store = store
        self.stats: Stats = NullStats() if stats is None else stats
        self.engine = Engine(holder, store, clock=clock, stats=self.stats)
        self.max_body = max_body
        self.store_name = store_name
        self.stopping = False

    def __repr__(self) -> str:
        return (f"Service({self.holder!r}, store={self.store_name}, "
                f"store_failure={self.store_failure}, stopping={self.stopping})")


class Remembered(Generic[K, V]):
    """`make(key)`, remembered per key: for pure functions of what a client sends (its
    request's bytes, an answer's parts), which a returning client sends again. At most
    `size` entries (a `ratekeeper._memo.Memo`); keys whose ``len`` is over `max_len` (None:
    no limit) are made afresh each time. `make` raising is never remembered, so a bad
    request is refused each time it comes."""

    __slots__ = ("_get", "_make", "_max_len", "_memo")

    def __init__(self, make: Callable[[K], V], *, size: int = 10_000,
                 max_len: int | None = 512) -> None:
        self._make, self._max_len = make, max_len
        self._memo: Memo[K, V] = Memo(size)  # bounded as `ratekeeper._memo` says why
        self._get = self._memo.get

    def __call__(self, key: K) -> V:
        got = self._get(key)
        if got is None:
            got = self._make(key)
            if self._max_len is None or len(key) <= self._max_len:  # type: ignore[arg-type]
                self._memo.put(key, got)
        return got

    def __len__(self) -> int:
        return len(self._memo)

    def __contains__(self, key: object) -> bool:
        return key in self._memo


#: The constant parts of `result_headers` per (deciding limit, consulted limits), by their
#: ids: a few per policies file; cleared when full (reloads make new limits).
_PARTS: dict[tuple[int, ...], tuple[str, str, object]] = {}
_PARTS_SIZE = 4096


def result_headers(result: CheckResult) -> list[tuple[str, str]]:
    """The response fields a caller should send its client for `result` (the RateLimit
    fields; on a rejection Retry-After too), as the middleware sends them.

    In global or domain shadow mode nothing is enforced, yet the RateLimit fields describe
    the rules it shadows, as envoyproxy/ratelimit builds its headers from the statuses before
    shadow mode turns the answer to OK: the most restrictive one (over its limit: 0 left),
    and no Retry-After, as the request passes. A rule in shadow mode of its own never shapes
    the answer (it is being tried out)."""
    d = result.decision
    if d is None:
        return _shadow_headers(result)
    if d.allowed:
        lim = d.limit
        if lim is None or result.legacy_headers:
            return ratelimit_headers(d, legacy=result.legacy_headers, policies=result.policies)
        # What ratelimit_headers answers, with the parts that are constant per set of limits
        # (the RateLimit-Policy value, the limit's name as a string item) rendered once.
        policies = result.policies
        key = (id(lim), *map(id, policies))
        parts = _PARTS.get(key)
        if parts is None:
            if len(_PARTS) >= _PARTS_SIZE:
                _PARTS.clear()
            # The entry holds the limits themselves, so their ids stay theirs while it lives.
            parts = _PARTS[key] = (ratelimit_headers(d, policies=policies)[0][1],
                                   f"{sf_string(lim.name)};r=", (lim, policies))
        return [("RateLimit-Policy", parts[0]),
                ("RateLimit", f"{parts[1]}{max(0, int(d.remaining))};"
                              f"t={_ceil_seconds(d.reset_after)}")]
    return rejection_headers(d, legacy=result.legacy_headers, policies=result.policies,
                             content_type=False)


def _shadow_headers(result: CheckResult) -> list[tuple[str, str]]:
    # Shadowed by the setting, not by their own rule's shadow_mode.
    statuses = [s for s in result.statuses
                if s.decision is not None and s.decision.limit is not None
                and s.rule is not None and not s.rule.shadow_mode]
    if not statuses:
        return []
    d = merge_decisions([s.decision for s in statuses if s.decision is not None])
    if not d.allowed:  # as the status says: over the limit is 0 left (and passes, no wait)
        d = d._replace(allowed=True, remaining=0)
    consulted: dict[str, Limit] = {}
    for s in statuses:
        for lim in s.limits:
            consulted.setdefault(lim.name, lim)
    return ratelimit_headers(d, legacy=result.legacy_headers, policies=consulted.values())
