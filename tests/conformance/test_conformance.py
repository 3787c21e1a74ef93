"""Every conformance case, replayed three ways and compared exactly as check.py compares.

(a) through the pure algorithm functions, (b) through `Limiter` + `MemoryStore` on a
`ManualClock`, (c) through ``ratekeeper simulate`` (`ratekeeper.cli.main`). The cases are
copies of ``../shared/conformance/cases`` (data, not code): each is one trace plus the
decisions a reference implementation (Go x/time/rate, a model of nginx limit_req verified
against nginx, or the window definitions) made on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import Decision, Limit, Limiter, MemoryStore
from ratekeeper.algorithms import get
from ratekeeper.cli import main
from ratekeeper.testing import ManualClock
from tests.conformance.check import compare

CASES_DIR = Path(__file__).parent / "cases"
CASE_FILES = sorted(CASES_DIR.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    case: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return case


def limit_of(case: dict[str, Any]) -> Limit:
    mode = case.get("mode")
    delay = int(mode.split("=", 1)[1]) if mode and mode.startswith("delay=") else 0
    return Limit(case["algorithm"], case["rate"], burst=case.get("burst"),
                 nodelay=mode == "nodelay", delay=delay)


def as_output(d: Decision) -> dict[str, Any]:
    """A `Decision` in the shape `simulate` prints (retry_after 0 when allowed)."""
    return {
        "allowed": d.allowed,
        "remaining": d.remaining,
        "retry_after": 0 if d.allowed else d.retry_after,
        "delay": d.delay if d.allowed else None,
    }


# -- the comparison: the repository's checker itself (tests/conformance/check.py) ---------


def assert_agrees(case: dict[str, Any], outs: list[dict[str, Any]]) -> None:
    n = len(case["expected"])
    assert len(outs) == n, f"{len(outs)} decisions for {n} events"
    diffs = []
    for i, (exp, got) in enumerate(zip(case["expected"], outs, strict=True)):
        bad = compare(exp, got)
        if bad:
            diffs.append(f"event {i} {case['events'][i]}: {'; '.join(bad)}")
    assert not diffs, f"{case['name']}: {len(diffs)}/{n} events differ:\n" + "\n".join(diffs[:10])


# -- the comparison itself must be able to fail ----------------------------------------------

@pytest.mark.parametrize(
    ("exp", "got", "ok"),
    [
        ({"allowed": True, "remaining": 2, "retry_after": 0.0}, {"allowed": True, "remaining": 2,
                                                                 "retry_after": 0}, True),
        ({"allowed": True}, {"allowed": 1}, False),  # not a bool
        ({"allowed": True}, {"allowed": False}, False),
        ({"allowed": True, "remaining": 2}, {"allowed": True, "remaining": 3}, False),
        ({"allowed": True, "remaining": 2}, {"allowed": True, "remaining": 2.0}, True),
        ({"allowed": False, "retry_after": 1.0}, {"allowed": False, "retry_after": 1.0009}, True),
        ({"allowed": False, "retry_after": 1.0}, {"allowed": False, "retry_after": 1.0011}, False),
        ({"allowed": False, "retry_after": None}, {"allowed": False, "retry_after": None}, True),
        ({"allowed": False, "retry_after": None}, {"allowed": False, "retry_after": "inf"}, True),
        ({"allowed": False, "retry_after": None}, {"allowed": False, "retry_after": 5.0}, False),
        ({"allowed": False, "retry_after": 5.0}, {"allowed": False, "retry_after": None}, False),
        ({"allowed": False, "delay": None}, {"allowed": False, "delay": 0}, True),
        ({"allowed": False, "delay": None}, {"allowed": False}, True),
        ({"allowed": True, "delay": None}, {"allowed": True, "delay": 0}, False),
        ({"allowed": True, "delay": 2.0}, {"allowed": True, "delay": 1.0}, False),
    ],
)
def test_compare_is_strict(exp: dict[str, Any], got: dict[str, Any], ok: bool) -> None:
    assert (compare(exp, got) == []) is ok


def test_fixture_set_is_complete() -> None:
    assert len(CASE_FILES) >= 22
    algorithms = {load(p)["algorithm"] for p in CASE_FILES}
    assert algorithms == {"token-bucket", "gcra", "leaky-bucket", "fixed-window",
                          "sliding-window-log", "sliding-window-counter"}
    for p in CASE_FILES:
        case = load(p)
        assert len(case["events"]) == len(case["expected"]) > 0, p.name


cases = pytest.mark.parametrize("path", CASE_FILES, ids=[p.stem for p in CASE_FILES])


# -- (a) pure functions ----------------------------------------------------------------------

@cases
def test_pure_functions(path: Path) -> None:
    case = load(path)
    limit = limit_of(case)
    algo = get(limit.algorithm)
    states: dict[str, Any] = {}
    outs = []
    for ev in case["events"]:
        key = ev["key"]
        cost = limit.check_cost(ev.get("cost", 1))
        new, d = algo.decide(states.get(key), float(ev["t"]), cost, limit)
        if d.allowed:
            states[key] = new
        else:
            assert new is None, "a rejection must not produce a new state"
        outs.append(as_output(d))
    assert_agrees(case, outs)


# -- (b) Limiter + MemoryStore + ManualClock -------------------------------------------------

@cases
def test_limiter_memory_store(path: Path) -> None:
    case = load(path)
    limit = limit_of(case)
    clock = ManualClock()
    store = MemoryStore()
    limiter = Limiter(limit, store, clock=clock, failure="raise")
    outs = []
    for ev in case["events"]:
        clock.set(ev["t"])
        before = store.state(limit, ev["key"])
        d = limiter.hit(ev["key"], ev.get("cost", 1))
        if not d.allowed:
            assert store.state(limit, ev["key"]) == before
        assert not d.degraded
        outs.append(as_output(d))
    assert_agrees(case, outs)


# -- (c) ratekeeper simulate -----------------------------------------------------------------

def simulate_args(case: dict[str, Any], trace: Path) -> list[str]:
    args = ["simulate", case["algorithm"], "--rate", case["rate"]]
    if case.get("burst") is not None:
        args += ["--burst", str(case["burst"])]
    mode = case.get("mode")
    if mode == "nodelay":
        args.append("--nodelay")
    elif mode and mode.startswith("delay="):
        args += ["--delay", mode.split("=", 1)[1]]
    return [*args, "--trace", str(trace)]


@cases
def test_simulate_cli(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = load(path)
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(e) + "\n" for e in case["events"]), encoding="utf-8")
    rc = main(simulate_args(case, trace))
    out, err = capsys.readouterr()
    assert rc == 0, err
    outs = [json.loads(line) for line in out.splitlines() if line.strip().startswith("{")]
    for o in outs:
        assert "error" not in o, o
        if o["allowed"]:
            assert o["retry_after"] == 0
    assert_agrees(case, outs)
