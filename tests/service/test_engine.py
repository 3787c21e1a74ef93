"""The decision engine in-process, on a `ManualClock`: no sleeping, no network.

Timelines are written as steps at named instants (t=0, t=3600, ...).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import AsyncLimiter, Limit, StoreUnavailable, core
from ratekeeper.core import FailurePolicy
from ratekeeper.policy._engine import OVERRIDE_CACHE_SIZE
from ratekeeper.policy._loader import parse_policies_text
from ratekeeper.policy._model import Policies
from ratekeeper.service import (
    Engine,
    InvalidRequest,
    Override,
    PolicyHolder,
    UnknownDomain,
    Watcher,
    load_policies,
    make_descriptor,
)
from ratekeeper.service._service import result_headers
from ratekeeper.service._stats import PrometheusStats
from ratekeeper.stores._base import Check
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.testing import ManualClock

POLICIES = """
[service]
max_cost = 100
{service}

[domains.d]
{domain}

[domains.d.limits.budget]
algorithm = "token-bucket"
rate = "10/hour"
by = ["user"]

[[domains.d.descriptors]]
key = "user"
limits = [{{ algorithm = "fixed-window", rate = "3/hour" }}]

  [[domains.d.descriptors.descriptors]]
  key = "op"
  value = "big"
  cost = 4
  limits = ["budget"]

  [[domains.d.descriptors.descriptors]]
  key = "op"
  limits = ["budget"]

[[domains.d.descriptors]]
key = "ip"
shadow_mode = true
limits = [{{ algorithm = "fixed-window", rate = "1/hour" }}]

[[domains.d.descriptors]]
key = "tenant"
limits = [{{ name = "all", algorithm = "fixed-window", rate = "2/hour", scope = "global" }}]
"""


def policies(service: str = "", domain: str = "") -> Policies:
    return parse_policies_text(POLICIES.format(service=service, domain=domain))


class Recorder:
    """A `Stats` that remembers every event."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def decision(self, domain: str, rule: str, policy: str, outcome: str) -> None:
        self.events.append(("decision", domain, rule, policy, outcome))

    def store_call(self, seconds: float, error: str | None) -> None:
        self.events.append(("store", error))

    def failure_policy(self, policy: str) -> None:
        self.events.append(("failure", policy))

    def request(self, transport: str, result: str, seconds: float) -> None:
        self.events.append(("request", transport, result))

    def reload(self, ok: bool, generation: int) -> None:
        self.events.append(("reload", ok, generation))


class BrokenStore(MemoryStore):
    """A memory store that fails while `down` is set."""

    down = True

    async def adecide(self, checks: Sequence[Check], now: float,
                      consume: bool = True) -> tuple[list[Any], float]:
        if self.down:
            raise StoreUnavailable("connection refused (test)")
        return await super().adecide(checks, now, consume)


def engine(p: Policies | None = None, *, store: MemoryStore | None = None,
           stats: Recorder | None = None) -> tuple[Engine, ManualClock]:
    clock = ManualClock()
    snap = p or policies()
    store = MemoryStore() if store is None else store  # (an empty MemoryStore is falsy)
    return Engine(lambda: snap, store, clock=clock, stats=stats), clock


def desc(*entries: tuple[str, str], hits: float | None = None) -> Any:
    return make_descriptor(list(entries), hits=hits)


async def test_timeline_fixed_window_refills_at_the_next_window() -> None:
    e, clock = engine()
    u = desc(("user", "u"))
    # t=0: three admitted, the fourth rejected until the window ends at t=3600.
    outs = [await e.check("d", [u]) for _ in range(4)]
    assert [o.allowed for o in outs] == [True, True, True, False]
    assert outs[-1].decision is not None and outs[-1].decision.retry_after == 3600
    clock.set(3599.9)
    assert not (await e.check("d", [u])).allowed
    clock.set(3600)  # t=3600: a new window
    assert (await e.check("d", [u])).allowed


