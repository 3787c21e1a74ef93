"""Service statistics: the `Stats` protocol (`ratekeeper.policy._stats`) as Prometheus metrics.

The decision engine and the transports report events through `Stats`; nothing else in the
service knows about Prometheus (envoyproxy/ratelimit keeps its stats pluggable the same way).

Label values come from the *policies*, never from requests: a metric has one series per
domain, rule and outcome that the file defines, not one per client key, user or IP. Unknown
domains (which a client could invent) are counted without a domain label.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from ..policy._stats import NullStats, Stats

__all__ = ["NullStats", "PrometheusStats", "Stats"]

#: Store round trips: tens of microseconds in memory, a few hundred to Redis on a LAN.
_STORE_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                  0.05, 0.1, 0.25, 0.5, 1.0)
_REQUEST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                    0.25, 0.5, 1.0, 2.5)


class _Histogram:
    """One histogram series kept as plain numbers: a count per bucket (the last one +Inf),
    the sum, its creation time. prometheus_client's ``observe`` takes a lock and a loop over
    the buckets; this is one bisect. Used from the event loop's thread only."""

    __slots__ = ("bounds", "counts", "created", "les", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        from prometheus_client.utils import floatToGoString  # noqa: PLC0415 (see below)

        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.created = time.time()
        #: The ``le`` label of each bucket, as prometheus_client writes it.
        self.les: list[str] = [floatToGoString(b)  # type: ignore[no-untyped-call]
                               for b in (*bounds, math.inf)]

    def observe(self, seconds: float) -> None:
        # bisect_left: a value equal to a bound is in that bucket (le is "at most").
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def add_to(self, family: Any, labels: list[str]) -> None:
        from prometheus_client.samples import Sample  # noqa: PLC0415

        buckets = []
        total = 0
        for le, n in zip(self.les, self.counts, strict=True):
            total += n
            buckets.append((le, total))
        family.add_metric(labels, buckets, self.sum)
        family.samples.append(Sample(family.name + "_created",
                                     dict(zip(family._labelnames, labels, strict=True)),
                                     self.created))


class PrometheusStats:
    """`Stats` as Prometheus metrics in a registry of their own (see docs/service.md).

    The metrics counted on every request (decisions, API calls and their durations, store
    round trips) are plain numbers here, exposed through a collector of ours: a few
    prometheus_client operations per request cost more than the decision itself. The
    rarer ones are prometheus_client's own. Every metric is collected in one place, so the
    exposition keeps its names, help, labels and order. Calls come from one thread (the
    event loop's), as the service makes them.
    """

    def __init__(self) -> None:
        # Imported here so that the rest of the service (and check-config) works without it.
        from prometheus_client import (  # noqa: PLC0415
            CollectorRegistry,
            Counter,
            Gauge,
        )
        from prometheus_client.gc_collector import GCCollector  # noqa: PLC0415
        from prometheus_client.platform_collector import PlatformCollector  # noqa: PLC0415
        from prometheus_client.process_collector import ProcessCollector  # noqa: PLC0415

        self.registry = reg = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)
        # Not registered: `_collect` yields them in their place among ours.
        self._store_errors = Counter(
            "ratekeeper_store_errors", "Store calls that failed, by exception class.",
            ["error"], registry=None)
        self._failure = Counter(
            "ratekeeper_failure_policy_decisions",
            "Checks decided by the failure policy because the store failed "
            "(policy=\"open\" counts fail-open events).",
            ["policy"], registry=None)
        self._reloads = Counter(
            "ratekeeper_config_reloads", "Policies (re)loads, by result.",
            ["result"], registry=None)
        self._generation = Gauge(
            "ratekeeper_config_generation",
            "Generation of the live policies (1 = first load; +1 per successful reload).",
            registry=None)
        self._reload_time = Gauge(
            "ratekeeper_config_last_reload_success_timestamp_seconds",
            "Wall-clock time of the last successful (re)load.", registry=None)
        #: Per series: [count, creation time].
        self._decisions: dict[tuple[str, str, str, str], list[float]] = {}
        self._requests: dict[tuple[str, str], list[float]] = {}
        self._latency: dict[str, _Histogram] = {}
        self._store_latency = _Histogram(_STORE_BUCKETS)
        for policy in ("open", "closed", "local"):
            self._failure.labels(policy)
        for result in ("ok", "error"):
            self._reloads.labels(result)
        reg.register(_Collector(self))

    def decision(self, domain: str, rule: str, policy: str, outcome: str) -> None:
        key = (domain, rule, policy, outcome)
        series = self._decisions.get(key)
        if series is None:
            if len(self._decisions) > 100_000:  # bounded by the policies; a safety net
                self._decisions.clear()
            series = self._decisions[key] = [0, time.time()]
        series[0] += 1

    def store_call(self, seconds: float, error: str | None) -> None:
        self._store_latency.observe(seconds)
        if error is not None:
            self._store_errors.labels(error).inc()

    def failure_policy(self, policy: str) -> None:
        self._failure.labels(policy).inc()

    def request(self, transport: str, result: str, seconds: float) -> None:
        series = self._requests.get((transport, result))
        if series is None:
            series = self._requests[(transport, result)] = [0, time.time()]
            if transport not in self._latency:
                self._latency[transport] = _Histogram(_REQUEST_BUCKETS)
        series[0] += 1
        self._latency[transport].observe(seconds)

    def reload(self, ok: bool, generation: int) -> None:
        self._reloads.labels("ok" if ok else "error").inc()
        if ok:
            self._generation.set(generation)
            self._reload_time.set_to_current_time()

    def _collect(self) -> Iterator[Any]:
        from prometheus_client.core import (  # noqa: PLC0415
            CounterMetricFamily,
            HistogramMetricFamily,
        )

        decisions = CounterMetricFamily(
            "ratekeeper_decisions",
            "Descriptors decided, by domain, rule, deciding limit (policy) and outcome.",
            labels=["domain", "rule", "policy", "outcome"])
        for key, (n, created) in list(self._decisions.items()):
            decisions.add_metric(list(key), n, created=created)
        yield decisions
        store = HistogramMetricFamily("ratekeeper_store_latency_seconds",
                                      "Time of one store round trip.", labels=[])
        self._store_latency.add_to(store, [])
        yield store
        yield from self._store_errors.collect()
        yield from self._failure.collect()
        requests = CounterMetricFamily("ratekeeper_requests",
                                       "API calls, by transport and result.",
                                       labels=["transport", "result"])
        for (transport, result), (n, created) in list(self._requests.items()):
            requests.add_metric([transport, result], n, created=created)
        yield requests
        latency = HistogramMetricFamily("ratekeeper_request_duration_seconds",
                                        "Time to answer one API call.", labels=["transport"])
        for transport, hist in list(self._latency.items()):
            hist.add_to(latency, [transport])
        yield latency
        yield from self._reloads.collect()
        yield from self._generation.collect()
        yield from self._reload_time.collect()

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type, for ``GET /metrics``."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _Collector:
    """`PrometheusStats`'s metrics, for its registry."""

    def __init__(self, stats: PrometheusStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        return self._stats._collect()
