"""Envoy's failure modes with a real service that is stopped, or frozen (SIGSTOP).

When the filter gets no answer (the service is gone: the connection is refused; or it is
frozen: the filter's `timeout` runs out), Envoy decides by `failure_mode_deny`: false lets the
request through, true answers 500 (Envoy's default `status_on_error`). Each test picks keys
so that the service's own verdict would be the opposite of the failure mode's, so the
answer can only have come from the failure mode.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.envoy._stack import EnvoyProcess, Listener, Upstream
from tests.envoy.conftest import running_envoy, running_service
from tests.service._proc import ServiceProcess

pytestmark = pytest.mark.timeout(120)

#: The filter timeout of the listeners a frozen service is asked through. Any value works
#: (a frozen service never answers); a short one keeps the tests short.
SHORT = 0.25
#: failure_mode_deny true / false, both with the short timeout, and a listener with a
#: generous timeout for what the service itself says.
DENY = Listener("deny", "ratekeeper", timeout=SHORT, failure_mode_deny=True)
ALLOW = Listener("allow", "ratekeeper", timeout=SHORT, failure_mode_deny=False)
ASK = Listener("ask", "ratekeeper")


def hdr(env: EnvoyProcess, listener: str, user: str) -> httpx.Response:
    return httpx.get(env.url(listener) + "/hdr", headers={"x-user": user}, timeout=30)


def exhaust(env: EnvoyProcess, user: str) -> None:
    """Use up [user=U]'s 3 per hour through the generous listener: the service now says 429."""
    assert [hdr(env, "ask", user).status_code for _ in range(4)] == [200, 200, 200, 429]


def counter(env: EnvoyProcess, listener: str, name: str) -> int:
    # The filter's stats: cluster.<route's cluster>.<stat_prefix>.ratelimit.<name>
    return env.stats().get(f"cluster.upstream.ratelimit.{listener}.{name}", 0)


@pytest.fixture(scope="module")
def frozen_stack(envoy_binary: str, workdir: Path, upstream: Upstream
                 ) -> Iterator[tuple[ServiceProcess, EnvoyProcess]]:
    with running_service(workdir) as svc, \
            running_envoy(envoy_binary, workdir, [DENY, ALLOW, ASK],
                          {"ratekeeper": [svc.grpc_port]}, upstream) as env:
        yield svc, env


def test_frozen_service_the_filter_timeout_decides_by_failure_mode_deny(
        frozen_stack: tuple[ServiceProcess, EnvoyProcess], upstream: Upstream,
        uid: str) -> None:
    svc, env = frozen_stack
    over, fresh = f"{uid}-over", f"{uid}-fresh"
    exhaust(env, over)  # the service would reject `over` and admit `fresh`
    errors = {x: counter(env, x, "error") for x in ("deny", "allow")}
    allowed_before = counter(env, "allow", "failure_mode_allowed")
    svc.send(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        denied = hdr(env, "deny", fresh)
        waited_deny = time.monotonic() - t0
        t0 = time.monotonic()
        admitted = hdr(env, "allow", over)
        waited_allow = time.monotonic() - t0
    finally:
        svc.send(signal.SIGCONT)
    # failure_mode_deny: true rejects a request the service would have admitted ...
    assert denied.status_code == 500
    assert "x-envoy-ratelimited" not in denied.headers  # not a rate limit: an error
    # ... and false admits one it would have rejected; it reaches the upstream.
    assert admitted.status_code == 200
    assert upstream.paths("x-user", over) == ["/hdr"] * 4
    # Both waited for the filter's timeout (a lower bound: nothing answered sooner) and
    # counted an error, not an OK or an over-limit.
    assert waited_deny >= SHORT and waited_allow >= SHORT
    assert counter(env, "deny", "error") == errors["deny"] + 1
    assert counter(env, "allow", "error") == errors["allow"] + 1
    assert counter(env, "allow", "failure_mode_allowed") == allowed_before + 1
    assert counter(env, "deny", "over_limit") == 0 and counter(env, "allow", "over_limit") == 0


def test_resumed_service_answers_again_with_its_own_verdicts(
        frozen_stack: tuple[ServiceProcess, EnvoyProcess], uid: str) -> None:
    svc, env = frozen_stack
    svc.send(signal.SIGSTOP)
    try:
        assert hdr(env, "allow", uid).status_code == 200  # frozen: the failure mode's
    finally:
        svc.send(signal.SIGCONT)
    # Resumed, the service decides again: [user=uid]'s 3 per hour run out and Envoy answers
    # its 429. (The call Envoy gave up on may or may not have been charged when the service
    # woke up and read it, so the 429 comes third or fourth.)
    got = [hdr(env, "ask", uid).status_code for _ in range(4)]
    assert got.count(429) >= 1 and got[-1] == 429
    assert got == sorted(got)  # every 200 before the first 429


def test_stopped_service_envoy_decides_by_failure_mode_deny(
        envoy_binary: str, workdir: Path, upstream: Upstream, uid: str) -> None:
    over, fresh = f"{uid}-over", f"{uid}-fresh"
    with running_service(workdir) as svc, \
            running_envoy(envoy_binary, workdir, [DENY, ALLOW, ASK],
                          {"ratekeeper": [svc.grpc_port]}, upstream) as env:
        exhaust(env, over)
        svc.stop()
        assert svc.proc is not None and svc.proc.poll() is not None
        # Nothing listens on the service's port now: every call fails at once.
        denied = hdr(env, "deny", fresh)
        admitted = hdr(env, "allow", over)
        assert denied.status_code == 500
        assert "x-envoy-ratelimited" not in denied.headers
        assert admitted.status_code == 200
        assert counter(env, "deny", "error") == 1
        assert counter(env, "allow", "failure_mode_allowed") == 1
        # The generous listener denies on failure too (failure_mode_deny: true).
        assert hdr(env, "ask", fresh).status_code == 500