async def test_costs_and_shared_budget() -> None:
    e, _ = engine()
    r = await e.check("d", [desc(("user", "u"), ("op", "big"))])
    assert r.decision is not None and r.decision.remaining == 6  # 10 - rule cost 4
    r = await e.check("d", [desc(("user", "u"), ("op", "small"))], hits=2)
    assert r.decision is not None and r.decision.remaining == 4  # same counter ("by user")
    r = await e.check("d", [desc(("user", "u"), ("op", "big"), hits=2)])
    assert not r.allowed  # 8 > 4 left
    r = await e.check("d", [desc(("user", "other"), ("op", "big"))])
    assert r.decision is not None and r.decision.remaining == 6


async def test_the_same_counter_twice_in_one_check_is_charged_once_with_both_costs() -> None:
    e, _ = engine()
    r = await e.check("d", [desc(("user", "u")), desc(("user", "u"))])
    assert r.allowed and [s.decision.remaining for s in r.statuses if s.decision] == [1, 1]
    r = await e.check("d", [desc(("user", "u")), desc(("user", "u"))])
    assert not r.allowed  # 2 asked, 1 left: nothing charged
    assert (await e.check("d", [desc(("user", "u"))])).allowed


async def test_global_scope_is_one_counter_for_every_value() -> None:
    e, _ = engine()
    assert (await e.check("d", [desc(("tenant", "a"))])).allowed
    assert (await e.check("d", [desc(("tenant", "b"))])).allowed
    r = await e.check("d", [desc(("tenant", "c"))])
    assert not r.allowed and r.decision is not None and r.decision.limit is not None
    assert r.decision.limit.name == "d.all"


async def test_shadow_mode_counts_but_never_rejects() -> None:
    stats = Recorder()
    e, _ = engine(stats=stats)
    ip = desc(("ip", "1.2.3.4"))
    outs = [await e.check("d", [ip]) for _ in range(2)]
    assert all(o.allowed for o in outs) and outs[1].decision is None
    assert [s.outcome for o in outs for s in o.statuses] == ["allowed", "shadow_rejected"]
    assert ("decision", "d", "ip", "d.ip", "shadow_rejected") in stats.events


@pytest.mark.parametrize(("where", "service", "domain"), [
    ("service", "shadow_mode = true", ""), ("domain", "", "shadow_mode = true")])
async def test_global_and_domain_shadow_mode(where: str, service: str, domain: str) -> None:
    e, _ = engine(policies(service, domain))
    outs = [await e.check("d", [desc(("user", "u"))]) for _ in range(5)]
    assert all(o.allowed for o in outs)
    assert outs[-1].statuses[0].outcome == "shadow_rejected"
    # The headers still describe the shadowed limit, as envoyproxy/ratelimit sends them
    # (0 left, no Retry-After: the request passes).
    assert result_headers(outs[-1]) == [("RateLimit-Policy", '"d.user";q=3;w=3600'),
                                        ("RateLimit", '"d.user";r=0;t=3600')]


@pytest.mark.parametrize(("failure", "allowed"), [("open", True), ("closed", False),
                                                  ("local", True)])
async def test_failure_policies(failure: str, allowed: bool,
                                caplog: pytest.LogCaptureFixture) -> None:
    stats = Recorder()
    store = BrokenStore()
    e, _ = engine(policies(f'failure = "{failure}"'), store=store, stats=stats)
    with caplog.at_level(logging.WARNING, "ratekeeper"):
        r = await e.check("d", [desc(("user", "u"))])
        await e.check("d", [desc(("user", "u"))])
    assert r.allowed is allowed and r.degraded
    assert r.decision is not None and r.decision.degraded
    assert ("failure", failure) in stats.events and ("store", "StoreUnavailable") in stats.events
    assert sum("rate limit store failed" in m for m in caplog.messages) == 1  # once, not per call
    if failure == "local":  # the in-process fallback keeps counting: 3 per hour
        outs = [await e.check("d", [desc(("user", "v"))]) for _ in range(4)]
        assert [o.allowed for o in outs] == [True, True, True, False]
    store.down = False
    with caplog.at_level(logging.INFO, "ratekeeper"):  # the core's logger decides and logs
        r = await e.check("d", [desc(("user", "u"))])
    assert r.allowed and not r.degraded
    assert "rate limit store recovered" in caplog.messages


