"""envoyproxy/ratelimit's stat names through a real Envoy (issue 32 item 7): requests through
Envoy, then the StatsD lines a real UDP socket receives and the Prometheus page, with the names
and counts the Go service would emit for them (its src/stats/manager_impl.go names, its
src/limiter/base_limiter.go counting, its default statsd_exporter mapping).

Its own service, on an envoyproxy/ratelimit YAML file, started with the Go service's
environment (USE_STATSD, STATSD_HOST, STATSD_PORT, USE_PROMETHEUS, PROMETHEUS_ADDR); the
StatsD lines are the ones it flushes when it stops (the flush interval is an hour), so the
counts depend on the requests made, not on timing.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.envoy._stack import Upstream
from tests.envoy.conftest import MAIN, running_envoy
from tests.service._proc import ServiceProcess

pytestmark = pytest.mark.timeout(120)

CONFIG = """\
domain: envoy
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: generic_key
    value: gen
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: hour, requests_per_unit: 1}
"""

P = "ratelimit.service.rate_limit."


@pytest.fixture
def udp() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    yield sock
    sock.close()


def _lines(sock: socket.socket) -> list[str]:
    lines: list[str] = []
    sock.settimeout(1.0)  # sent before the service exited: already here
    while True:
        try:
            lines += sock.recv(65536).decode().split("\n")
        except TimeoutError:
            return lines


def test_requests_through_envoy_give_the_go_services_stat_names_and_counts(
        envoy_binary: str, workdir: Path, upstream: Upstream, udp: socket.socket,
        monkeypatch: pytest.MonkeyPatch, uid: str) -> None:
    config = workdir / f"go-stats-{uid}.yaml"
    config.write_text(CONFIG)
    for name, value in {"USE_STATSD": "true", "STATSD_HOST": "127.0.0.1",
                        "STATSD_PORT": str(udp.getsockname()[1]),
                        "STATS_FLUSH_INTERVAL": "1h", "USE_PROMETHEUS": "true",
                        "PROMETHEUS_ADDR": "127.0.0.1:0"}.items():
        monkeypatch.setenv(name, value)  # the service process's environment
    svc = ServiceProcess(config, workdir / f"service-go-stats-{uid}.log").start()
    try:
        rec = svc.wait_for(lambda r: r.get("event") == "listening", 10)
        with running_envoy(envoy_binary, workdir, [MAIN], {"ratekeeper": [svc.grpc_port]},
                           upstream) as env:
            # /hdr: [user=<uid>], 10 an hour: the 9th and 10th near the limit (past 8),
            # the 11th and 12th over it.
            codes = [httpx.get(env.url("main") + "/hdr", headers={"x-user": uid},
                               timeout=30).status_code for _ in range(12)]
            # /generic: [generic_key=gen, user=<uid>], detailed_metric: named by the value.
            codes += [httpx.get(env.url("main") + "/generic", headers={"x-user": uid},
                                timeout=30).status_code for _ in range(2)]
        assert codes == [200] * 10 + [429] * 2 + [200, 429]
        page = httpx.get(f"http://127.0.0.1:{rec['prometheus_port']}/metrics",
                         timeout=10).text.splitlines()
    finally:
        assert svc.stop() == 0, svc.log_tail()
    detailed = f"envoy.generic_key_gen.user_{uid}"
    counters = {name: rest for name, _, rest in (line.partition(":") for line in _lines(udp))
                if rest.endswith("|c")}
    assert counters == {
        P + "envoy.user.total_hits": "12|c",
        P + "envoy.user.within_limit": "10|c",
        P + "envoy.user.near_limit": "2|c",
        P + "envoy.user.over_limit": "2|c",
        P + detailed + ".total_hits": "2|c",
        P + detailed + ".within_limit": "1|c",
        P + detailed + ".over_limit": "1|c",
        P + detailed + ".near_limit": "1|c",  # floor(1 * 0.8) = 0: the 1st hit is near
        "ratelimit_server.ShouldRateLimit.total_requests": "14|c",
        "ratelimit.service.config_load_success": "1|c",
    }
    for line in (
        'ratelimit_service_rate_limit_total_hits{domain="envoy",key1="user"} 12',
        'ratelimit_service_rate_limit_near_limit{domain="envoy",key1="user"} 2',
        'ratelimit_service_rate_limit_over_limit{domain="envoy",key1="user"} 2',
        'ratelimit_service_rate_limit_within_limit{domain="envoy",key1="user"} 10',
        f'ratelimit_service_rate_limit_total_hits{{domain="envoy",key1="generic_key_gen",'
        f'key2="user_{uid}"}} 2',
        'ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 14',
        "ratelimit_service_config_load_success 1",
    ):
        assert line in page, line
