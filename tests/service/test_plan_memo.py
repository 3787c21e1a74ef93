"""`Engine.plan` remembers what it works out before its store calls (the rules matched, the
checks and their keys) per request shape; a remembered plan must decide exactly as a fresh
one. Two engines on two identical stores and one `ManualClock` run the same random request
sequences on random policies: one forgets its plans before every check (the general path),
the other remembers them. Every answer must be equal: statuses (outcome, rule, decision,
limits), the overall verdict and decision, policies, degraded, failure, ticket presence.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratekeeper import core
from ratekeeper._errors import StoreUnavailable
from ratekeeper._memo import Memo
from ratekeeper._types import Decision
from ratekeeper.policy._engine import CheckResult, Engine, InvalidRequest, make_descriptor
from ratekeeper.policy._envoy_config import parse_envoy_config
from ratekeeper.policy._loader import parse_policies_text
from ratekeeper.policy._model import Policies
from ratekeeper.policy._stats import NullStats
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.testing import ManualClock

_ALGORITHMS = ("fixed-window", "token-bucket", "gcra", "sliding-window-log",
               "sliding-window-counter")
_KEYS = ("user", "op", "tenant")
_VALUES = ("a", "b", "vip-1", "x")


@st.composite
def _policies(draw: Any) -> Policies:
    """A random TOML policies file: shadow modes (service, domain, rule), unlimited rules,
    rule costs, per-rule failure policies, limits of every algorithm, scoped and global."""
    out = ['[service]\nmax_cost = 50']
    if draw(st.booleans()) and draw(st.booleans()):
        out.append("shadow_mode = true")
    domain_shadow = draw(st.booleans()) and draw(st.booleans())
    out.append(f"\n[domains.d]\nshadow_mode = {str(domain_shadow).lower()}")
    for i, key in enumerate(draw(st.lists(st.sampled_from(_KEYS), min_size=1, max_size=3,
                                          unique=True))):
        for value in draw(st.lists(st.sampled_from((None, "vip-*", "a")), min_size=1,
                                   max_size=2, unique=True)):
            out.append(f"\n[[domains.d.descriptors]]\nkey = \"{key}\"")
            if value is not None:
                out.append(f'value = "{value}"')
            if draw(st.integers(0, 5)) == 0:
                out.append("unlimited = true")
                continue
            if draw(st.integers(0, 3)) == 0:
                out.append("shadow_mode = true")
            if draw(st.integers(0, 3)) == 0:
                out.append(f'failure = "{draw(st.sampled_from(("open", "closed")))}"')
            if draw(st.booleans()):
                out.append(f"cost = {draw(st.sampled_from((1, 2, 3)))}")
            limits = []
            for j in range(draw(st.integers(1, 2))):
                alg = draw(st.sampled_from(_ALGORITHMS))
                rate = draw(st.sampled_from(("3/hour", "5/hour", "10/hour")))
                scope = ', scope = "global"' if draw(st.integers(0, 3)) == 0 else ""
                limits.append(f'{{ name = "l{i}{value or ""}{j}", algorithm = "{alg}", '
                              f'rate = "{rate}"{scope} }}')
            out.append(f"limits = [{', '.join(limits)}]")
    return parse_policies_text("\n".join(out))


_REPLACES = parse_envoy_config([("d.yaml", """
domain: d
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3, name: per-user}
  - key: op
    rate_limit:
      unit: hour
      requests_per_unit: 5
      replaces: [{name: per-user}]
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 0}
""")])

_entries = st.lists(st.tuples(st.sampled_from(_KEYS), st.sampled_from(_VALUES)),
                    min_size=0, max_size=2)
_descriptor = st.tuples(_entries, st.sampled_from((None, None, 0, 1, 2)))
#: A few request shapes per example, each sent many times with varying hits: the memory is
#: used, and a plan remembered for one hits value must not answer for another.
_shapes = st.lists(st.tuples(st.sampled_from(("d", "d", "unknown")),
                             st.lists(_descriptor, min_size=1, max_size=3)),
                   min_size=1, max_size=4)
_steps = st.lists(st.tuples(st.integers(0, 3), st.sampled_from((1.0, 1.0, 2.0)),
                            st.sampled_from((0.0, 0.0, 1.0, 600.0))),
                  min_size=1, max_size=40)


class _Awaited(MemoryStore):
    """A MemoryStore the engine drives through its async methods, as it drives a Redis
    store: `Engine.check`'s awaited direct path (its async methods never wait)."""


