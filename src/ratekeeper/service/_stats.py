"""Service statistics: the `Stats` protocol (`ratekeeper.policy._stats`) as Prometheus metrics.

The decision engine and the transports report events through `Stats`; nothing else in the
service knows about Prometheus (envoyproxy/ratelimit keeps its stats pluggable the same way).

Label values come from the *policies*, never from requests: a metric has one series per
domain, rule and outcome that the file defines, not one per client key, user or IP. Unknown
domains (which a client could invent) are counted without a domain label.
"""

from __future__ import annotations

from typing import Any

from ..policy._stats import NullStats, Stats

__all__ = ["NullStats", "PrometheusStats", "Stats"]

#: Store round trips: tens of microseconds in memory, a few hundred to Redis on a LAN.
_STORE_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                  0.05, 0.1, 0.25, 0.5, 1.0)
_REQUEST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                    0.25, 0.5, 1.0, 2.5)


class PrometheusStats:
    """`Stats` as Prometheus metrics in a registry of their own (see docs/service.md)."""

    def __init__(self) -> None:
        # Imported here so that the rest of the service (and check-config) works without it.
        from prometheus_client import (  # noqa: PLC0415
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
        )
        from prometheus_client.gc_collector import GCCollector  # noqa: PLC0415
        from prometheus_client.platform_collector import PlatformCollector  # noqa: PLC0415
        from prometheus_client.process_collector import ProcessCollector  # noqa: PLC0415

        self.registry = reg = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)
        self._decisions = Counter(
            "ratekeeper_decisions",
            "Descriptors decided, by domain, rule, deciding limit (policy) and outcome.",
            ["domain", "rule", "policy", "outcome"], registry=reg)
        self._store_latency = Histogram(
            "ratekeeper_store_latency_seconds", "Time of one store round trip.",
            buckets=_STORE_BUCKETS, registry=reg)
        self._store_errors = Counter(
            "ratekeeper_store_errors", "Store calls that failed, by exception class.",
            ["error"], registry=reg)
        self._failure = Counter(
            "ratekeeper_failure_policy_decisions",
            "Checks decided by the failure policy because the store failed "
            "(policy=\"open\" counts fail-open events).",
            ["policy"], registry=reg)
        self._requests = Counter(
            "ratekeeper_requests", "API calls, by transport and result.",
            ["transport", "result"], registry=reg)
        self._latency = Histogram(
            "ratekeeper_request_duration_seconds", "Time to answer one API call.",
            ["transport"], buckets=_REQUEST_BUCKETS, registry=reg)
        self._reloads = Counter(
            "ratekeeper_config_reloads", "Policies (re)loads, by result.",
            ["result"], registry=reg)
        self._generation = Gauge(
            "ratekeeper_config_generation",
            "Generation of the live policies (1 = first load; +1 per successful reload).",
            registry=reg)
        self._reload_time = Gauge(
            "ratekeeper_config_last_reload_success_timestamp_seconds",
            "Wall-clock time of the last successful (re)load.", registry=reg)
        self._children: dict[tuple[str, str, str, str], Any] = {}
        self._request_children: dict[tuple[str, str], tuple[Any, Any]] = {}
        for policy in ("open", "closed", "local"):
            self._failure.labels(policy)
        for result in ("ok", "error"):
            self._reloads.labels(result)

    def decision(self, domain: str, rule: str, policy: str, outcome: str) -> None:
        key = (domain, rule, policy, outcome)
        child = self._children.get(key)
        if child is None:
            if len(self._children) > 100_000:  # bounded by the policies; a safety net
                self._children.clear()
                self._decisions.clear()  # the series themselves, not only our handles
            child = self._children[key] = self._decisions.labels(*key)
        child.inc()

    def store_call(self, seconds: float, error: str | None) -> None:
        self._store_latency.observe(seconds)
        if error is not None:
            self._store_errors.labels(error).inc()

    def failure_policy(self, policy: str) -> None:
        self._failure.labels(policy).inc()

    def request(self, transport: str, result: str, seconds: float) -> None:
        key = (transport, result)
        pair = self._request_children.get(key)
        if pair is None:
            pair = self._request_children[key] = (self._requests.labels(transport, result),
                                                  self._latency.labels(transport))
        pair[0].inc()
        pair[1].observe(seconds)

    def reload(self, ok: bool, generation: int) -> None:
        self._reloads.labels("ok" if ok else "error").inc()
        if ok:
            self._generation.set(generation)
            self._reload_time.set_to_current_time()

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type, for ``GET /metrics``."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
