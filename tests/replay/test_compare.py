"""`compare`: candidate policies side by side, checked against plain loops over `replay`."""

from __future__ import annotations

import math
import random
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from ratekeeper.policy import load_policies, parse_policies
from ratekeeper.replay import (
    Candidate,
    DelaySketch,
    LogEvent,
    Series,
    SpaceSaving,
    compare,
    read_log,
    with_overrides,
)
from ratekeeper.replay._compare import client_resolver
from ratekeeper.replay._recommend import per_client_policies
from ratekeeper.replay._replay import replay
from tests.replay.make_sample import REPLAY_FORMAT
from tests.replay.test_replay import POLICIES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = Path(__file__).parent / "data"


def ev(t: float, client: str, path: str = "/") -> LogEvent:
    return LogEvent(t, client, "GET", path, 200, 0, None, None, None, {}, {}, 0)


def _policies(tmp_path: Path, text: str = POLICIES) -> Path:
    path = tmp_path / "policies.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_counts_equal_a_plain_loop_over_each_policys_own_replay(tmp_path: Path) -> None:
    path = _policies(tmp_path)
    p1 = load_policies(path)
    p2 = parse_policies(with_overrides(tomllib.loads(path.read_text()),
                                       ["per-client.burst=2", "static.rate=5/s"]))
    who = client_resolver(p1)
    with read_log(DATA / "nginx-replay.log", REPLAY_FORMAT) as events:
        result = compare([Candidate("a", p1), Candidate("b", p2)], events, client_of=who,
                         gap=0.5)
    for res, pol in zip(result.policies, (p1, p2), strict=True):
        with read_log(DATA / "nginx-replay.log", REPLAY_FORMAT) as events:
            verdicts = Counter()
            rejected_by: Counter[str] = Counter()
            last: dict[str, float] = {}
            page_rejected: dict[str, bool] = {}
            pages = pages_rejected = 0
            for r in replay(pol, events):
                c = who.of(r.event)
                if c not in last or r.event.t - last[c] > 0.5:
                    pages += 1
                    page_rejected[c] = False
                last[c] = r.event.t
                verdicts[r.verdict] += 1
                if r.verdict == "rejected":
                    rejected_by[c] += 1
                    if not page_rejected[c]:
                        page_rejected[c] = True
                        pages_rejected += 1
        assert res.rejected == verdicts["rejected"] > 0
        assert res.delayed == verdicts["delayed"]
        assert res.not_limited == verdicts["not_limited"]
        assert res.admitted == sum(verdicts.values()) - res.rejected - res.delayed
        assert res.requests == sum(verdicts.values()) == result.events
        assert res.clients == len(last)
        assert res.clients_affected == len(rejected_by)
        assert (res.page_loads, res.page_loads_rejected) == (pages, pages_rejected)
        assert [(k.key, k.count) for k in res.top_clients] == sorted(
            rejected_by.items(), key=lambda kv: (-kv[1], kv[0]))
        assert sum(res.series.offered) == res.requests
        assert sum(res.series.rejected) == res.rejected
    # the stricter candidate rejects more, and the JSON form carries the same numbers
    a, b = result.policies
    assert b.rejected > a.rejected
    js = result.to_json()
    assert [p["rejected"] for p in js["policies"]] == [a.rejected, b.rejected]


def test_page_loads_are_one_clients_requests_within_the_gap() -> None:
    pol = parse_policies(per_client_policies("1/s", 2))
    events = [ev(0.0, "10.0.0.1"), ev(0.1, "10.0.0.1"), ev(0.2, "10.0.0.1"),  # 3rd rejected
              ev(0.3, "10.0.0.2"),
              ev(5.0, "10.0.0.1"), ev(5.9, "10.0.0.1"),  # a second page load, admitted
              ev(9.0, "10.0.0.2")]
    res = compare([Candidate("p", pol)], events).policies[0]
    assert (res.page_loads, res.page_loads_rejected) == (4, 1)
    assert res.page_load_share == 0.25
    assert (res.rejected, res.clients, res.clients_affected) == (1, 2, 1)
    assert [(k.key, k.count) for k in res.top_counters] == [
        ("recommend.per-client client_ip=10.0.0.1", 1)]
    # a longer gap makes the two visits of 10.0.0.1 one page load
    res = compare([Candidate("p", pol)], events, gap=10).policies[0]
    assert (res.page_loads, res.page_loads_rejected) == (2, 1)


def test_space_saving_is_exact_within_capacity_and_bounded_past_it() -> None:
    rng = random.Random(3)
    keys = [f"k{int(rng.paretovariate(1.2))}" for _ in range(20_000)]
    true = Counter(keys)
    exact = SpaceSaving(capacity=len(true))
    for k in keys:
        exact.add(k)
    assert [(t.key, t.count, t.error) for t in exact.top(5)] == [
        (k, c, 0) for k, c in sorted(true.items(), key=lambda kv: (-kv[1], kv[0]))[:5]]
    small = SpaceSaving(capacity=20)
    for k in keys:
        small.add(k)
    listed = {t.key: t for t in small.top(20)}
    for k, c in true.items():
        if c > len(keys) / 20:
            assert k in listed  # every key above total/capacity is listed
    for t in listed.values():
        assert t.count - t.error <= true[t.key] <= t.count


