"""The circuit breaker's public fast path (`CircuitBreaker.clean`), which the Redis store's
bound hot path reads instead of the breaker's private fields."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ratekeeper import StoreUnavailable
from ratekeeper.stores.redis import CircuitBreaker
from ratekeeper.testing import ManualClock

SRC = Path(__file__).resolve().parents[2] / "src" / "ratekeeper"
BREAKER = SRC / "stores" / "redis" / "_breaker.py"


def test_clean_is_true_exactly_while_before_and_success_have_nothing_to_do() -> None:
    clock = ManualClock(0.0)
    br = CircuitBreaker(failures=2, cooldown=1.0, clock=clock)
    assert br.clean and br.state == "closed"
    br.failure()
    assert not br.clean and br.state == "closed"  # one failure counted: success must reset it
    br.success()
    assert br.clean
    br.failure()
    br.failure()
    assert not br.clean and br.state == "open"
    with pytest.raises(StoreUnavailable):
        br.before()
    clock.advance(1.0)
    br.before()  # the probe
    assert not br.clean and br.state == "half-open"
    br.success()
    assert br.clean and br.state == "closed"


def test_a_disabled_breaker_stays_clean() -> None:
    br = CircuitBreaker(failures=0)
    for _ in range(3):
        br.failure()
    assert br.clean and br.state == "closed"


def private_fields() -> set[str]:
    tree = ast.parse(BREAKER.read_text(encoding="utf-8"))
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id == "self"
            and n.attr.startswith("_") and not n.attr.startswith("__")}


def test_nothing_outside_the_breaker_reads_its_private_fields() -> None:
    fields = private_fields()
    assert {"_open_until", "_consecutive"} <= fields
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == BREAKER:
            continue
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(n, ast.Attribute) and n.attr in fields
                    and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))):
                found.append(f"{path.relative_to(SRC)}:{n.lineno}: .{n.attr}")
    assert not found, found
