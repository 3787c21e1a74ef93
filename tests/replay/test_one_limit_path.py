"""Replay's one-limit path decides exactly as `decide_mapped` does, on random traces.

A remembered request whose decision is one limit's (plain rules, one store check, no queue
to refund) is decided by ``decide_one``, or by the `MemoryStore`'s bound hit for the
algorithms of `BOUND_ALGORITHMS`, instead of the `decide_mapped` plan. Each test replays
random events at Unix-time magnitudes (where float rounding differs first) both ways,
``remember=True`` and ``remember=False`` (`decide_request` for every event), and compares
them event by event: verdict, decision, limits, failure policy, descriptors, the request.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratekeeper.policy import Policies
from ratekeeper.policy._loader import parse_policies_text
from ratekeeper.replay import _replay as replay_module
from ratekeeper.replay._events import LogEvent
from ratekeeper.replay._replay import BOUND_ALGORITHMS, replay
from tests.replay.test_fast_path import assert_same, outcome

ALGORITHMS = ["gcra", "token-bucket", "fixed-window", "sliding-window-counter",
              "sliding-window-log", "leaky-bucket"]
CLIENTS = ["198.51.100.1", "198.51.100.2", "2001:db8::1", "2001:db8:0:1::7", "192.0.2.5"]
TARGETS = [("GET", "/"), ("GET", "/api/items"), ("POST", "/login"), ("GET", "/health"),
           ("PUT", "/heavy")]


def policies_text(algorithm: str, rate: str, burst: int, *, nodelay: bool,
                  max_delay: float | None, heavy_cost: float, dry_run: bool) -> str:
    """Per client, one limit; /heavy costs `heavy_cost`, /login has a second limit (two
    checks: the plan path), /health and 192.0.2.0/24 are exempt."""
    extra = f", burst = {burst}" if algorithm in ("gcra", "token-bucket", "leaky-bucket") \
        else ""
    if algorithm == "leaky-bucket":
        extra += f", nodelay = {'true' if nodelay else 'false'}"
    http = "" if max_delay is None else f"max_delay = {max_delay}\n"
    if dry_run:
        http += "dry_run = true\n"
    return f'''
[http]
domain = "web"
descriptors = [["client_ip"]]
{http}
[http.exempt]
paths = ["/health"]
networks = ["192.0.2.0/24"]

[[http.routes]]
name = "heavy"
path = "/heavy"
cost = {heavy_cost}

[[http.routes]]
name = "login"
path = "/login"
descriptors = [["client_ip"], ["route", "client_ip"]]

[[domains.web.descriptors]]
key = "client_ip"
limits = [{{ name = "per-ip", algorithm = "{algorithm}", rate = "{rate}"{extra} }}]

[[domains.web.descriptors]]
key = "route"
value = "login"
  [[domains.web.descriptors.descriptors]]
  key = "client_ip"
  limits = [{{ name = "login", algorithm = "gcra", rate = "1/s", burst = 2 }}]
'''


def events_of(start: float, steps: list[tuple[float, int, int]], interval: float = 1.0
              ) -> list[LogEvent]:
    """Events `interval` * gap apart (an emission interval: a client at the limit's rate,
    where a drained bucket's float rounding decides)."""
    out, t = [], start
    for i, (gap, c, r) in enumerate(steps):
        t += gap * interval
        method, path = TARGETS[r]
        out.append(LogEvent(t, CLIENTS[c], method, path, 200, 0, None, None, None, {}, {},
                            i + 1))
    return out


STEPS = st.lists(st.tuples(st.sampled_from([0.0, 0.0, 1e-6, 0.01, 0.25, 0.5, 1.0, 1.0, 1.0,
                                            1.0, 3.0, 30.0]),
                           st.sampled_from([0, 0, 0, 1, 2, 3, 4]),
                           st.integers(0, len(TARGETS) - 1)), min_size=1, max_size=300)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(algorithm=st.sampled_from(ALGORITHMS),
       rate=st.sampled_from([(1, "s"), (2, "s"), (5, "s"), (7, "10s"), (3, "2s")]),
       burst=st.integers(1, 10), nodelay=st.booleans(),
       max_delay=st.sampled_from([None, None, 0.0, 0.3, 2.0]),
       heavy_cost=st.sampled_from([1, 2, 3, 1.5]), dry_run=st.booleans(),
       start=st.sampled_from([0.0, 1_700_000_000.0, 1_700_000_000.123, 1e6 + 0.1]),
       steps=STEPS)
def test_the_one_limit_path_decides_as_decide_mapped_on_random_traces(
        algorithm: str, rate: tuple[int, str], burst: int, nodelay: bool, max_delay: float | None,
        heavy_cost: float, dry_run: bool, start: float,
        steps: list[tuple[float, int, int]]) -> None:
    amount, period = rate
    policies = parse_policies_text(policies_text(
        algorithm, f"{amount}/{period}", burst, nodelay=nodelay, max_delay=max_delay,
        heavy_cost=heavy_cost, dry_run=dry_run))
    events = events_of(start, steps, float(period.rstrip("s") or 1) / amount)
    fast, plain = way(policies, events, True), way(policies, events, False)
    assert fast[1] == plain[1]  # the same error, if any (a fractional cost a limit refuses)
    assert_same(fast[0], plain[0])


def way(policies: Policies, events: list[LogEvent], remember: bool
        ) -> tuple[list[tuple[object, ...]], str | None]:
    """The outcomes of a replay, and the error that ended it (None: none did)."""
    out: list[tuple[object, ...]] = []
    try:
        for r in replay(policies, events, remember=remember):
            out.append(outcome(r))
    except Exception as e:
        return out, f"{type(e).__name__}: {e}"
    return out, None


class _Counting:
    """`decide_mapped`, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.real = replay_module.decide_mapped

    def __call__(self, *args: object) -> object:
        self.calls += 1
        return self.real(*args)  # type: ignore[arg-type]


def many_steps(n: int) -> list[tuple[float, int, int]]:
    return [((0.0, 0.01, 1e-6, 0.1)[i % 4], i % 2, i % 2) for i in range(n)]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_plain_one_limit_request_skips_the_plan_and_decides_the_same(
        algorithm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    policies: Policies = parse_policies_text(policies_text(
        algorithm, "5/s", 3, nodelay=True, max_delay=None, heavy_cost=1, dry_run=False))
    events = events_of(1_700_000_000.0, many_steps(2000))  # 5/s: gaps in seconds
    counting = _Counting()
    monkeypatch.setattr(replay_module, "decide_mapped", counting)
    fast = list(replay(policies, events))
    assert counting.calls == 0  # every event was one limit's, decided without the plan
    monkeypatch.undo()
    plain = list(replay(policies, events, remember=False))
    assert [r.verdict for r in fast] == [r.verdict for r in plain]
    assert {"allowed", "rejected"} <= {r.verdict for r in fast}
    assert_same([outcome(r) for r in fast], [outcome(r) for r in plain])


def test_the_bound_algorithms_are_algorithms() -> None:
    assert set(BOUND_ALGORITHMS) <= set(ALGORITHMS)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("start", [1_700_000_000.0, 1_700_000_000.37])
def test_a_client_at_the_rate_after_a_burst_decides_the_same_at_unix_time(
        algorithm: str, start: float) -> None:
    # A drained bucket, then one request per emission interval: each is admitted or not by
    # float rounding at the edge, where a hot path without the pure function's tolerance
    # for Unix-time instants parts from it.
    policies = parse_policies_text(policies_text(
        algorithm, "5/s", 8, nodelay=True, max_delay=None, heavy_cost=1, dry_run=False))
    steps = [(0.0, 0, 0)] * 8 + [(1.0, 0, 0)] * 200 + [(0.5, 0, 1)] * 50
    events = events_of(start, steps, 0.2)
    fast, plain = way(policies, events, True), way(policies, events, False)
    assert fast[1] is None and plain[1] is None
    assert_same(fast[0], plain[0])
