"""The service's operational surface, against real ``ratekeeper serve`` processes on loopback:
the gRPC health service, HTTP ``/healthcheck``, gRPC reflection, TLS and mTLS on the gRPC
listener, unix-socket listeners."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from tests.servers import RedisServer
from tests.service._proc import ServiceProcess
from tests.service.conftest import POLICIES

RLS = "envoy.service.ratelimit.v3.RateLimitService"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def own(tmp_path: Path) -> Iterator[list[ServiceProcess]]:
    """Services a test starts itself (stopped, by pid, at the end)."""
    procs: list[ServiceProcess] = []
    try:
        yield procs
    finally:
        for p in procs:
            p.stop()


def _health(target: str) -> tuple[grpc.Channel, health_pb2_grpc.HealthStub]:
    ch = grpc.insecure_channel(target)
    grpc.channel_ready_future(ch).result(timeout=10)
    return ch, health_pb2_grpc.HealthStub(ch)


def _check(stub: health_pb2_grpc.HealthStub, name: str) -> int:
    status: int = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status
    return status


# -- gRPC health ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["", RLS, "ratelimit"])
def test_grpc_health_serves_each_name_while_the_store_answers(service: ServiceProcess,
                                                              name: str) -> None:
    ch, stub = _health(service.grpc)
    with ch:
        assert _check(stub, name) == SERVING


def test_grpc_health_of_an_unknown_service_name_is_not_found(service: ServiceProcess) -> None:
    ch, stub = _health(service.grpc)
    with ch, pytest.raises(grpc.RpcError) as e:
        _check(stub, "no.such.Service")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_grpc_health_is_not_serving_until_the_store_answers(
        tmp_path: Path, own: list[ServiceProcess]) -> None:
    redis = RedisServer("redis")  # its port is chosen, nothing listens there yet
    svc = ServiceProcess(POLICIES, tmp_path / "svc.log", "--store", redis.url)
    own.append(svc.start())
    ch, stub = _health(svc.grpc)
    with ch:
        for name in ("", RLS):
            assert _check(stub, name) == NOT_SERVING
    # (The channel is closed first: forking redis-server while grpc's threads run aborts it.)
    redis.start()
    try:
        ch, stub = _health(svc.grpc)
        with ch:
            watch = stub.Watch(health_pb2.HealthCheckRequest(service=RLS), timeout=30)
            # NOT_SERVING until the next probe finds the store, then SERVING: at most two.
            seen = [next(watch).status]
            if seen[0] != SERVING:
                seen.append(next(watch).status)
            watch.cancel()
            assert seen[-1] == SERVING and seen[0] in (NOT_SERVING, SERVING)
            assert _check(stub, "") == SERVING
    finally:
        redis.stop()


def test_grpc_health_watch_turns_not_serving_when_shutdown_begins(
        tmp_path: Path, own: list[ServiceProcess]) -> None:
    svc = ServiceProcess(POLICIES, tmp_path / "svc.log", "--grace", "5")
    own.append(svc.start())
    ch, stub = _health(svc.grpc)
    with ch:
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
        assert next(watch).status == SERVING
        svc.send(signal.SIGTERM)
        assert next(watch).status == NOT_SERVING
    assert svc.stop() == 0


# -- HTTP /healthcheck ------------------------------------------------------------------------

def test_healthcheck_answers_ok_as_envoy_ratelimit(service: ServiceProcess) -> None:
    # envoyproxy/ratelimit src/server/health.go, HealthChecker.ServeHTTP: 200 with the body
    # "OK" while healthy, 500 with no body otherwise (test/server/health_test.go).
    r = httpx.get(f"{service.http}/healthcheck", timeout=10)
    assert (r.status_code, r.text) == (200, "OK")
    assert r.headers["content-type"].startswith("text/plain")


def test_healthcheck_is_500_while_the_store_is_unreachable(
        tmp_path: Path, own: list[ServiceProcess]) -> None:
    redis = RedisServer("redis")  # nothing listens on its port
    svc = ServiceProcess(POLICIES, tmp_path / "svc.log", "--store", redis.url)
    own.append(svc.start())
    r = httpx.get(f"{svc.http}/healthcheck", timeout=10)
    assert (r.status_code, r.content) == (500, b"")
    # /healthz is the process's liveness, still 200: only readiness depends on the store.
    assert httpx.get(f"{svc.http}/healthz", timeout=10).status_code == 200


# -- gRPC reflection --------------------------------------------------------------------------

def test_grpc_reflection_lists_and_describes_the_services(service: ServiceProcess) -> None:
    # What `grpcurl -plaintext HOST:PORT list` and `describe` ask, through grpcio-reflection's
    # own client: the services, then Envoy's request message resolved from the server alone.
    with grpc.insecure_channel(service.grpc) as ch:
        db = ProtoReflectionDescriptorDatabase(ch)
        services = set(db.get_services())
        assert {RLS, "grpc.health.v1.Health",
                "grpc.reflection.v1alpha.ServerReflection"} <= services
        pool = DescriptorPool(db)
        method = pool.FindServiceByName(RLS).FindMethodByName("ShouldRateLimit")
        assert method.input_type.full_name == "envoy.service.ratelimit.v3.RateLimitRequest"
        fields = {f.name for f in method.input_type.fields}
        assert {"domain", "descriptors", "hits_addend"} <= fields
        assert method.output_type.fields_by_name["overall_code"].enum_type is not None
