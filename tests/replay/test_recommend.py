"""`recommend` on synthetic traffic with a known answer, and `required_burst` by hand."""

from __future__ import annotations

import math

import pytest

from ratekeeper.replay import LogEvent, recommend
from ratekeeper.replay._recommend import nice_ceil, required_burst

T0 = 1_700_000_000.0
HEAVY = "10.9.9.9"
SPAN = 120


def ev(t: float, client: str) -> LogEvent:
    return LogEvent(t, client, "GET", "/", 200, 0, None, None, None, {}, {}, 0)


def traffic() -> list[LogEvent]:
    """99 clients sending bursts of 10 requests every 2 s (5 req/s, bursts of 10), and one
    sending 50 req/s evenly, for 120 s."""
    evs = []
    for i in range(99):
        off = i * 0.017
        evs += [ev(T0 + off + 2 * k, f"10.0.0.{i + 1}") for k in range(SPAN // 2)
                for _ in range(10)]
    evs += [ev(T0 + j * 0.02, HEAVY) for j in range(SPAN * 50)]
    evs.sort(key=lambda e: e.t)
    return evs


def heavy_admitted(rate: float, burst: float) -> int:
    """The heavy client's admissions under a token bucket, by a plain loop."""
    tokens, last, n = burst, 0.0, 0
    for j in range(SPAN * 50):
        t = j * 0.02
        tokens = min(burst, tokens + (t - last) * rate)
        last = t
        if tokens >= 1 - 1e-9:
            tokens -= 1
            n += 1
    return n


def test_the_recommendation_admits_the_99_and_caps_the_heavy_one() -> None:
    evs = traffic()
    rec = recommend(lambda: evs, target=0.99)
    (lim,) = rec.limits
    assert (lim.rate, lim.burst, lim.algorithm) == (5.0, 10, "token-bucket")
    assert (lim.keys, lim.keys_affected) == (100, 1)
    assert lim.heaviest[0] == (f"client_ip={HEAVY}", pytest.approx(45 * (SPAN - 0.02) + 1,
                                                                    abs=1e-6))
    assert lim.rates["max"] == 50.0 and lim.rates["p99"] == 5.0
    at_rate = {p.burst: p.keys_affected for p in lim.curve if p.rate == 5.0}
    assert at_rate[10] == 1 and at_rate[1] == 100
    assert at_rate[max(at_rate)] == 0  # a burst as large as the heavy one's backlog: none
    assert {p.rate for p in lim.curve} == {2.5, 5.0, 10.0}
    # what it would have done: the 99 untouched, the heavy one capped to 5/s
    assert rec.comparison is not None
    (res,) = rec.comparison.policies
    assert (res.clients, res.clients_affected) == (100, 1)
    assert [k.key for k in res.top_clients] == [HEAVY]
    assert res.rejected == SPAN * 50 - heavy_admitted(5.0, 10)
    assert res.requests == len(evs)
    assert rec.overrides == ("per-client.algorithm=token-bucket", "per-client.rate=5/s",
                             "per-client.burst=10")
    assert rec.to_json()["limits"][0]["share_affected"] == 0.01


def test_a_target_of_all_clients_admits_the_heavy_one_too() -> None:
    evs = traffic()
    rec = recommend(lambda: evs, target=1.0, replay=False)
    (lim,) = rec.limits
    assert (lim.rate, lim.keys_affected) == (50.0, 0)
    # at 50/s the light clients' bursts of 10 need 10, the heavy one's even stream 1
    assert lim.burst == 10
    assert rec.comparison is None


def test_required_burst_is_the_virtual_schedules_largest_backlog() -> None:
    assert required_burst([0, 0, 0], rate=1) == 3
    assert required_burst([0, 1, 2, 3], rate=1) == 1
    assert required_burst([0, 0.5, 1.0, 1.5], rate=1) == pytest.approx(2.5)
    assert required_burst([0, 0, 10, 10], rate=1, cost=2) == 4
    assert required_burst([], rate=1) == 0


def test_nice_ceil_rounds_up_to_two_significant_digits() -> None:
    assert [nice_ceil(x) for x in (5, 4.03, 123, 0.0101, 99.5)] == [5, 4.1, 130, 0.011, 100]
    assert math.isclose(nice_ceil(1 / 3), 0.34)


def test_a_bad_target_is_refused() -> None:
    for bad in (0, 1.5, -0.1, True):
        with pytest.raises(ValueError, match="between 0 and 1"):
            recommend(lambda: [], target=bad)
