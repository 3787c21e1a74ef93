"""The service's metrics: counted as plain numbers (`PrometheusStats`), exposed as
prometheus_client would expose them, with the counts of the work done."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from ratekeeper.service._stats import _REQUEST_BUCKETS, _STORE_BUCKETS, PrometheusStats

from .test_fast_paths import _app, _call

#: Events as the engine and the transports report them: (method, args).
EVENTS: list[tuple[str, tuple[Any, ...]]] = [
    ("decision", ("t", "user", "t.user", "allowed")),
    ("decision", ("t", "user", "t.user", "allowed")),
    ("decision", ("t", "user", "t.user", "rejected")),
    ("decision", ("t", "", "", "unmatched")),
    ("store_call", (0.00005, None)),  # on a bound: in that bucket (le is "at most")
    ("store_call", (0.0003, None)),
    ("store_call", (3.0, "StoreUnavailable")),  # past every bound: +Inf only
    ("failure_policy", ("open",)),
    ("request", ("http", "ok", 0.0001)),
    ("request", ("http", "ok", 0.0004)),
    ("request", ("http", "invalid", 0.002)),
    ("request", ("grpc", "ok", 7.0)),
    ("reload", (True, 1)),
    ("reload", (False, 1)),
]


def _reference(events: list[tuple[str, tuple[Any, ...]]]) -> bytes:
    """The same events on prometheus_client's own metrics (as the service counted before)."""
    reg = CollectorRegistry()
    decisions = Counter("ratekeeper_decisions",
                        "Descriptors decided, by domain, rule, deciding limit (policy) and "
                        "outcome.", ["domain", "rule", "policy", "outcome"], registry=reg)
    store = Histogram("ratekeeper_store_latency_seconds", "Time of one store round trip.",
                      buckets=_STORE_BUCKETS, registry=reg)
    errors = Counter("ratekeeper_store_errors", "Store calls that failed, by exception class.",
                     ["error"], registry=reg)
    failure = Counter("ratekeeper_failure_policy_decisions",
                      "Checks decided by the failure policy because the store failed "
                      "(policy=\"open\" counts fail-open events).", ["policy"], registry=reg)
    requests = Counter("ratekeeper_requests", "API calls, by transport and result.",
                       ["transport", "result"], registry=reg)
    latency = Histogram("ratekeeper_request_duration_seconds", "Time to answer one API call.",
                        ["transport"], buckets=_REQUEST_BUCKETS, registry=reg)
    reloads = Counter("ratekeeper_config_reloads", "Policies (re)loads, by result.",
                      ["result"], registry=reg)
    for policy in ("open", "closed", "local"):
        failure.labels(policy)
    for result in ("ok", "error"):
        reloads.labels(result)
    for name, args in events:
        if name == "decision":
            decisions.labels(*args).inc()
        elif name == "store_call":
            store.observe(args[0])
            if args[1] is not None:
                errors.labels(args[1]).inc()
        elif name == "failure_policy":
            failure.labels(*args).inc()
        elif name == "request":
            requests.labels(args[0], args[1]).inc()
            latency.labels(args[0]).observe(args[2])
        elif name == "reload":
            reloads.labels("ok" if args[0] else "error").inc()
    return generate_latest(reg)


def _ours(text: bytes) -> list[str]:
    """The ratekeeper_* lines, without the creation times (they differ by construction)
    and the gauges the reference does not keep."""
    return [line for line in text.decode().splitlines()
            if "ratekeeper_" in line and "_created" not in line
            and "ratekeeper_config_generation" not in line
            and "ratekeeper_config_last_reload" not in line]


def test_metrics_are_exposed_as_prometheus_clients_own_metrics_expose_them() -> None:
    stats = PrometheusStats()
    for name, args in EVENTS:
        getattr(stats, name)(*args)
    body, _ = stats.render()
    assert _ours(body) == _ours(_reference(EVENTS))
    text = body.decode()
    assert 'ratekeeper_decisions_total{domain="t",outcome="allowed",policy="t.user",' \
           'rule="user"} 2.0' in text
    assert 'ratekeeper_store_latency_seconds_bucket{le="5e-05"} 1.0' in text
    assert 'ratekeeper_request_duration_seconds_bucket{le="2.5",transport="grpc"} 0.0' in text
    assert 'ratekeeper_requests_created{result="ok",transport="http"}' in text
    assert "ratekeeper_config_generation 1.0" in text


def test_metrics_count_the_checks_answered() -> None:
    app = _app()
    n = 7

    async def run() -> str:
        for i in range(n):
            await _call(app, b'{"domain":"t","descriptors":[{"tenant":"m%d"}]}' % (i % 2))
        await _call(app, b'{"domain":"t"')  # invalid
        sent = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app({"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                   "method": "GET", "scheme": "http", "path": "/metrics", "raw_path": b"/metrics",
                   "root_path": "", "query_string": b"", "headers": [],
                   "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}, receive, send)
        assert sent[0]["status"] == 200
        return str(sent[1]["body"].decode())

    text = asyncio.run(run())
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert lines['ratekeeper_requests_total{result="ok",transport="http"}'] == f"{n}.0"
    assert lines['ratekeeper_requests_total{result="invalid",transport="http"}'] == "1.0"
    assert lines['ratekeeper_request_duration_seconds_count{transport="http"}'] == f"{n + 1}.0"
    assert lines['ratekeeper_decisions_total{domain="t",outcome="allowed",'
                 'policy="t.per-tenant",rule="tenant"}'] == f"{n}.0"
    # One store round trip per check (both limits of the rule in one call).
    assert lines["ratekeeper_store_latency_seconds_count"] == f"{n}.0"
