"""End to end through a real Envoy: ``envoy.filters.http.ratelimit`` -> ``ratekeeper serve``
(gRPC, memory store) -> the upstream. What Envoy users see: 429s and their headers, the
descriptors Envoy's `rate_limits` actions build, and the X-RateLimit-* headers Envoy builds
from our `current_limit` and `duration_until_reset`.

The routes and their descriptors are tests/envoy/_stack.py's ROUTES; the limits are
tests/envoy/policies.toml's.
"""

from __future__ import annotations

import random
import re
import time

import httpx
import pytest

from tests.envoy._stack import EnvoyProcess, Upstream

pytestmark = pytest.mark.timeout(120)


def get(env: EnvoyProcess, path: str, listener: str = "main", *,
        client: httpx.Client | None = None, **headers: str) -> httpx.Response:
    url = env.url(listener) + path
    if client is not None:
        return client.get(url, headers=headers, timeout=30)
    return httpx.get(url, headers=headers, timeout=30)


def statuses(env: EnvoyProcess, path: str, n: int, **headers: str) -> list[int]:
    return [get(env, path, **headers).status_code for _ in range(n)]


# ---------------------------------------------------------------- 429s and their headers


def test_over_the_limit_envoy_answers_429_with_the_services_headers_and_the_upstream_never_sees_it(
        envoy: EnvoyProcess, upstream: Upstream, uid: str) -> None:
    # [user=uid]: 3 per hour.
    oks = [get(envoy, "/hdr", **{"x-user": uid}) for _ in range(3)]
    assert [r.status_code for r in oks] == [200, 200, 200]
    # Envoy adds the service's response_headers_to_add to admitted responses too.
    assert [r.headers["ratelimit"].split(";")[1] for r in oks] == ["r=2", "r=1", "r=0"]
    assert oks[0].headers["ratelimit-policy"] == '"envoy.user";q=3;w=3600'

    r = get(envoy, "/hdr", **{"x-user": uid})
    assert r.status_code == 429
    assert r.headers["x-envoy-ratelimited"] == "true"  # Envoy's own mark of a 429 it made
    assert r.headers["ratelimit-policy"] == '"envoy.user";q=3;w=3600'
    m = re.fullmatch(r'"envoy\.user";r=0;t=(\d+)', r.headers["ratelimit"])
    assert m is not None, r.headers["ratelimit"]
    retry_after = int(r.headers["retry-after"])
    # A fixed hour window: the retry is within the hour, and no earlier than the reset says.
    assert 1 <= retry_after <= 3600
    assert int(m[1]) == retry_after
    assert r.headers["cache-control"] == "no-store"
    # Three requests reached the upstream, the 429 did not.
    assert upstream.paths("x-user", uid) == ["/hdr"] * 3


def test_rejected_requests_charge_nothing_so_another_user_is_unaffected(
        envoy: EnvoyProcess, uid: str) -> None:
    assert statuses(envoy, "/hdr", 5, **{"x-user": uid}) == [200, 200, 200, 429, 429]
    assert statuses(envoy, "/hdr", 1, **{"x-user": uid + "-other"}) == [200]


# ---------------------------------------------------------------- descriptors from actions


def _loopback_address() -> str:
    """A loopback address of this test's own (127.0.0.0/8 is all loopback on Linux), so the
    [remote_address=...] counter is the test's alone."""
    return f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"


def test_remote_address_action_counts_per_connecting_address(
        envoy: EnvoyProcess, upstream: Upstream) -> None:
    # [remote_address=<ip>]: 2 per hour per address; the address is the TCP peer Envoy sees.
    a, b = _loopback_address(), _loopback_address()
    while b == a:
        b = _loopback_address()
    with httpx.Client(transport=httpx.HTTPTransport(local_address=a)) as ca, \
            httpx.Client(transport=httpx.HTTPTransport(local_address=b)) as cb:
        assert [get(envoy, "/addr", client=ca).status_code for _ in range(3)] == [200, 200, 429]
        # Another address has its own counter.
        assert [get(envoy, "/addr", client=cb).status_code for _ in range(3)] == [200, 200, 429]
    # What the upstream saw confirms the address Envoy took as the remote address.
    assert sum(1 for s in upstream.seen if s.headers.get("x-envoy-external-address") == a) == 2


