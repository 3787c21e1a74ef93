"""envoyproxy/ratelimit's stats under its names (issue 32 item 7): what `GoStats` counts for
a known sequence of decisions, as StatsD lines received on a real UDP socket and as the
Prometheus page its default statsd_exporter mapping gives; and `ratekeeper serve` reading
the Go service's settings for them."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from ratekeeper.policy._engine import make_descriptor
from ratekeeper.policy._envoy_config import parse_envoy_config
from ratekeeper.service._gostats import (
    GoStats,
    GoStatsEngine,
    GoStatsOptions,
    go_duration,
    options_from_env,
    sanitize_stat_name,
)
from ratekeeper.service._server import ServeOptions, serve
from ratekeeper.service.proto.envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.testing import ManualClock

POLICIES = """\
domain: test
descriptors:
  - key: key1
    value: value1
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: key2
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: outer
    descriptors:
      - key: inner
        value: deep
        descriptors:
          - key: leaf
            rate_limit: {unit: minute, requests_per_unit: 1}
"""

P = "ratelimit.service.rate_limit."


@pytest.fixture
def udp() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5.0)
    yield sock
    sock.close()


def _lines(sock: socket.socket) -> list[str]:
    """Every StatsD line waiting on `sock`, in datagrams of at most 1432 bytes."""
    lines: list[str] = []
    sock.settimeout(0.5)  # what was sent is already there: a local datagram is not delayed
    while True:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return lines
        assert len(data) <= 1432
        lines += data.decode().split("\n")


def _received(sock: socket.socket) -> dict[str, str]:
    """The counters among `_lines`, as name -> "value|c" (each name once per flush)."""
    counters: dict[str, str] = {}
    for line in _lines(sock):
        name, _, rest = line.partition(":")
        if rest.endswith("|c"):
            assert name not in counters, f"{name} twice in one flush"
            counters[name] = rest
    return counters


@pytest.fixture
def made() -> Iterator[list[GoStats]]:
    stats: list[GoStats] = []
    yield stats
    for go in stats:
        go.close()


@pytest.fixture
def engine_for(made: list[GoStats]) -> Any:
    def make(options: GoStatsOptions) -> tuple[GoStatsEngine, GoStats]:
        snap = parse_envoy_config([("test.yaml", POLICIES)])
        clock = ManualClock(1_700_000_040.0)  # 20 s into a minute: one window for the test
        engine = GoStatsEngine(lambda: snap, MemoryStore(), clock=clock)
        engine.go_stats = go = GoStats(options)
        made.append(go)
        return engine, go
    return make


async def _check(engine: GoStatsEngine, *entries: tuple[str, str], hits: float = 1.0) -> bool:
    result = await engine.check("test", [make_descriptor(entries)], hits)
    return result.allowed


async def _known_sequence(engine: GoStatsEngine) -> None:
    # 12 hits of 1 on a limit of 10 (near threshold floor(10 * 0.8) = 8): the 9th and
    # 10th are near the limit, the 11th and 12th over it.
    answers = [await _check(engine, ("key1", "value1")) for _ in range(12)]
    assert answers == [True] * 10 + [False] * 2
    # Shadow mode, hits_addend 3 on 5 (threshold 4): within 3, then 3 more, of which
    # 1 is over (6 > 5), 1 near (between 4 and 5), and the over one counts in shadow_mode.
    assert await _check(engine, ("key2", "anything"), hits=3)
    assert await _check(engine, ("key2", "anything"), hits=3)  # shadow: answered OK
    # detailed_metric: one stat per request value (capped), "detailed_<value>".
    for value in ("a", "a", "b"):
        assert await _check(engine, ("detailed", value))
    assert await _check(engine, ("free", "x"))  # unlimited: no stats, as Go
    assert await _check(engine, ("nothing", "x"))  # no rule: no stats
    assert await _check(engine, ("outer", "o"), ("inner", "deep"), ("leaf", "1.2.3.4"))


async def test_statsd_lines_name_each_rule_by_its_key_path_and_count_as_the_go_service(
        udp: socket.socket, engine_for: Any) -> None:
    engine, go = engine_for(GoStatsOptions(statsd=udp.getsockname()))
    await _known_sequence(engine)
    assert go.flush() > 0
    assert _received(udp) == {
        P + "test.key1_value1.total_hits": "12|c",
        P + "test.key1_value1.within_limit": "10|c",
        P + "test.key1_value1.near_limit": "2|c",
        P + "test.key1_value1.over_limit": "2|c",
        P + "test.key2.total_hits": "6|c",
        P + "test.key2.within_limit": "3|c",
        P + "test.key2.near_limit": "1|c",
        P + "test.key2.over_limit": "1|c",
        P + "test.key2.shadow_mode": "1|c",
        P + "test.detailed_a.total_hits": "2|c",
        P + "test.detailed_a.within_limit": "2|c",
        P + "test.detailed_a.near_limit": "1|c",  # floor(2 * 0.8) = 1: the 2nd is near
        P + "test.detailed_b.total_hits": "1|c",
        P + "test.detailed_b.within_limit": "1|c",
        P + "test.outer.inner_deep.leaf.total_hits": "1|c",
        P + "test.outer.inner_deep.leaf.within_limit": "1|c",
        P + "test.outer.inner_deep.leaf.near_limit": "1|c",
    }
    # A flush sends what changed since the last one: nothing, then the new hit alone.
    assert go.flush() == 0
    assert not await _check(engine, ("key1", "value1"))
    go.flush()
    assert _received(udp) == {P + "test.key1_value1.total_hits": "1|c",
                              P + "test.key1_value1.over_limit": "1|c"}


async def test_extra_tags_are_added_to_every_statsd_name_as_gostats_writes_them(
        udp: socket.socket, engine_for: Any) -> None:
    engine, go = engine_for(GoStatsOptions(statsd=udp.getsockname(),
                                        extra_tags=(("zone", "b"), ("app", "x"))))
    assert await _check(engine, ("detailed", "a"))
    go.request("grpc", "ok", 0.0042)
    go.request("grpc", "ok", 0.0049)
    go.request("grpc", "invalid", 0.0001)
    go.flush()
    tags = ".__app=x.__zone=b"
    # Response times in whole milliseconds, as the Go interceptor: 4.2 and 4.9 ms are both
    # 4 ms, one line with sample rate 1/2 (StatsD counts it twice), 0.1 ms is 0 ms.
    assert sorted(_lines(udp)) == sorted([
        P + "test.detailed_a.total_hits" + tags + ":1|c",
        P + "test.detailed_a.within_limit" + tags + ":1|c",
        "ratelimit_server.ShouldRateLimit.total_requests" + tags + ":3|c",
        "ratelimit.service.call.should_rate_limit.service_error" + tags + ":1|c",
        "ratelimit_server.ShouldRateLimit.response_time" + tags + ":4|ms|@0.5",
        "ratelimit_server.ShouldRateLimit.response_time" + tags + ":0|ms",
    ])


async def test_request_names_are_capped_and_then_count_under_the_configured_key(
        udp: socket.socket, engine_for: Any) -> None:
    engine, go = engine_for(GoStatsOptions(statsd=udp.getsockname(), max_request_names=2))
    for value in ("a", "b", "c", "d"):
        assert await _check(engine, ("detailed", value))
    go.flush()
    got = _received(udp)
    assert {n.rsplit(".", 1)[0] for n in got} == {
        P + "test.detailed_a", P + "test.detailed_b", P + "test.detailed"}
    assert got[P + "test.detailed.total_hits"] == "2|c"


async def test_prometheus_page_has_the_names_of_the_go_services_default_mapping(
        engine_for: Any) -> None:
    engine, go = engine_for(GoStatsOptions())
    await _known_sequence(engine)
    go.request("grpc", "ok", 0.003)
    go.request("http", "invalid", 0.001)
    go.reload(True)
    go.reload(False)
    page = go.prometheus_page().splitlines()
    for line in (
        "# TYPE ratelimit_service_rate_limit_total_hits counter",
        'ratelimit_service_rate_limit_total_hits{domain="test",key1="key1_value1"} 12',
        'ratelimit_service_rate_limit_near_limit{domain="test",key1="key1_value1"} 2',
        'ratelimit_service_rate_limit_over_limit{domain="test",key1="key1_value1"} 2',
        'ratelimit_service_rate_limit_within_limit{domain="test",key1="key1_value1"} 10',
        'ratelimit_service_rate_limit_shadow_mode{domain="test",key1="key2"} 1',
        # three levels: the regex mapping's domain, key1, key2 (the rest dropped)
        'ratelimit_service_rate_limit_total_hits{domain="test",key1="outer",'
        'key2="inner_deep"} 1',
        'ratelimit_service_should_rate_limit_error{err_type="service_error"} 1',
        'ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 1',
        "ratelimit_service_config_load_success 1",
        "ratelimit_service_config_load_error 1",
        "# TYPE ratelimit_service_response_time_seconds histogram",
        'ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",'
        'le="0.005"} 1',
        'ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 1',
    ):
        assert line in page, line
    assert not [line for line in page if "ratekeeper_" in line]


def test_stat_names_are_sanitized_as_the_go_service_does() -> None:
    # envoyproxy/ratelimit src/utils/utilities.go SanitizeStatName
    assert sanitize_stat_name("d.remote_address_10.0.0.1.x:y|z") == \
        "d.remote_address_10_0_0_1.x_y_z"


def test_go_settings_for_stats_are_read_and_bad_ones_refused_naming_the_fix() -> None:
    assert options_from_env({}, "127.0.0.1") is None
    assert options_from_env({"USE_STATSD": "true", "DISABLE_STATS": "true"}, "h") is None
    o = options_from_env({"STATSD_HOST": "stats", "STATSD_PORT": "9125",
                          "STATS_FLUSH_INTERVAL": "1m30s", "EXTRA_TAGS": "a:b.c,d:e",
                          "NEAR_LIMIT_RATIO": "0.5", "USE_PROMETHEUS": "true",
                          "PROMETHEUS_ADDR": ":9102", "PROMETHEUS_PATH": "/m"}, "0.0.0.0")
    assert o == GoStatsOptions(statsd=("stats", 9125), flush_interval=90.0,
                               extra_tags=(("a", "b_c"), ("d", "e")),
                               prometheus=("0.0.0.0", 9102, "/m"), near_limit_ratio=0.5)
    assert options_from_env({"STATSD_HOST": "x", "USE_STATSD": "false"}, "h") is None
    assert go_duration("500ms", "X") == 0.5
    for env, words in (
        ({"USE_STATSD": "true", "STATS_FLUSH_INTERVAL": "10"}, "STATS_FLUSH_INTERVAL='10'"),
        ({"USE_STATSD": "true", "NEAR_LIMIT_RATIO": "1.5"}, "from 0 to 1"),
        ({"USE_STATSD": "true", "EXTRA_TAGS": "novalue"}, "name:value"),
        ({"USE_STATSD": "true", "STATSD_PORT": "x"}, "STATSD_PORT"),
        ({"USE_PROMETHEUS": "true", "PROMETHEUS_PATH": "m"}, "must start with /"),
        ({"USE_PROMETHEUS": "true", "PROMETHEUS_MAPPER_YAML": "/m.yaml"}, "statsd_exporter"),
        ({"USE_STATSD": "yes"}, "not a boolean"),
    ):
        with pytest.raises(ValueError) as e:
            options_from_env(env, "h")
        assert words in str(e.value), (env, str(e.value))


async def test_serve_sends_the_go_stats_over_udp_and_serves_them_at_prometheus_path(
        udp: socket.socket, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(POLICIES)
    stop = asyncio.Event()
    ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    options = ServeOptions(
        config=config, http_port=0, grpc_port=0, grace=0.1,
        go_stats=GoStatsOptions(statsd=udp.getsockname(), flush_interval=3600.0,
                                prometheus=("127.0.0.1", 0, "/metrics")))
    task = asyncio.create_task(serve(options, on_ready=ready.set_result, stop=stop))
    listening = await ready
    async with grpc.aio.insecure_channel(listening["grpc"]) as ch:
        call = ch.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                              request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                              response_deserializer=rls_pb2.RateLimitResponse.FromString)
        assert rls_pb2_grpc  # the generated module the request types come from
        from ratekeeper.service.proto.envoy.extensions.common.ratelimit.v3 import (  # noqa: PLC0415
            ratelimit_pb2,
        )
        entry = ratelimit_pb2.RateLimitDescriptor.Entry
        req = rls_pb2.RateLimitRequest(domain="test", descriptors=[
            ratelimit_pb2.RateLimitDescriptor(entries=[entry(key="key1", value="value1")])])
        codes = [(await call(req)).overall_code for _ in range(11)]
    assert codes == [rls_pb2.RateLimitResponse.OK] * 10 + [rls_pb2.RateLimitResponse.OVER_LIMIT]
    async with httpx.AsyncClient() as client:
        page = (await client.get(listening["prometheus"])).text
        missing = await client.get(listening["prometheus"].replace("/metrics", "/other"))
    assert missing.status_code == 404
    assert 'ratelimit_service_rate_limit_total_hits{domain="test",key1="key1_value1"} 11' \
        in page.splitlines()
    assert 'ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 11' \
        in page.splitlines()
    stop.set()
    assert await task == 0
    lines = _lines(udp)  # sent by the flush at shutdown (the interval is an hour)
    assert {name: rest for name, _, rest in (line.partition(":") for line in lines)
            if rest.endswith("|c")} == {
        P + "test.key1_value1.total_hits": "11|c",
        P + "test.key1_value1.within_limit": "10|c",
        P + "test.key1_value1.near_limit": "2|c",
        P + "test.key1_value1.over_limit": "1|c",
        "ratelimit_server.ShouldRateLimit.total_requests": "11|c",
        "ratelimit.service.config_load_success": "1|c",
    }
    assert sum(int(1 / float(rest.partition("|@")[2] or 1)) for name, _, rest in
               (line.partition(":") for line in lines)
               if name == "ratelimit_server.ShouldRateLimit.response_time") == 11
