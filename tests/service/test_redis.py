"""Two service replicas sharing one real Redis (``--store redis://...``), over HTTP and gRPC.

Skipped (cleanly) when ratekeeper's Redis store or a ``redis-server`` binary is missing.
"""

from __future__ import annotations

import importlib.util
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from tests.servers import RedisServer, find_server_binary
from tests.service._envoy import METHOD, RateLimitRequest, RateLimitResponse, descriptor
from tests.service._proc import ServiceProcess

POLICIES = Path(__file__).parent / "policies" / "service.toml"
#: The budget of one store call in the functional tests: generous, so that a busy machine
#: cannot turn them into fault tests (the production default is 0.25 s).
FUNCTIONAL_TIMEOUT = "5"

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(importlib.util.find_spec("ratekeeper.stores.redis") is None,
                       reason="ratekeeper.stores.redis is not available"),
]


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    if find_server_binary("redis") is None:
        pytest.skip("redis-server not found (apt-get install redis-server)")
    server = RedisServer("redis", name="service-tests").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def replicas(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[ServiceProcess, ServiceProcess]]:
    redis_url = redis_server.url
    prefix = f"rk-svc-{uuid.uuid4().hex[:8]}:"
    logs = tmp_path_factory.mktemp("replicas")
    opts = ("--store", redis_url, "--key-prefix", prefix, "--store-timeout", FUNCTIONAL_TIMEOUT)
    a = ServiceProcess(POLICIES, logs / "a.log", *opts)
    b = ServiceProcess(POLICIES, logs / "b.log", *opts)
    a.start()
    try:
        b.start()
        try:
            yield a, b
        finally:
            assert b.stop() == 0
    finally:
        assert a.stop() == 0


def http_check(svc: ServiceProcess, body: dict[str, object]) -> dict[str, object]:
    r = httpx.post(f"{svc.http}/v1/check", json=body, timeout=10)
    assert r.status_code == 200, r.text
    out: dict[str, object] = r.json()
    return out


def test_replicas_share_counters_over_http_and_grpc(
        replicas: tuple[ServiceProcess, ServiceProcess]) -> None:
    a, b = replicas
    uid = uuid.uuid4().hex[:12]
    body = {"domain": "t", "descriptors": [{"user": uid}]}
    assert http_check(a, body)["allowed"] is True
    with grpc.insecure_channel(b.grpc) as ch:
        call = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        raw = call(bytes(RateLimitRequest(domain="t", descriptors=[descriptor(("user", uid))])),
                   timeout=10)
    resp = RateLimitResponse.parse(raw)
    assert resp.statuses[0].limit_remaining == 1  # replica a's hit counted
    assert http_check(a, body)["allowed"] is True
    out = http_check(b, body)
    assert out["allowed"] is False and out["degraded"] is False


def test_readiness_reports_redis(replicas: tuple[ServiceProcess, ServiceProcess]) -> None:
    for svc in replicas:
        listening = svc.wait_for(lambda rec: rec.get("event") == "listening")
        assert listening["store_timeout"] == float(FUNCTIONAL_TIMEOUT)
        r = httpx.get(f"{svc.http}/readyz", timeout=10)
        assert r.status_code == 200 and r.json()["store"].startswith("redis://")


@pytest.fixture
def fragile(redis_server: RedisServer, tmp_path: Path) -> Iterator[ServiceProcess]:
    """A replica with the production budget per store call (0.25 s): a fault test, where
    the store is made to fail (paused), so a short budget is the point, not a risk."""
    with ServiceProcess(POLICIES, tmp_path / "fragile.log", "--store", redis_server.url,
                        "--key-prefix", f"rk-svc-{uuid.uuid4().hex[:8]}:",
                        "--store-timeout", "0.25") as svc:
        yield svc


def test_store_down_fails_open_and_readiness_says_so(
        fragile: ServiceProcess, redis_server: RedisServer) -> None:
    a = fragile
    uid = uuid.uuid4().hex[:12]
    redis_server.pause()  # SIGSTOP: connections hang, every call times out (0.25 s)
    try:
        out = http_check(a, {"domain": "t", "descriptors": [{"user": uid}]})
        assert out["allowed"] is True and out["degraded"] is True  # failure = "open"
        r = httpx.get(f"{a.http}/readyz", timeout=10)
        assert r.status_code == 503 and r.json()["status"] == "unavailable"
        metrics = httpx.get(f"{a.http}/metrics", timeout=10).text
        assert 'ratekeeper_failure_policy_decisions_total{policy="open"} 1.0' in metrics
        assert a.wait_for(lambda rec: rec.get("event") == "store_failed")["level"] == "warning"
    finally:
        redis_server.resume()
    deadline = time.monotonic() + 10
    while httpx.get(f"{a.http}/readyz", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, "not ready again after Redis came back"
        time.sleep(0.1)
    out = http_check(a, {"domain": "t", "descriptors": [{"user": uid}]})
    assert out["degraded"] is False


def test_store_timeout_is_the_redis_clients_socket_timeout() -> None:
    from ratekeeper.service._server import open_store  # noqa: PLC0415

    for timeout, want in ((5.0, 5.0), (None, 0.25)):  # None: the store's default
        store, _ = open_store("redis://127.0.0.1:9/0", timeout=timeout)  # nothing connects
        assert store.timeout == want  # type: ignore[attr-defined]