def test_request_headers_action_counts_per_header_value(envoy: EnvoyProcess, uid: str) -> None:
    assert statuses(envoy, "/hdr", 4, **{"x-user": uid + "-a"}) == [200, 200, 200, 429]
    assert statuses(envoy, "/hdr", 4, **{"x-user": uid + "-b"}) == [200, 200, 200, 429]


def test_request_headers_action_without_the_header_sends_no_descriptor(
        envoy: EnvoyProcess) -> None:
    # No x-user: Envoy builds no descriptor, so it never asks, and nothing is limited.
    before = envoy.stats().get("cluster.upstream.ratelimit.main.ok", 0)
    assert statuses(envoy, "/hdr", 5) == [200] * 5
    assert envoy.stats().get("cluster.upstream.ratelimit.main.ok", 0) == before


def test_generic_key_action_makes_the_first_entry_of_the_descriptor(
        envoy: EnvoyProcess, uid: str) -> None:
    # [generic_key=gen, user=uid]: 1 per hour, a rule of its own (not [user]'s 3 per hour).
    r = get(envoy, "/generic", **{"x-user": uid})
    assert r.status_code == 200
    assert r.headers["ratelimit-policy"] == '"envoy.generic_key=gen.user";q=1;w=3600'
    assert get(envoy, "/generic", **{"x-user": uid}).status_code == 429
    # The same user's [user=uid] counter is another one, untouched.
    assert statuses(envoy, "/hdr", 1, **{"x-user": uid}) == [200]


# ---------------------------------------------------------------- X-RateLimit-* (draft 03)

def go_resets(unit: int, before: int, after: int) -> set[int]:
    """The resets envoyproxy/ratelimit could answer between the Unix seconds `before` and
    `after`: ``unit - now % unit`` (src/utils/utilities.go, CalculateReset)."""
    return {unit - now % unit for now in range(before, after + 1)}


#: (x-unit, the limit, the window in seconds) of policies.toml's /xrl rules.
UNITS = [("second", 10, 1), ("minute", 60, 60), ("hour", 100, 3600), ("day", 1000, 86400)]


@pytest.mark.parametrize(("unit", "limit", "window"), UNITS)
def test_x_ratelimit_headers_give_the_configured_limit_window_and_reset(
        envoy: EnvoyProcess, uid: str, unit: str, limit: int, window: int) -> None:
    # Envoy's DRAFT_VERSION_03 headers: Limit "<limit>, <limit>;w=<unit in seconds>" (no
    # name: the config names none), Remaining, Reset = duration_until_reset in whole
    # seconds. The Go service's reset is `unit - now % unit` (src/limiter/base_limiter.go),
    # so 1..window, never 0 while the window is open.
    # Windows end where the Go service's do (on the Unix epoch's multiples of the unit):
    # the clock is read on both sides of the request.
    before = int(time.time())
    r = get(envoy, "/xrl", "xrl", **{"x-unit": unit, "x-user": uid})
    after = int(time.time())
    assert r.status_code == 200
    assert r.headers["x-ratelimit-limit"] == f"{limit}, {limit};w={window}"
    assert r.headers["x-ratelimit-remaining"] == str(limit - 1)
    assert int(r.headers["x-ratelimit-reset"]) in go_resets(window, before, after)


#: (x-unit, the limit, the unit in seconds) of the long units: WEEK, MONTH (30 days) and
#: YEAR (365 days), as envoyproxy/ratelimit's UnitToDivider (src/utils/utilities.go).
LONG_UNITS = [("week", 1, 7 * 86400), ("month", 5, 30 * 86400), ("year", 100, 365 * 86400)]