def _summary(r: CheckResult | str) -> Any:
    if isinstance(r, str):
        return r
    return (r._replace(ticket=None), r.ticket is not None,
            None if r.ticket is None else r.ticket.checks)


def _run(engine: Engine, snap: Policies, req: Any, forget: bool, *,
         via_check: bool = False) -> CheckResult | str:
    """`req` planned on `snap` (or, `via_check`, through `Engine.check`, whose direct path
    answers a remembered one-rule request on a MemoryStore with plain calls)."""
    domain, raw, hits = req
    descriptors = [make_descriptor(entries, hits=h) for entries, h in raw]
    if forget:
        engine._plans.clear()
    try:
        if via_check:
            coro = engine.check(domain, descriptors, hits)
            try:
                coro.send(None)  # on a MemoryStore it never waits
            except StopIteration as done:
                result: CheckResult = done.value
                return result
            raise AssertionError("Engine.check waited on a MemoryStore")
        return core.run(engine.plan(snap, domain, descriptors, hits))
    except InvalidRequest as e:
        return f"{type(e).__name__}: {e}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_policies(), st.just(_REPLACES)), _shapes, _steps)
def test_a_remembered_plan_decides_exactly_as_a_fresh_one(snap: Policies, shapes: list[Any],
                                                           steps: list[Any]) -> None:
    clock = ManualClock(1000.0)
    fresh = Engine(lambda: snap, MemoryStore(), clock=clock)
    remembered = Engine(lambda: snap, MemoryStore(), clock=clock)
    checked = Engine(lambda: snap, MemoryStore(), clock=clock)  # Engine.check's direct path
    awaited = Engine(lambda: snap, _Awaited(), clock=clock)  # its awaited direct path
    for i, hits, advance in steps:
        clock.advance(advance)
        domain, raw = shapes[i % len(shapes)]
        req = (domain, raw, hits)
        a = _run(fresh, snap, req, forget=True)
        b = _run(remembered, snap, req, forget=False)
        c = _run(checked, snap, req, forget=False, via_check=True)
        d = _run(awaited, snap, req, forget=False, via_check=True)
        assert _summary(b) == _summary(a), req
        assert _summary(c) == _summary(a), req
        assert _summary(d) == _summary(a), req


def test_check_answers_a_remembered_request_with_plain_calls_as_plan_does() -> None:
    # Engine.check's direct path (a remembered one-rule request on a MemoryStore): a
    # composite of two limits, admitted then rejected, its ticket and its store metric.
    snap = parse_policies_text(
        '[[domains.d.descriptors]]\nkey = "user"\nlimits = ['
        '{ name = "a", algorithm = "gcra", rate = "2/hour" }, '
        '{ name = "b", algorithm = "token-bucket", rate = "3/hour", scope = "global" }]')
    clock = ManualClock(1000.0)
    planned = Engine(lambda: snap, MemoryStore(), clock=clock)
    checked = Engine(lambda: snap, MemoryStore(), clock=clock)
    direct = []
    original = checked._one_rule_now

    def spy(*args: Any) -> CheckResult | None:
        got = original(*args)
        direct.append(got is not None)
        return got

    checked._one_rule_now = spy  # type: ignore[method-assign]
    for user in ("u", "u", "v", "u", "w", "v"):
        req = ("d", [([("user", user)], None)], 1.0)
        a, c = _run(planned, snap, req, forget=False), _run(checked, snap, req, forget=False,
                                                          via_check=True)
        assert _summary(c) == _summary(a), user
    assert direct == [False, True, False, True, False, True]  # new shapes go through plan
    last = _run(checked, snap, ("d", [([("user", "w")], None)], 1.0), False, via_check=True)
    assert isinstance(last, CheckResult) and not last.allowed  # the global 3/hour is spent