async def test_a_failing_store_never_rejects_shadow_checks() -> None:
    e, _ = engine(policies('failure = "closed"'), store=BrokenStore())
    r = await e.check("d", [desc(("ip", "x"))])
    assert r.allowed and r.statuses[0].outcome == "allowed"


async def test_probe_reports_the_store() -> None:
    e, _ = engine()
    assert await e.probe() is None
    e, _ = engine(store=BrokenStore())
    assert await e.probe() == "StoreUnavailable: connection refused (test)"


async def test_overrides_and_their_switch() -> None:
    e, _ = engine()
    o = make_descriptor([("user", "u")], override=Override(1, "hour"))
    r = await e.check("d", [o])
    assert r.statuses[0].rule is not None
    assert r.statuses[0].rule.name == "{override}"
    assert not (await e.check("d", [o])).allowed
    e, _ = engine(policies("allow_overrides = false"))
    r = await e.check("d", [o])
    assert r.statuses[0].rule is not None and r.statuses[0].rule.name == "user"


async def test_bad_requests() -> None:
    e, _ = engine()
    # An empty list is an error, as envoyproxy/ratelimit's (test/service/ratelimit_test.go,
    # TestEmptyDescriptors: "rate limit descriptor list must not be empty").
    with pytest.raises(InvalidRequest, match="at least one descriptor"):
        await e.check("d", [])
    with pytest.raises(InvalidRequest, match="max_cost of 100"):
        await e.check("d", [desc(("user", "u"), ("op", "big"))], hits=26)  # 26 x 4 > 100
    for bad in (-1, float("nan"), float("inf"), 10**400, "1", True, None):
        with pytest.raises(InvalidRequest, match="cost"):
            make_descriptor([("user", "u")], hits=bad if bad is not None else "x")
    assert make_descriptor([("user", "u")], hits=0).hits == 0  # a check that charges nothing