@pytest.mark.parametrize(("unit", "limit", "window"), LONG_UNITS)
def test_week_month_and_year_limits_keep_their_unit_and_reset_as_envoy_ratelimit(
        envoy: EnvoyProcess, uid: str, unit: str, limit: int, window: int) -> None:
    # `1/week` is 1 per WEEK through Envoy (not 52 per YEAR, nor 0.0000016 per SECOND), and
    # the reset is the Go service's `unit - now % unit` on whole Unix seconds
    # (src/utils/utilities.go, CalculateReset): read the clock on both sides of the request.
    before = int(time.time())
    r = get(envoy, "/xrl", "xrl", **{"x-unit": unit, "x-user": uid})
    after = int(time.time())
    assert r.status_code == 200
    # Envoy writes `;w=<seconds>` for the units it knows (its convertRateLimitUnit).
    assert r.headers["x-ratelimit-limit"] == f"{limit}, {limit};w={window}"
    assert r.headers["x-ratelimit-remaining"] == str(limit - 1)
    assert int(r.headers["x-ratelimit-reset"]) in go_resets(window, before, after)
    # The service's own field says the same window.
    assert r.headers["ratelimit-policy"] == f'"envoy.unit={unit}.user";q={limit};w={window}'


def test_a_week_limit_rejects_the_second_request_until_the_weeks_end(
        envoy: EnvoyProcess, uid: str) -> None:
    ok = get(envoy, "/xrl", "xrl", **{"x-unit": "week", "x-user": uid})
    before = int(time.time())
    over = get(envoy, "/xrl", "xrl", **{"x-unit": "week", "x-user": uid})
    after = int(time.time())
    assert (ok.status_code, over.status_code) == (200, 429)
    assert over.headers["x-ratelimit-remaining"] == "0"
    resets = go_resets(7 * 86400, before, after)
    assert int(over.headers["x-ratelimit-reset"]) in resets
    assert int(over.headers["retry-after"]) in resets


def test_x_ratelimit_limit_names_a_limit_the_config_names(envoy: EnvoyProcess, uid: str) -> None:
    r = get(envoy, "/xrl", "xrl", **{"x-unit": "named", "x-user": uid})
    assert r.status_code == 200
    # The limit is `name = "per-minute"` in domain envoy.
    assert re.fullmatch(r'60, 60;w=60;name="(envoy\.)?per-minute"',
                        r.headers["x-ratelimit-limit"]), r.headers["x-ratelimit-limit"]


def test_x_ratelimit_remaining_counts_down_and_reads_0_on_the_429(
        envoy: EnvoyProcess, uid: str) -> None:
    got = [get(envoy, "/xrl", "xrl", **{"x-unit": "hour", "x-user": uid}) for _ in range(3)]
    assert [r.headers["x-ratelimit-remaining"] for r in got] == ["99", "98", "97"]
    # [user=uid] (3 per hour, on /hdr) would say the same through the xrl listener:
    over = [get(envoy, "/hdr", "xrl", **{"x-user": uid}) for _ in range(4)][-1]
    assert over.status_code == 429
    assert over.headers["x-ratelimit-remaining"] == "0"
    assert over.headers["x-envoy-ratelimited"] == "true"


def test_the_main_listener_adds_no_x_ratelimit_headers(envoy: EnvoyProcess, uid: str) -> None:
    # The header set is Envoy's choice per filter: without enable_x_ratelimit_headers only
    # the service's own fields reach the client.
    r = get(envoy, "/xrl", **{"x-unit": "hour", "x-user": uid})
    assert r.status_code == 200
    assert "x-ratelimit-limit" not in r.headers
    assert r.headers["ratelimit-policy"] == '"envoy.unit=hour.user";q=100;w=3600'