class _Failing(MemoryStore):
    """While `down`, fails every decision, or (`degrading`) answers it degraded, as a
    store with a fallback of its own would; counts the store calls made."""

    def __init__(self, *, awaited: bool, degrading: bool) -> None:
        super().__init__()
        self.down, self.calls = False, 0
        self.awaited, self.degrading = awaited, degrading

    def decide(self, checks: Any, now: float, consume: bool = True
               ) -> tuple[list[Decision], float]:
        self.calls += 1
        if self.down and not self.degrading:
            raise StoreUnavailable("the test's store is down")
        decisions, at = super().decide(checks, now, consume)
        if self.down:
            return [d._replace(degraded=True) for d in decisions], at
        return decisions, at

    async def adecide(self, checks: Any, now: float, consume: bool = True
                      ) -> tuple[list[Decision], float]:
        assert self.awaited
        return self.decide(checks, now, consume)


class _Recorded(NullStats):
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def store_call(self, seconds: float, error: str | None) -> None:
        self.events.append(("store_call", error))

    def failure_policy(self, policy: str) -> None:
        self.events.append(("failure_policy", policy))


@pytest.mark.parametrize("degrading", [False, True], ids=["raising", "degrading"])
@pytest.mark.parametrize("awaited", [False, True], ids=["plain", "awaited"])
@pytest.mark.parametrize("failure", ["open", "closed", "local"])
def test_a_failed_direct_store_call_is_the_failure_policys_without_asking_again(
        awaited: bool, failure: str, degrading: bool) -> None:
    # Engine.check's direct paths make the remembered one-rule request's store call
    # themselves; when it fails (or answers degraded), the plan goes on from that answer (the
    # store is not asked a second time) and answers, and counts, as the general path does.
    snap = parse_policies_text(
        f'[service]\nfailure = "{failure}"\n[[domains.d.descriptors]]\nkey = "user"\n'
        'limits = [{ algorithm = "fixed-window", rate = "2/hour" }]')
    clock = ManualClock(1000.0)
    stores = [_Failing(awaited=awaited, degrading=degrading),
              _Failing(awaited=False, degrading=degrading)]
    stats = [_Recorded(), _Recorded()]
    checked, planned = (Engine(lambda: snap, s, clock=clock, stats=st)
                        for s, st in zip(stores, stats, strict=True))
    checked._awaits_nothing = not awaited  # a MemoryStore subclass would be awaited
    req = ("d", [([("user", "u")], None)], 1.0)
    for down in (False, True, True, False):  # the first call plans; then direct
        for s in stores:
            s.down = down
        c = _run(checked, snap, req, forget=False, via_check=True)
        a = _run(planned, snap, req, forget=True)
        assert _summary(c) == _summary(a), down
        assert isinstance(c, CheckResult) and c.degraded == down
    assert stores[0].calls == stores[1].calls == 4  # one store call per request
    assert stats[0].events == stats[1].events
    assert ("failure_policy", failure) in stats[0].events


@pytest.mark.parametrize("store", [MemoryStore, _Awaited], ids=["plain", "awaited"])
def test_a_remembered_request_is_looked_up_once(store: type[MemoryStore]) -> None:
    # Engine.check's direct paths look the plan up for a one-descriptor request; a request
    # of several descriptors goes to `plan` without that lookup (`plan` makes it again).
    snap = parse_policies_text('[[domains.d.descriptors]]\nkey = "user"\n'
                               'limits = [{ algorithm = "fixed-window", rate = "9/hour" }]\n'
                               '[[domains.d.descriptors]]\nkey = "op"\n'
                               'limits = [{ algorithm = "gcra", rate = "9/hour" }]')
    engine = Engine(lambda: snap, store(), clock=ManualClock(0.0))
    lookups = 0

    class Counted(Memo[Any, Any]):
        def get(self, key: Any, default: Any = None) -> Any:
            nonlocal lookups
            lookups += 1
            return super().get(key, default)

    engine._plans = Counted(engine._plans.size)
    one, several = [([("user", "u")], None)], [([("user", "u")], None), ([("op", "x")], None)]
    seen = []
    for raw in (one, one, several, several):  # each planned, then remembered
        lookups = 0
        assert isinstance(_run(engine, snap, ("d", raw, 1.0), False, via_check=True),
                          CheckResult)
        seen.append(lookups)
    assert seen == [2, 1, 1, 1]  # (a shape never seen is missed by both: once per shape)


