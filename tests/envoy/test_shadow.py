"""Global shadow mode through a real Envoy: every request passes, and the rate limit
headers still tell the client where it stands, as envoyproxy/ratelimit sends them
(src/service/ratelimit.go, shouldRateLimitWorker: headers from the descriptor statuses,
then shadow mode turns the overall code to OK).

Its own service (tests/envoy/policies.toml with ``[service] shadow_mode = true``) and Envoy.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.envoy._stack import EnvoyProcess, Upstream
from tests.envoy.conftest import MAIN, POLICIES, XRL, running_envoy, running_service

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def shadow_envoy(envoy_binary: str, workdir: Path, upstream: Upstream
                 ) -> Iterator[EnvoyProcess]:
    policies = workdir / "shadow.toml"
    policies.write_text("[service]\nshadow_mode = true\n\n" + POLICIES.read_text())
    with running_service(workdir, config=policies) as svc, \
            running_envoy(envoy_binary, workdir, [MAIN, XRL],
                          {"ratekeeper": [svc.grpc_port]}, upstream) as env:
        yield env


def test_global_shadow_mode_passes_every_request_and_still_sends_the_headers(
        shadow_envoy: EnvoyProcess, upstream: Upstream, uid: str) -> None:
    # [user=uid]: 3 per hour, in shadow mode: the 4th and 5th would be rejected.
    got = [httpx.get(shadow_envoy.url("main") + "/hdr", headers={"x-user": uid}, timeout=30)
           for _ in range(5)]
    assert [r.status_code for r in got] == [200] * 5
    assert upstream.paths("x-user", uid) == ["/hdr"] * 5  # all of them reached it
    assert all(r.headers["ratelimit-policy"] == '"envoy.user";q=3;w=3600' for r in got)
    left = [re.fullmatch(r'"envoy\.user";r=(\d+);t=\d+', r.headers["ratelimit"]) for r in got]
    assert [m[1] if m else None for m in left] == ["2", "1", "0", "0", "0"]
    assert not any("x-envoy-ratelimited" in r.headers or "retry-after" in r.headers
                   for r in got)


def test_global_shadow_mode_x_ratelimit_headers_say_0_left_over_the_limit(
        shadow_envoy: EnvoyProcess, uid: str) -> None:
    # Envoy's DRAFT_VERSION_03 headers come from the statuses, which keep their real codes.
    url = shadow_envoy.url("xrl") + "/hdr"
    got = [httpx.get(url, headers={"x-user": uid}, timeout=30) for _ in range(4)]
    assert [r.status_code for r in got] == [200] * 4
    assert [r.headers["x-ratelimit-remaining"] for r in got] == ["2", "1", "0", "0"]
    assert got[-1].headers["x-ratelimit-limit"] == "3, 3;w=3600"
    assert 1 <= int(got[-1].headers["x-ratelimit-reset"]) <= 3600
