"""Step tables at named instants, in the manner of Go's ``rate_test.go``.

A table is a list of `Step`: at instant ``t``, a request of ``cost`` for ``key`` expects
``allowed`` and, where given, ``remaining``, ``retry_after``, ``reset_after`` and ``delay``
(`ANY` means "not checked"; ``retry_after=None`` means "never"). `run` replays a table through
one backend:

* ``"pure"``: the algorithm's pure ``decide`` function, keeping the states in a dict;
* ``"memory"``: a `Limiter` on a `MemoryStore` with a `ManualClock`;
* a `StoreBackend`: a `Limiter` (``failure="raise"``) on the store it makes, one fresh store
  per runner. tests/integration passes Redis, Valkey and cluster ones to the same test
  functions, as their ``backend`` argument: nothing is patched.

After every rejected step it also checks that the key's state did not change.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import pytest

from ratekeeper import Decision, Limit, Limiter, MemoryStore
from ratekeeper.algorithms import get
from ratekeeper.testing import ManualClock

__all__ = ["ANY", "BACKENDS", "Runner", "Step", "StoreBackend", "run"]

#: Time and float tolerance for a step table (the tables use exact instants); a duration
#: computed at instant t also carries t's own rounding (0.24 µs at Unix time), see `_close`.
TOL = 1e-9


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY: Any = _Any()

BACKENDS = ("pure", "memory")


class Step(NamedTuple):
    t: float
    cost: float
    allowed: bool
    remaining: Any = ANY
    retry_after: Any = ANY
    reset_after: Any = ANY
    delay: Any = ANY
    key: str = "a"


class StoreBackend(NamedTuple):
    """A store to replay tables on: `make()` returns a fresh one (its own namespace), with
    ``state(limit, key)`` and, if it keeps time, a client clock."""

    name: str
    make: Callable[[], Any]

    def __str__(self) -> str:
        return self.name


MEMORY = StoreBackend("memory", MemoryStore)


class Runner:
    """Decisions for one limit through one backend, with access to the raw state."""

    def __init__(self, limit: Limit, backend: str | StoreBackend) -> None:
        self.limit = limit
        self.backend = str(backend)
        self.algo = get(limit.algorithm)
        self.states: dict[str, Any] = {}
        self.clock = ManualClock()
        if backend == "pure":
            return
        if not isinstance(backend, StoreBackend):
            assert backend == "memory", f"unknown backend {backend!r}"
            backend = MEMORY
        self.store = backend.make()
        self.limiter = Limiter(limit, self.store, clock=self.clock, sleep=self.clock.sleep,
                               failure="raise")

    def decide(self, t: float, cost: float, key: str = "a") -> Decision:
        if self.backend == "pure":
            new, d = self.algo.decide(self.states.get(key), t, cost, self.limit)
            if d.allowed:
                assert new is not None, "an admitted request must return a new state"
                self.states[key] = new
            else:
                assert new is None, f"a rejected request returned a new state {new!r}"
            return d
        self.clock.set(t)
        return self.limiter.hit(key, cost)

    def state(self, key: str = "a") -> Any:
        if self.backend == "pure":
            return self.states.get(key)
        return self.store.state(self.limit, key)


def _close(got: float | None, want: float | None, t: float = 0.0) -> bool:
    if want is None or got is None:
        return got is None and want is None
    return abs(got - want) <= max(TOL, 4 * math.ulp(t))


def check(i: int, step: Step, d: Decision) -> None:
    where = f"step {i} at t={step.t!r} cost={step.cost!r} key={step.key!r}: got {d!r}"
    assert d.allowed is step.allowed, where
    if step.remaining is not ANY:
        assert type(d.remaining) is int, where
        assert d.remaining == step.remaining, f"remaining: {where}"
    if step.retry_after is not ANY:
        assert _close(d.retry_after, step.retry_after, step.t), f"retry_after: {where}"
    if step.reset_after is not ANY:
        assert _close(d.reset_after, step.reset_after, step.t), f"reset_after: {where}"
    if step.delay is not ANY:
        assert _close(d.delay, step.delay, step.t), f"delay != {step.delay}: {where}"
    if d.allowed:
        assert d.retry_after == 0.0, where
    else:
        assert d.delay == 0.0, where


def run(limit: Limit, steps: Sequence[Step], backend: str | StoreBackend) -> Runner:
    """Replay `steps`; fail at the first step that disagrees."""
    r = Runner(limit, backend)
    for i, step in enumerate(steps):
        before = r.state(step.key)
        d = r.decide(step.t, step.cost, step.key)
        check(i, step, d)
        assert d.limit == limit
        if not d.allowed:
            assert r.state(step.key) == before, f"step {i}: a rejection changed the state"
    return r


backends = pytest.mark.parametrize("backend", BACKENDS)
