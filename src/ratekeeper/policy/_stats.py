"""Decision statistics: a small `Stats` protocol and a no-op one (the service's Prometheus
one is `ratekeeper.service._stats.PrometheusStats`).

The decision engine and the service's transports report events through `Stats`; nothing else in the
service knows about Prometheus (envoyproxy/ratelimit keeps its stats pluggable the same way).

Label values come from the *policies*, never from requests: a metric has one series per
domain, rule and outcome that the file defines, not one per client key, user or IP. Unknown
domains (which a client could invent) are counted without a domain label.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["NullStats", "Stats"]


class Stats(Protocol):
    """What the service reports. Every method must be cheap and must not raise."""

    def decision(self, domain: str, rule: str, policy: str, outcome: str) -> None:
        """One descriptor decided: its `rule`, the `policy` (limit name) that decided, and
        `outcome`: allowed, rejected, shadow_rejected, unlimited or unmatched."""

    def store_call(self, seconds: float, error: str | None) -> None:
        """One store round trip (`error`: the exception's class name, or None)."""

    def failure_policy(self, policy: str) -> None:
        """The store failed and the failure policy (open, closed, local) decided instead."""

    def request(self, transport: str, result: str, seconds: float) -> None:
        """One API call (`transport`: http or grpc; `result`: ok, invalid, unknown_domain,
        too_large, disconnected, error)."""

    def reload(self, ok: bool, generation: int) -> None:
        """A policies (re)load finished."""


class NullStats:
    """Counts nothing."""

    def decision(self, domain: str, rule: str, policy: str, outcome: str) -> None:
        pass

    def store_call(self, seconds: float, error: str | None) -> None:
        pass

    def failure_policy(self, policy: str) -> None:
        pass

    def request(self, transport: str, result: str, seconds: float) -> None:
        pass

    def reload(self, ok: bool, generation: int) -> None:
        pass
