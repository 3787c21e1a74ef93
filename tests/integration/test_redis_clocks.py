"""The circuit breaker and the deny cache on an injected clock: time passes when the test
steps a `ManualClock`, never by sleeping."""

from __future__ import annotations

import pytest

from ratekeeper import Limit, StoreUnavailable
from ratekeeper.stores.redis import CircuitBreaker
from ratekeeper.testing import ManualClock
from tests.integration.conftest import StoreTarget


def test_breaker_opens_probes_once_per_cooldown_and_closes() -> None:
    clock = ManualClock(10.0)
    br = CircuitBreaker(failures=2, cooldown=0.5, name="t", clock=clock)
    br.before()
    br.failure()
    assert br.state == "closed"  # one failure of two
    br.failure()
    assert br.state == "open" and br.opened == 1
    with pytest.raises(StoreUnavailable, match=r"open after 2 .* next probe in 0\.500s"):
        br.before()
    clock.advance(0.499)
    with pytest.raises(StoreUnavailable, match=r"next probe in 0\.001s"):
        br.before()
    clock.advance(0.001)
    assert br.state == "half-open"
    br.before()  # this call is the probe ...
    with pytest.raises(StoreUnavailable, match="probe is in flight"):
        br.before()  # ... and the others still fail fast
    br.failure()  # the probe failed: another full cool-down
    assert br.state == "open" and br.opened == 1
    clock.advance(0.5)
    br.before()
    clock.advance(0.5)  # a probe that never reports back is replaced after a cool-down
    br.before()
    br.success()
    assert br.state == "closed"
    br.before()
    br.failure()
    assert br.state == "closed"  # the count started again


def test_deny_cache_on_the_server_clock_lasts_the_retry_on_the_local_clock(
        standalone: StoreTarget) -> None:
    clock = ManualClock(50.0)
    store = standalone.store(deny_cache=True, local_clock=clock)  # server clock
    lim = Limit("fixed-window", "1/h")
    assert store.decide_one(lim, "k", 1, 0.0).allowed
    d = store.decide_one(lim, "k", 1, 0.0)
    assert not d.allowed and d.retry_after is not None and d.retry_after > 1
    calls, hits = store.stats.calls, store.stats.deny_cache_hits
    clock.advance(d.retry_after - 1)
    cached = store.decide_one(lim, "k", 1, 0.0)
    assert not cached.allowed and cached.retry_after == pytest.approx(1.0)
    assert (store.stats.calls - calls, store.stats.deny_cache_hits - hits) == (0, 1)
    clock.advance(1)  # the cached wait is over: asked of the server again
    store.decide_one(lim, "k", 1, 0.0)
    assert (store.stats.calls - calls, store.stats.deny_cache_hits - hits) == (1, 1)