async def test_results_carry_the_generation(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(POLICIES.format(service="", domain=""))
    holder = PolicyHolder(path)
    e = Engine(holder, MemoryStore(), clock=ManualClock())
    assert (await e.check("d", [desc(("user", "u"))])).generation == 1


def test_holder_swaps_good_files_and_keeps_the_old_on_bad_ones(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    stats = Recorder()
    path = tmp_path / "p.toml"
    path.write_text(POLICIES.format(service="", domain=""))
    holder = PolicyHolder(path, stats=stats)
    first = holder()
    assert first.generation == 1 and holder.poll() is None

    assert holder.reload() is True and holder() is first  # unchanged: nothing swapped

    path.write_text(POLICIES.format(service="", domain='description = "v2"'))
    assert holder.poll() is True
    assert holder().generation == 2 and holder().domains["d"].description == "v2"

    path.write_text("[domains.d]\n")  # invalid: no descriptors
    with caplog.at_level(logging.ERROR, "ratekeeper"):
        assert holder.poll() is False
    assert holder().generation == 2 and holder.last_error is not None
    assert "a domain needs descriptors" in holder.last_error
    (rec,) = [r for r in caplog.records if getattr(r, "event", "") == "reload_failed"]
    assert rec.errors == ["line 1, domains.d: a domain needs descriptors: add "  # type: ignore[attr-defined]
                          "[[domains.d.descriptors]] tables"]
    assert holder.poll() is None  # the bad file is not retried until it changes again

    path.unlink()
    assert holder.poll() is False and holder().generation == 2
    assert stats.events == [("reload", True, 1), ("reload", True, 2),
                            ("reload", False, 2), ("reload", False, 2)]


async def test_the_shared_budget_timeline_of_the_docs() -> None:
    """docs/service.md, "A shared budget, step by step", on examples/policies.toml."""
    p = load_policies(Path(__file__).parent.parent.parent / "examples" / "policies.toml")
    e, clock = engine(p)
    export = desc(("user", "alice"), ("op", "export"))

    def budget(r: Any) -> tuple[bool, int, float | None]:
        d = r.statuses[-1].decision
        return r.allowed, d.remaining, d.retry_after

    # t=0: [user=alice] and [user=alice, op=export]: per-user 1, budget 50.
    r = await e.check("api", [desc(("user", "alice")), export])
    assert r.allowed and budget(r) == (True, 550, 0.0)
    # t=0: 11 more exports empty the budget; the next one must wait 50 / 10 per s = 5 s.
    for _ in range(11):
        assert (await e.check("api", [export])).allowed
    assert budget(await e.check("api", [export])) == (False, 0, 5.0)
    # t=1 s: 10 points back; a search costs 1.
    clock.set(1.0)
    assert budget(await e.check("api", [desc(("user", "alice"), ("op", "search"))]))[:2] == \
        (True, 9)
    # t=5 s: 49 points, an export needs 50: retry after 0.1 s.
    clock.set(5.0)
    ok, remaining, retry = budget(await e.check("api", [export]))
    assert not ok and remaining == 49 and retry == pytest.approx(0.1)


def decision_series(stats: PrometheusStats) -> list[dict[str, str]]:
    return [s.labels for m in stats.registry.collect() if m.name == "ratekeeper_decisions"
            for s in m.samples if s.name == "ratekeeper_decisions_total"]


async def test_distinct_overrides_leave_metric_series_and_caches_bounded() -> None:
    stats = PrometheusStats()
    store = MemoryStore()
    snap = policies()
    e = Engine(lambda: snap, store, clock=ManualClock(), stats=stats)
    n = 3 * OVERRIDE_CACHE_SIZE
    names = set()
    for i in range(n):  # every request a new rate, a new key name and a new value
        d = make_descriptor([(f"k{i}", f"v{i}")], override=Override(i + 1, "second"))
        r = await e.check("d", [d])
        assert r.allowed and r.decision is not None and r.decision.limit is not None
        names.add(r.decision.limit.name)
    assert names == {"d.override/second"}  # one limit (one key table) per domain and unit
    assert len(store._tables) == 1
    assert len(e._overrides) <= OVERRIDE_CACHE_SIZE
    series = decision_series(stats)
    assert series == [{"domain": "d", "rule": "{override}", "policy": "d.override/second",
                       "outcome": "allowed"}]
    body, _ = stats.render()
    assert b"k1" not in body and b"/second" in body


async def test_an_override_counts_per_descriptor_and_unit_as_envoy_ratelimit() -> None:
    e, clock = engine()

    def o(user: str, n: int, unit: str = "minute") -> Any:
        return make_descriptor([("user", user)], override=Override(n, unit))

    # t=0: 2 per minute for u; another user, and another unit, count on their own.
    assert [(await e.check("d", [o("u", 2)])).allowed for _ in range(3)] == [True, True, False]
    assert (await e.check("d", [o("v", 2)])).allowed
    assert (await e.check("d", [o("u", 2, "hour")])).allowed
    # The same descriptor with a larger override reads the same counter (2 used of 3).
    assert [(await e.check("d", [o("u", 3)])).allowed for _ in range(2)] == [True, False]
    clock.set(60)  # t=60: the next minute
    assert (await e.check("d", [o("u", 2)])).allowed


class DownStore:
    """A store (sync and async protocols) whose every call fails as an unreachable one."""

    default_clock = staticmethod(ManualClock())
    uses_client_clock = True

    def bind(self, limit: Limit) -> Any:
        return lambda key, cost, now: self.decide_one(limit, key, cost, now)

    def decide_one(self, limit: Limit, key: str, cost: float, now: float) -> Any:
        raise StoreUnavailable("connection refused (test)")

    def decide(self, checks: Sequence[Check], now: float, consume: bool = True) -> Any:
        raise StoreUnavailable("connection refused (test)")

    def refund(self, checks: Sequence[Check], now: float, at: float) -> None:
        raise StoreUnavailable("connection refused (test)")

    def reset(self, limits: Sequence[Limit], key: str) -> None:
        raise StoreUnavailable("connection refused (test)")

    async def adecide_one(self, limit: Limit, key: str, cost: float, now: float) -> Any:
        return self.decide_one(limit, key, cost, now)

    async def adecide(self, checks: Sequence[Check], now: float, consume: bool = True) -> Any:
        return self.decide(checks, now, consume)

    async def arefund(self, checks: Sequence[Check], now: float, at: float) -> None:
        self.refund(checks, now, at)

    async def areset(self, limits: Sequence[Limit], key: str) -> None:
        self.reset(limits, key)


ONE_LIMIT = """
[service]
failure = "{failure}"
{share}

[[domains.d.descriptors]]
key = "user"
limits = [{{ algorithm = "token-bucket", rate = "4/hour", burst = 4 }}]
"""


@pytest.mark.parametrize(("failure", "share"), [
    ("open", 1.0), ("closed", 1.0), ("local", 1.0), ("local", 0.5)])
async def test_store_down_gives_the_outcome_of_a_limiter_with_the_same_policy(
        failure: FailurePolicy, share: float) -> None:
    snap = parse_policies_text(ONE_LIMIT.format(
        failure=failure, share=f"fallback_share = {share}" if share != 1 else ""))
    e = Engine(lambda: snap, DownStore(), clock=ManualClock())  # type: ignore[arg-type]
    (rule,) = snap.domains["d"].rules
    lim = rule.limits[0].limit
    limiter = AsyncLimiter(lim, DownStore(), clock=ManualClock(),  # type: ignore[arg-type]
                           failure=failure, fallback_share=share)
    # t=0: six requests of one user through each; every decision must be the same.
    service = [(await e.check("d", [desc(("user", "u"))])).decision for _ in range(6)]
    library = [await limiter.hit("user=u") for _ in range(6)]
    assert service == library
    assert all(d is not None and d.degraded for d in service)
    admitted = sum(d.allowed for d in library)
    assert admitted == {"open": 6, "closed": 0, "local": 4 if share == 1 else 2}[failure]


class BuggyStore(MemoryStore):
    """A store with a bug: not a store failure, an error of the code."""

    async def adecide(self, checks: Sequence[Check], now: float,
                      consume: bool = True) -> tuple[list[Any], float]:
        raise ZeroDivisionError("a bug in the store (test)")


async def test_a_bug_in_the_store_is_raised_not_answered_as_degraded(
        caplog: pytest.LogCaptureFixture) -> None:
    e, _ = engine(policies('failure = "open"'), store=BuggyStore())
    with caplog.at_level(logging.WARNING), pytest.raises(ZeroDivisionError):
        await e.check("d", [desc(("user", "u"))])
    assert not any("rate limit store failed" in m for m in caplog.messages)
    assert e.failure.errors == 0


async def test_a_bug_in_the_store_is_a_500_over_http_logged_once_with_its_traceback(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import httpx  # noqa: PLC0415

    from ratekeeper.service import Service, create_app  # noqa: PLC0415

    path = tmp_path / "p.toml"
    path.write_text(POLICIES.format(service="", domain=""))
    service = Service(PolicyHolder(path), BuggyStore(), clock=ManualClock())
    transport = httpx.ASGITransport(app=create_app(service))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        with caplog.at_level(logging.WARNING):
            r = await client.post("/v1/check", json={"domain": "d",
                                                     "descriptors": [{"user": "u"}]})
    assert r.status_code == 500 and r.json()["title"] == "Internal Server Error"
    errors = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(errors) == 1 and errors[0].exc_info is not None
    assert errors[0].exc_info[0] is ZeroDivisionError


async def test_global_counters_are_the_library_global_key() -> None:
    store = MemoryStore()
    clock = ManualClock()
    snap = policies()
    e = Engine(lambda: snap, store, clock=clock)
    assert (await e.check("d", [desc(("tenant", "a"))])).allowed  # 1 of 2 per hour
    (rule,) = [r for r in snap.domains["d"].rules if r.name == "tenant"]
    lim = rule.limits[0].limit
    assert lim.scope == "global"
    # A library limiter on the same store and limit reads the same counter.
    limiter = AsyncLimiter(lim, store, clock=clock)
    assert (await limiter.peek("anyone")).remaining == 0  # a hit now takes the last one
    assert (await limiter.hit("anyone")).allowed  # 2 of 2
    assert not (await e.check("d", [desc(("tenant", "b"))])).allowed


def test_the_watch_polls_once_per_period_of_its_clock_and_stamps_reloads(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    path = tmp_path / "p.toml"
    path.write_text(POLICIES.format(service="", domain=""))
    holder = PolicyHolder(path, clock=lambda: 1_000_000.0 + clock())  # wall time of loads
    watch = Watcher(holder, 5.0, clock=clock)
    assert holder().loaded_at == 1_000_000.0
    # t=0 and t=4.9: no poll due, even though the file changed.
    path.write_text(POLICIES.format(service="", domain='description = "v2"'))
    assert not watch.tick()
    clock.set(4.9)
    assert not watch.tick() and holder().generation == 1
    # t=5: the poll sees the change; the snapshot is stamped with the holder's clock.
    clock.set(5.0)
    assert watch.tick() and holder().generation == 2 and holder().loaded_at == 1_000_005.0
    assert not watch.tick()  # the same instant: the next poll is due at t=10
    # t=10: a bad file is read once and rejected; the polls at t=15..35 leave it alone.
    path.write_text("[domains.d]\n")
    with caplog.at_level(logging.DEBUG, "ratekeeper"):
        for t in (10.0, 15.0, 20.0, 25.0, 30.0, 35.0):
            clock.set(t)
            assert watch.tick()
    polls = [r for r in caplog.records if getattr(r, "event", "") == "watch_poll"]
    assert [r.changed for r in polls] == [True, False, False, False, False, False]  # type: ignore[attr-defined]
    assert sum(getattr(r, "event", "") == "reload_failed" for r in caplog.records) == 1
    assert holder().generation == 2 and holder.last_error is not None
    # A clock that jumps an hour ahead gives one poll, not 720 of them.
    clock.set(3635.0)
    assert watch.tick() and not watch.tick() and watch.due_in() == 5.0
    assert watch.polls == 8  # t=5, t=10..35 (six), t=3635


@pytest.mark.parametrize("every", [0, -1, float("inf"), float("nan"), True])
def test_a_watch_period_must_be_positive_seconds(tmp_path: Path, every: float) -> None:
    path = tmp_path / "p.toml"
    path.write_text(POLICIES.format(service="", domain=""))
    with pytest.raises(ValueError, match="watch period"):
        Watcher(PolicyHolder(path), every)


async def test_descriptors_not_charged_report_their_true_remaining() -> None:
    # All-or-nothing: [tenant] rejects, so [user] is not charged, and its status says what it
    # really has left (before: as if charged, 2, while the next check still found 3).
    e, _ = engine()
    for t in ("a", "b"):
        assert (await e.check("d", [desc(("tenant", t))])).allowed  # 2/hour for all tenants
    r = await e.check("d", [desc(("user", "u")), desc(("tenant", "c"))])
    assert not r.allowed
    user, tenant = r.statuses
    assert user.outcome == "allowed" and user.decision is not None
    assert user.decision.remaining == 3  # 3/hour, nothing charged
    assert tenant.outcome == "rejected"
    r = await e.check("d", [desc(("user", "u"))])
    assert r.decision is not None and r.decision.remaining == 2


async def test_a_descriptor_hits_of_zero_checks_without_charging() -> None:
    # envoyproxy/ratelimit (src/utils/utilities.go, GetHitsAddends): a descriptor's own hits
    # of 0 checks the limit and charges nothing.
    e, _ = engine()
    r = await e.check("d", [desc(("user", "u"), hits=0)], hits=2)
    assert r.allowed and r.statuses[0].decision is not None
    assert r.statuses[0].decision.remaining == 3
    for left in (2, 1, 0):
        r = await e.check("d", [desc(("user", "u"))])
        assert r.decision is not None and r.decision.remaining == left
    r = await e.check("d", [desc(("user", "u"), hits=0)])
    assert r.allowed and r.statuses[0].decision is not None  # full, and nothing asked
    assert r.statuses[0].decision.remaining == 0
    assert not (await e.check("d", [desc(("user", "u"))])).allowed


async def test_an_unknown_domain_answers_every_descriptor_unmatched() -> None:
    # envoyproxy/ratelimit: an unknown domain has no limits (test/config/config_test.go,
    # TestBasicConfig: GetLimit("foo_domain", ...) is nil); `unknown_domain = "error"` is
    # ratekeeper's strict option.
    e, _ = engine()
    r = await e.check("nope", [desc(("user", "u")), desc(("ip", "x"))])
    assert r.allowed and r.decision is None and not r.known_domain
    assert [s.outcome for s in r.statuses] == ["unmatched", "unmatched"]
    e, _ = engine(policies('unknown_domain = "error"'))
    with pytest.raises(UnknownDomain) as info:
        await e.check("nope", [desc(("user", "u"))])
    assert info.value.known == ("d",)


async def test_a_descriptor_without_entries_matches_nothing() -> None:
    # test/config/config_test.go, TestBasicConfig: GetLimit("test-domain", {}) is nil.
    e, _ = engine()
    r = await e.check("d", [make_descriptor([]), desc(("user", "u"))])
    assert r.allowed and [s.outcome for s in r.statuses] == ["unmatched", "allowed"]


def test_the_watch_sees_an_edit_inside_a_yaml_config_directory(tmp_path: Path) -> None:
    # envoyproxy/ratelimit's runtime layout: one file per domain in a directory. Editing a
    # file in place leaves the directory's own mtime alone; the watch must still see it.
    conf = tmp_path / "config"
    conf.mkdir()
    rules = conf / "api.yaml"
    yaml = ("domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n"
            "      unit: minute\n      requests_per_unit: {n}\n")
    rules.write_text(yaml.format(n=2))
    clock = ManualClock()
    holder = PolicyHolder(conf)
    watch = Watcher(holder, 1.0, clock=clock)
    dir_mtime = conf.stat().st_mtime_ns
    with rules.open("r+") as f:  # in place: same inode, same directory entry
        f.write(yaml.format(n=5))
    os.utime(rules, ns=(rules.stat().st_atime_ns, rules.stat().st_mtime_ns + 1_000_000_000))
    assert conf.stat().st_mtime_ns == dir_mtime
    clock.set(1.0)
    assert watch.tick() and holder().generation == 2


def test_the_ticket_of_a_charged_admitted_check_is_a_ticket_and_none_otherwise() -> None:
    # core.charged builds its Ticket without the NamedTuple's constructor (the hot path's
    # every admitted decision makes one): it must still be a Ticket, field for field.
    store = MemoryStore()
    lim = Limit("fixed-window", "1/s", name="t")
    checks: list[Check] = [(lim, "k", 1.0)]
    failure = core.Failure("open")
    admitted, at = store.decide(checks, 0.0)
    ticket = core.charged(store, checks, admitted, at, failure=failure)
    assert type(ticket) is core.Ticket
    assert ticket == core.Ticket(store, checks, at)
    assert (ticket.store, ticket.checks, ticket.at) == (store, checks, at)
    rejected, at = store.decide(checks, 0.0)
    assert not rejected[0].allowed
    assert core.charged(store, checks, rejected, at, failure=failure) is None
    assert core.charged(store, checks, admitted, at, failure=failure, consume=False) is None
