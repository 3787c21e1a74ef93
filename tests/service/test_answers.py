"""`_grpc.Answers`: the gRPC servicer's serialized answers, the common one (one descriptor
admitted by an enforced limit) remembered by what it depends on. A remembered answer must be
byte for byte the one `response_parts` builds for the same result, on random policies and
traffic, and with Envoy's limit headers as with ours.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratekeeper._types import Decision, Limit
from ratekeeper.policy._engine import CheckResult, DescriptorStatus, Engine
from ratekeeper.policy._model import Policies
from ratekeeper.policy._rules import PolicyLimit, Rule
from ratekeeper.service import _grpc
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.testing import ManualClock

from .test_plan_memo import _REPLACES, _policies, _run, _shapes

#: Clock steps that move resets across whole seconds and by float noise.
_steps = st.lists(st.tuples(st.integers(0, 3), st.sampled_from((1.0, 1.0, 2.0)),
                            st.sampled_from((0.0, 0.0, 0.25, 1.0, 1e-7, 0.999999, 600.0))),
                  min_size=1, max_size=40)
_HEADERS = st.sampled_from((None, _grpc.LimitHeaders(),
                            _grpc.LimitHeaders("X-RateLimit-Limit", "X-RateLimit-Remaining",
                                               "X-RateLimit-Reset")))


def _built(result: CheckResult, headers: _grpc.LimitHeaders | None, now: float) -> bytes:
    """The answer built afresh, remembering nothing."""
    parts = _grpc.response_parts(result, headers, now=now)
    data: bytes = _grpc.response_of(parts).SerializeToString()
    return data


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_policies(), st.just(_REPLACES)), _shapes, _steps, _HEADERS)
def test_a_remembered_answer_is_the_one_built_for_the_same_result(
        snap: Policies, shapes: list[Any], steps: list[Any],
        headers: _grpc.LimitHeaders | None) -> None:
    clock = ManualClock(1000.0)
    engine = Engine(lambda: snap, MemoryStore(), clock=clock)
    answers = _grpc.Answers(headers)
    for i, hits, advance in steps:
        clock.advance(advance)
        domain, raw = shapes[i % len(shapes)]
        result = _run(engine, snap, (domain, raw, hits), forget=False, via_check=True)
        if isinstance(result, CheckResult):
            assert answers(result, clock()) == _built(result, headers, clock()), raw


_LIMIT = Limit("gcra", "10/minute", name="per-user")


def _rule(label: str) -> Rule:
    return Rule("d", f"user-{label or 'unnamed'}", (("user", None),),
                (PolicyLimit(_LIMIT, label=label),))


def _admitted(rule: Rule, remaining: float, reset: float) -> CheckResult:
    d = Decision(True, remaining, 0.0, reset, 0.0, _LIMIT)  # type: ignore[arg-type]
    return CheckResult("d", True, d, (DescriptorStatus("allowed", rule, d, rule.limit_objs),),
                       rule.limit_objs)


def test_answers_are_remembered_per_rounding_of_their_reset_and_per_rule() -> None:
    answers = _grpc.Answers()
    named, unnamed = _rule("per-user"), _rule("")
    results = [
        _admitted(named, 3, 1.9),
        _admitted(named, 3.7, 1.5),  # the same answer: 3 left, both resets say 2
        # 2 s to its status (float noise absorbed), 3 s to its RateLimit field's t=
        _admitted(named, 3, 2.0000001),
        _admitted(named, 3, 2.5),
        _admitted(unnamed, 3, 1.9),  # the same limit in a rule that does not name it
        _admitted(named, 4, 1.9),
    ]
    for _ in range(2):  # built, then remembered
        for r in results:
            assert answers(r, 1000.0) == _built(r, None, 1000.0), r
    assert len(answers) == 5
    back = _grpc.rls_pb2.RateLimitResponse.FromString(answers(results[2], 1000.0))
    assert back.statuses[0].duration_until_reset.seconds == 2
    assert ("RateLimit", '"per-user";r=3;t=3') in [
        (h.key, h.value) for h in back.response_headers_to_add]
    assert _grpc.rls_pb2.RateLimitResponse.FromString(
        answers(results[4], 1000.0)).statuses[0].current_limit.name == ""


def test_other_answers_are_built_each_time() -> None:
    answers = _grpc.Answers()
    rule = _rule("per-user")
    rejected = Decision(False, 0, 3.0, 3.0, 0.0, _LIMIT)
    over = CheckResult("d", False, rejected,
                       (DescriptorStatus("rejected", rule, rejected, rule.limit_objs),),
                       rule.limit_objs)
    legacy = _admitted(rule, 3, 1.9)._replace(legacy_headers=True)
    two = _admitted(rule, 3, 1.9)
    two = two._replace(statuses=two.statuses * 2)
    no_reset = _admitted(rule, 3, 0.0)
    # global shadow mode: admitted, but nothing enforced decided (its fields are built from
    # the statuses)
    shadowed = _admitted(rule, 3, 1.9)._replace(decision=None, policies=())
    for r in (over, legacy, two, no_reset, shadowed):
        assert answers(r, 1000.0) == _built(r, None, 1000.0)
    assert len(answers) == 0
