"""A store failure through a real Envoy (issue 32, item 1): with ``--failure error`` the
service answers a check it could not decide (its Redis is down) with a gRPC error, as
envoyproxy/ratelimit answers a cache error, and Envoy's ``failure_mode_deny`` decides: true
answers 500 (Envoy's ``status_on_error``), false lets the request through. Without the
option the policies' failure policy answers (open: OK), whatever ``failure_mode_deny`` says.
"""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from tests.envoy._stack import Listener, Upstream
from tests.envoy.conftest import running_envoy, running_service

pytestmark = pytest.mark.timeout(120)

DENY = Listener("deny", "ratekeeper", failure_mode_deny=True)
ALLOW = Listener("allow", "ratekeeper", failure_mode_deny=False)


def _dead_redis() -> str:
    """A redis:// URL where nothing listens (a port just bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


def _counter(stats: dict[str, int], listener: str, name: str) -> int:
    return stats.get(f"cluster.upstream.ratelimit.{listener}.{name}", 0)


def test_store_down_under_failure_error_envoy_decides_by_failure_mode_deny(
        envoy_binary: str, workdir: Path, upstream: Upstream, uid: str) -> None:
    """envoyproxy/ratelimit test/service/ratelimit_test.go::TestCacheError, through Envoy:
    the service's error lets failure_mode_deny decide, both ways."""
    with running_service(workdir, "--store", _dead_redis(), "--failure", "error") as svc, \
            running_envoy(envoy_binary, workdir, [DENY, ALLOW],
                          {"ratekeeper": [svc.grpc_port]}, upstream) as env:
        denied = httpx.get(env.url("deny") + "/hdr", headers={"x-user": uid}, timeout=30)
        admitted = httpx.get(env.url("allow") + "/hdr", headers={"x-user": uid}, timeout=30)
        stats = env.stats()
    assert denied.status_code == 500
    assert "x-envoy-ratelimited" not in denied.headers  # an error, not a rate limit
    assert admitted.status_code == 200
    assert upstream.paths("x-user", uid) == ["/hdr"]  # only the admitted one got through
    assert _counter(stats, "deny", "error") == 1
    assert _counter(stats, "allow", "error") == 1
    assert _counter(stats, "allow", "failure_mode_allowed") == 1


def test_store_down_by_default_the_failure_policy_answers_ok_whatever_failure_mode_deny(
        envoy_binary: str, workdir: Path, upstream: Upstream, uid: str) -> None:
    with running_service(workdir, "--store", _dead_redis()) as svc, \
            running_envoy(envoy_binary, workdir, [DENY],
                          {"ratekeeper": [svc.grpc_port]}, upstream) as env:
        got = httpx.get(env.url("deny") + "/hdr", headers={"x-user": uid}, timeout=30)
        stats = env.stats()
    assert got.status_code == 200
    assert got.headers.get("x-ratelimit-degraded") == "open"
    assert _counter(stats, "deny", "error") == 0