def test_delay_quantiles_are_within_their_relative_error() -> None:
    rng = random.Random(7)
    xs = [0.0] * 300 + [rng.expovariate(20) for _ in range(5000)]
    for alpha in (0.01, 0.05):
        sk = DelaySketch(alpha)
        for x in xs:
            sk.add(x)
        s = sorted(xs)
        for q in (0.01, 0.5, 0.9, 0.99, 1.0):
            exact = s[math.ceil(q * len(s)) - 1]
            got = sk.quantile(q)
            assert got is not None and abs(got - exact) <= alpha * exact + 1e-12, (q, alpha)
    assert DelaySketch().quantile(0.5) is None


def test_delayed_requests_have_their_queueing_delay_in_the_quantiles() -> None:
    pol = parse_policies({"http": {"domain": "d", "descriptors": [["client_ip"]]},
                          "domains": {"d": {"descriptors": [{"key": "client_ip", "limits": [
                              {"name": "q", "algorithm": "leaky-bucket", "rate": "10r/s",
                               "burst": 10}]}]}}})
    events = [ev(0.0, "10.0.0.1") for _ in range(5)]  # queued 0, 0.1, 0.2, 0.3, 0.4 s
    res = compare([Candidate("p", pol)], events).policies[0]
    assert (res.admitted, res.delayed, res.rejected) == (1, 4, 0)
    assert res.delay_max == pytest.approx(0.4)
    assert res.delay_p50 == pytest.approx(0.2, rel=0.01)
    assert res.delay_p99 == pytest.approx(0.4, rel=0.01)


def test_series_merges_buckets_past_its_bound_and_keeps_every_request() -> None:
    s = Series(width=1.0, max_buckets=8)
    for i in range(100):
        s.add(1000.0 + i * 0.5, i % 3)
    assert len(s.offered) <= 8 and s.width == 10.0  # 1 s -> 2 s -> 10 s, the clock's ladder
    assert sum(s.offered) == 100
    assert sum(s.rejected) == sum(1 for i in range(100) if i % 3 == 2)
    assert sum(s.delayed) == sum(1 for i in range(100) if i % 3 == 1)


def test_series_widths_are_clock_units_aligned_to_the_clock() -> None:
    """Two days of one request a minute: the width steps up the ladder, never a power of
    two of seconds, and every bucket starts on the clock (a multiple of its width)."""
    s = Series(max_buckets=1000)
    start = 1_700_000_017.0
    for i in range(2 * 24 * 60):
        s.add(start + 60 * i, 0)
    assert s.width == 600.0  # 10 min: 288 buckets; 2 min would need 1440
    assert s.t0 is not None and s.t0 % 600 == 0
    assert sum(s.offered) == 2 * 24 * 60
    assert all(n == 10 for n in s.offered[1:-1])  # whole 10-minute buckets of one a minute


def test_a_bucket_given_is_kept_or_refused_never_silently_widened() -> None:
    """``--bucket 60`` over a log longer than 1000 minutes is refused with the smallest
    width that fits; within 1000 minutes it stays 60 s."""
    base = per_client_policies("1000/s", 1000)
    evs = [ev(1_700_000_000.0 + 30.0 * i, "10.0.0.1")
           for i in range(2 * 1000 + 10)]  # 1000 min 5 s
    cands = [Candidate("a", parse_policies(base, source="<a>"))]
    with pytest.raises(ValueError, match=r"bucket 60 s: .*more than 1000 buckets of 60 s; "
                       r"give a bucket of at least 60.* \(e\.g\. 120\)"):
        compare(cands, evs, bucket=60.0)
    kept = compare(cands, evs[:1990], bucket=60.0)
    assert kept.bucket == 60.0 and kept.policies[0].series.width == 60.0
    chosen = compare(cands, evs)
    assert chosen.bucket == 120.0  # chosen, and said so in the result


def test_overrides_name_the_bad_part() -> None:
    data = per_client_policies()
    with pytest.raises(ValueError, match=r"no limit named 'nope' \(named limits: per-client\)"):
        with_overrides(data, ["nope.rate=1/s"])
    with pytest.raises(ValueError, match=r"LIMIT\.FIELD=VALUE"):
        with_overrides(data, ["per-client"])
    with pytest.raises(ValueError, match="'scope' is not a limit field"):
        with_overrides(data, ["per-client.scope=global"])
    with pytest.raises(ValueError, match="burst must be a number"):
        with_overrides(data, ["per-client.burst=many"])
    out = with_overrides(data, ["per-client.burst=7"])
    assert out["domains"]["recommend"]["descriptors"][0]["limits"][0]["burst"] == 7
    assert data["domains"]["recommend"]["descriptors"][0]["limits"][0]["burst"] == 1


def test_candidates_need_http_and_distinct_names(tmp_path: Path) -> None:
    pol = parse_policies(per_client_policies())
    with pytest.raises(ValueError, match="names must differ"):
        compare([Candidate("a", pol), Candidate("a", pol)], [])
    bare = parse_policies({"domains": {"d": {"descriptors": [{"key": "k", "limits": [
        {"algorithm": "gcra", "rate": "1/s"}]}]}}})
    with pytest.raises(ValueError, match=r"no \[http\] part"):
        Candidate("x", bare)
