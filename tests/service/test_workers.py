"""``ratekeeper serve --workers N``: N processes on the same ports (SO_REUSEPORT), one Redis.

The Redis test is skipped (cleanly) when ratekeeper's Redis store or a ``redis-server``
binary is missing; the memory-store refusal needs neither.
"""

from __future__ import annotations

import importlib.util
import socket
import time
import uuid
from pathlib import Path

import grpc
import httpx
import pytest

from tests.servers import RedisServer, find_server_binary
from tests.service._envoy import METHOD, RateLimitRequest, RateLimitResponse, descriptor
from tests.service._proc import ServiceProcess, run_cli

POLICIES = Path(__file__).parent / "policies" / "service.toml"


def test_workers_refuse_the_memory_store_whose_counters_would_split() -> None:
    out = run_cli(["serve", "--config", str(POLICIES), "--http-port", "0", "--grpc-port", "0",
                   "--workers", "2"])
    assert out.returncode == 2
    assert "--workers 2 needs a shared store" in out.stderr
    assert "--store redis://" in out.stderr
    out = run_cli(["serve", "--config", str(POLICIES), "--workers", "0"])
    assert out.returncode == 2 and "--workers must be 1..256, got 0" in out.stderr


def _reachable(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.redis
@pytest.mark.skipif(importlib.util.find_spec("ratekeeper.stores.redis") is None,
                    reason="ratekeeper.stores.redis is not available")
def test_two_workers_on_one_port_both_answer_and_share_the_counters(tmp_path: Path) -> None:
    if find_server_binary("redis") is None:
        pytest.skip("redis-server not found (apt-get install redis-server)")
    redis = RedisServer("redis", name="workers-test").start()
    svc = ServiceProcess(POLICIES, tmp_path / "workers.log", "--store", redis.url,
                         "--key-prefix", f"rk-w-{uuid.uuid4().hex[:8]}:",
                         "--store-timeout", "5", "--workers", "2")
    try:
        svc.start()
        pids = set(svc.wait_for(lambda r: r.get("event") == "workers")["pids"])
        assert len(pids) == 2 and svc.pid not in pids
        # Both workers have said they listen (each logs its own record, same ports).
        deadline = time.monotonic() + 20
        while sum(r.get("event") == "listening" for r in svc.records()) < 2:
            assert time.monotonic() < deadline, svc.log_tail()
            time.sleep(0.05)
        ports = {(r["http_port"], r["grpc_port"]) for r in svc.records()
                 if r.get("event") == "listening"}
        assert ports == {(svc.http_port, svc.grpc_port)}
        # A new connection each time: the kernel picks a worker per connection (by its
        # address hash), so 64 of them reach both unless one worker is not answering.
        answered = set()
        for _ in range(64):
            with httpx.Client(base_url=svc.http, timeout=10) as c:
                answered.add(c.get("/readyz").json()["pid"])
        assert answered == pids
        # One counter in Redis for both: the per-user limit (3/h) holds across workers.
        uid = uuid.uuid4().hex[:12]
        allowed = []
        for _ in range(6):
            with httpx.Client(base_url=svc.http, timeout=10) as c:
                r = c.post("/v1/check", json={"domain": "t", "descriptors": [{"user": uid}]})
                allowed.append(r.json()["allowed"])
        assert allowed == [True, True, True, False, False, False]
        # gRPC on the shared port answers too.
        req = RateLimitRequest(domain="t", descriptors=[descriptor(("user", uid))])
        with grpc.insecure_channel(svc.grpc) as ch:
            call = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
            resp = RateLimitResponse.parse(call(bytes(req), timeout=10))
        assert resp.statuses[0].limit_remaining == 0 and resp.overall_code == 2  # OVER_LIMIT
    finally:
        status = svc.stop()
        redis.stop()
    assert status == 0, svc.log_tail()
    assert not _reachable(svc.http_port)  # the workers are gone with the supervisor