def test_a_request_seen_twice_is_planned_once() -> None:
    snap = parse_policies_text('[[domains.d.descriptors]]\nkey = "user"\n'
                               'limits = [{ algorithm = "fixed-window", rate = "2/hour" }]')
    clock = ManualClock(0.0)
    engine = Engine(lambda: snap, MemoryStore(), clock=clock)
    answers = [core.run(engine.plan(snap, "d", [make_descriptor([("user", "u")])]))
               for _ in range(3)]
    assert len(engine._plans) == 1
    assert [r.allowed for r in answers] == [True, True, False]
    assert [r.statuses[0].outcome for r in answers] == ["allowed", "allowed", "rejected"]


def test_a_reloaded_snapshot_plans_afresh() -> None:
    limited = parse_policies_text('[[domains.d.descriptors]]\nkey = "user"\n'
                                  'limits = [{ algorithm = "fixed-window", rate = "1/hour" }]')
    unlimited = parse_policies_text('[[domains.d.descriptors]]\nkey = "user"\n'
                                    'unlimited = true')
    clock = ManualClock(0.0)
    engine = Engine(lambda: limited, MemoryStore(), clock=clock)
    outcomes = [core.run(engine.plan(snap, "d", [make_descriptor([("user", "u")])])
                         ).statuses[0].outcome
                for snap in (limited, unlimited, limited, unlimited)]
    assert outcomes == ["allowed", "unlimited", "rejected", "unlimited"]


_one_descriptor = st.lists(st.tuples(st.sampled_from(_KEYS), st.sampled_from(_VALUES)),
                           min_size=1, max_size=2)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_policies(), st.just(_REPLACES)),
       st.lists(st.tuples(_one_descriptor, st.sampled_from((None, None, 0, 1, 2))),
                min_size=1, max_size=3), _steps)
def test_one_descriptor_answers_as_the_general_path(snap: Policies, shapes: list[Any],
                                                    steps: list[Any]) -> None:
    # A request of one descriptor whose rule is enforced takes Engine._one_rule; the same
    # descriptor beside one that no rule matches takes the general path. Both must answer
    # alike for it (the unmatched one changes nothing but adds its own status).
    clock = ManualClock(1000.0)
    alone = Engine(lambda: snap, MemoryStore(), clock=clock)
    checked = Engine(lambda: snap, MemoryStore(), clock=clock)  # Engine.check's direct path
    awaited = Engine(lambda: snap, _Awaited(), clock=clock)  # its awaited direct path
    general = Engine(lambda: snap, MemoryStore(), clock=clock)
    for i, hits, advance in steps:
        clock.advance(advance)
        entries, h = shapes[i % len(shapes)]
        a = _run(alone, snap, ("d", [(entries, h)], hits), forget=False)
        c = _run(checked, snap, ("d", [(entries, h)], hits), forget=False, via_check=True)
        w = _run(awaited, snap, ("d", [(entries, h)], hits), forget=False, via_check=True)
        assert _summary(w) == _summary(c), entries
        b = _run(general, snap, ("d", [(entries, h), ([("unmatched", "x")], None)], hits),
                 forget=False)
        if isinstance(a, str) or isinstance(b, str):
            assert a == b == c
            continue
        assert b.statuses[1].outcome == "unmatched"
        assert _summary(a) == _summary(b._replace(statuses=b.statuses[:1])), entries
        assert _summary(c) == _summary(a), entries


def test_a_reload_forgets_the_old_snapshots_plans() -> None:
    # A full memo keeps its entries (ratekeeper._memo.Memo); those of a snapshot no longer
    # served would keep the new one's plans out, so a new snapshot starts it afresh.
    a = parse_policies_text('[[domains.d.descriptors]]\nkey = "user"\n'
                            'limits = [{ algorithm = "fixed-window", rate = "2/hour" }]')
    b = parse_policies_text('[[domains.d.descriptors]]\nkey = "user"\n'
                            'limits = [{ algorithm = "fixed-window", rate = "3/hour" }]')
    engine = Engine(lambda: a, MemoryStore(), clock=ManualClock(0.0))
    engine._plans.size = 2
    for user in ("u", "v", "w"):  # the third is refused: full
        core.run(engine.plan(a, "d", [make_descriptor([("user", user)])]))
    assert len(engine._plans) == 2
    core.run(engine.plan(b, "d", [make_descriptor([("user", "u")])]))
    assert [got[0] for got in engine._plans.values()] == [b]
