"""Through a real Envoy to two ``ratekeeper serve`` replicas sharing one real Redis or Valkey
(tests/integration's server fixtures): Envoy spreads the calls over both replicas, and the
limit holds across them because the counters live in the server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.envoy._stack import EnvoyProcess, Listener, Upstream
from tests.envoy.conftest import running_envoy, running_service
from tests.integration.conftest import redis_server, valkey_server
from tests.servers import RedisServer
from tests.service._proc import ServiceProcess

__all__ = ["redis_server", "valkey_server"]  # fixtures, used by name

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

#: Generous: a busy machine must not turn these functional tests into fault tests.
STORE_TIMEOUT = "5"


@pytest.fixture(scope="module", params=["redis", "valkey"])
def shared_store_stack(request: pytest.FixtureRequest, envoy_binary: str, workdir: Path,
                       upstream: Upstream
                       ) -> Iterator[tuple[RedisServer, str, list[ServiceProcess], EnvoyProcess]]:
    server: RedisServer = request.getfixturevalue(f"{request.param}_server")
    prefix = f"rk-envoy-{uuid.uuid4().hex[:8]}:"
    opts = ("--store", server.url, "--key-prefix", prefix, "--store-timeout", STORE_TIMEOUT,
            "--require-store")
    with running_service(workdir, *opts) as a, running_service(workdir, *opts) as b, \
            running_envoy(envoy_binary, workdir, [Listener("main", "ratekeeper")],
                          {"ratekeeper": [a.grpc_port, b.grpc_port]}, upstream) as env:
        yield server, prefix, [a, b], env


def test_replicas_behind_envoy_share_one_limit_in_the_store(
        shared_store_stack: tuple[RedisServer, str, list[ServiceProcess], EnvoyProcess],
        upstream: Upstream) -> None:
    server, prefix, replicas, env = shared_store_stack
    user = uuid.uuid4().hex[:12]
    before = env.host_requests("ratekeeper")
    got = [httpx.get(env.url("main") + "/hdr", headers={"x-user": user}, timeout=30)
           for _ in range(6)]
    # [user=U]: 3 per hour, whichever replica answers.
    assert [r.status_code for r in got] == [200, 200, 200, 429, 429, 429]
    assert got[3].headers["ratelimit"].startswith('"envoy.user";r=0;')
    assert upstream.paths("x-user", user) == ["/hdr"] * 3
    # Envoy asked both replicas (round robin), so neither could have decided alone.
    after = env.host_requests("ratekeeper")
    served = {p: after.get(p, 0) - before.get(p, 0) for p in (s.grpc_port for s in replicas)}
    assert sum(served.values()) == 6 and all(n >= 1 for n in served.values()), served
    # The counter is in the server, under the service's prefix, with a TTL.
    with server.admin() as c:
        keys = [k for k in c.scan_iter(match=f"{prefix}*") if user in k]
        assert keys, f"no key of {user} under {prefix!r}"
        assert all(c.pttl(k) > 0 for k in keys)
