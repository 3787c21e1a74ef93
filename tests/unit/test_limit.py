"""`Limit` validation, cost validation, and the `Decision` value."""

from __future__ import annotations

import dataclasses
import math

import pytest

from ratekeeper import ALGORITHMS, Decision, InvalidCost, InvalidLimit, Limit, Rate
from ratekeeper._types import check_cost

BUCKETS = ["token-bucket", "gcra"]
WINDOWS = ["fixed-window", "sliding-window-log", "sliding-window-counter"]
ALL = [*BUCKETS, "leaky-bucket", *WINDOWS]


def test_algorithm_names() -> None:
    assert sorted(ALGORITHMS) == sorted(ALL)


# -- defaults and derived values ------------------------------------------------------------

@pytest.mark.parametrize("algo", BUCKETS)
def test_bucket_defaults(algo: str) -> None:
    lim = Limit(algo, "10/s")
    assert lim.burst == 10.0  # the rate's amount, as in x/time/rate NewLimiter(r, b=r)
    assert lim.capacity == 10.0 and lim.quota == 10
    assert lim.per_second == 10.0 and lim.interval == 0.1
    assert lim.window == 1.0  # an empty bucket refills in burst / rate seconds
    lim = Limit(algo, "3/2s", burst=4.5)
    assert lim.capacity == 4.5 and lim.quota == 4
    assert lim.window == 3.0


def test_leaky_defaults() -> None:
    lim = Limit("leaky-bucket", "10r/s")
    assert lim.burst == 0.0 and not lim.nodelay and lim.delay == 0
    assert lim.capacity == 1.0  # nginx admits burst + 1 at once
    lim = Limit("leaky-bucket", "10r/s", burst=5, nodelay=True)
    assert lim.capacity == 6.0 and lim.quota == 6
    assert lim.window == pytest.approx(0.6)


@pytest.mark.parametrize("algo", WINDOWS)
def test_window_defaults(algo: str) -> None:
    lim = Limit(algo, "100/minute")
    assert lim.burst is None
    assert lim.capacity == 100.0 and lim.period == 60.0 and lim.window == 60.0
    assert lim.quota == 100


def test_default_names_describe_the_parameters() -> None:
    assert Limit("gcra", "10/s", burst=20).name == "gcra-10/s-b20"
    assert Limit("fixed-window", "100/m").name == "fixed-window-100/m"
    assert Limit("leaky-bucket", "10r/s", burst=5, nodelay=True).name.endswith("nodelay")
    assert Limit("leaky-bucket", "10r/s", burst=5, delay=2).name.endswith("-d2")
    assert Limit("gcra", "1/s", scope="global").name.endswith("-global")
    # Different parameters, different names (and so different state in a store).
    names = {Limit("gcra", "10/s", burst=b).name for b in (1, 2, 3)}
    assert len(names) == 3


def test_custom_name() -> None:
    lim = Limit("gcra", "10/s", name="api:login")
    assert lim.name == "api:login"
    assert Limit("gcra", "10/s", name="x" * 200).name == "x" * 200


def test_limit_is_a_frozen_hashable_value() -> None:
    a = Limit("gcra", "10/s", burst=20)
    b = Limit("gcra", Rate(10, 1.0), burst=20.0)
    assert a == b and hash(a) == hash(b)
    assert a != Limit("gcra", "10/s", burst=21)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.burst = 5  # type: ignore[misc]
    assert "gcra" in repr(a) and "burst=20.0" in repr(a)


# -- invalid limits --------------------------------------------------------------------------

@pytest.mark.parametrize("algo", ["token_bucket", "TOKEN-BUCKET", "", "leaky", "sliding-window",
                                  "redis"])
def test_unknown_algorithm(algo: str) -> None:
    with pytest.raises(InvalidLimit) as e:
        Limit(algo, "10/s")
    msg = str(e.value)
    assert repr(algo) in msg
    for name in ALL:
        assert name in msg  # says what to choose instead


@pytest.mark.parametrize("algo", BUCKETS)
@pytest.mark.parametrize("burst", [0, 0.0, -1, -0.5, math.nan, math.inf, -math.inf, True, False,
                                   "5", [5]])
def test_invalid_bucket_burst(algo: str, burst: object) -> None:
    with pytest.raises(InvalidLimit) as e:
        Limit(algo, "10/s", burst=burst)  # type: ignore[arg-type]
    msg = str(e.value)
    assert "burst" in msg and repr(burst) in msg


@pytest.mark.parametrize("burst", [-1, 1.5, math.nan, math.inf, True, "1"])
def test_invalid_leaky_burst(burst: object) -> None:
    with pytest.raises(InvalidLimit, match="burst"):
        Limit("leaky-bucket", "10r/s", burst=burst)  # type: ignore[arg-type]


def test_leaky_burst_zero_is_nginx_default() -> None:
    assert Limit("leaky-bucket", "1r/s", burst=0).capacity == 1.0


@pytest.mark.parametrize("algo", [*BUCKETS, *WINDOWS])
def test_nodelay_and_delay_are_leaky_only(algo: str) -> None:
    with pytest.raises(InvalidLimit, match="leaky-bucket") as e:
        Limit(algo, "10/s", nodelay=True)
    assert repr(algo) in str(e.value)
    with pytest.raises(InvalidLimit, match="leaky-bucket"):
        Limit(algo, "10/s", delay=3)


@pytest.mark.parametrize("algo", WINDOWS)
@pytest.mark.parametrize("burst", [1, 10, 0])
def test_burst_on_a_window(algo: str, burst: int) -> None:
    with pytest.raises(InvalidLimit) as e:
        Limit(algo, "10/s", burst=burst)
    msg = str(e.value)
    assert "burst" in msg and repr(algo) in msg and "10" in msg  # names the real capacity


@pytest.mark.parametrize("delay", [-1, 1.5, True, "2", None])
def test_invalid_leaky_delay(delay: object) -> None:
    with pytest.raises(InvalidLimit) as e:
        Limit("leaky-bucket", "10r/s", burst=5, delay=delay)  # type: ignore[arg-type]
    assert repr(delay) in str(e.value)


def test_nodelay_and_delay_together() -> None:
    with pytest.raises(InvalidLimit, match="nodelay"):
        Limit("leaky-bucket", "10r/s", burst=5, nodelay=True, delay=2)


@pytest.mark.parametrize("rate", ["1/h", "1/d", "3/h", "1/1001s"])
def test_leaky_rate_below_nginx_resolution(rate: str) -> None:
    with pytest.raises(InvalidLimit, match="resolution") as e:
        Limit("leaky-bucket", rate)
    assert "window algorithm" in str(e.value)  # says what to do instead


def test_leaky_slow_rates_within_nginx_resolution() -> None:
    assert Limit("leaky-bucket", "1/1000s").per_second == 0.001
    assert Limit("leaky-bucket", "30r/m").per_second == 0.5
    assert Limit("leaky-bucket", "59/minute").per_second == pytest.approx(59 / 60)
    assert Limit("leaky-bucket", "60/minute").per_second == 1.0


@pytest.mark.parametrize(
    "name",
    ["a b", "a{b}", "{x}", "x}", "a\nb", "a\rb", "a\0b", " ", "x" * 201],
)
def test_bad_names(name: str) -> None:
    with pytest.raises(InvalidLimit) as e:
        Limit("gcra", "10/s", name=name)
    msg = str(e.value)
    assert repr(name[:60]) in msg
    assert "200" in msg and "spaces" in msg


@pytest.mark.parametrize("name", [42, None, b"api", ["api"]])
def test_name_must_be_a_string(name: object) -> None:
    with pytest.raises(InvalidLimit) as e:
        Limit("gcra", "10/s", name=name)  # type: ignore[arg-type]
    assert repr(name) in str(e.value)


@pytest.mark.parametrize("scope", ["", "user", "GLOBAL", None])
def test_bad_scope(scope: object) -> None:
    with pytest.raises(InvalidLimit) as e:
        Limit("gcra", "10/s", scope=scope)  # type: ignore[arg-type]
    assert repr(scope) in str(e.value)


@pytest.mark.parametrize("rate", ["0/s", "-1/s", "nan/s", "10/fortnight", "", 10, None])
def test_bad_rate(rate: object) -> None:
    with pytest.raises(InvalidLimit) as e:
        Limit("gcra", rate)  # type: ignore[arg-type]
    assert repr(rate) in str(e.value)


def test_errors_are_value_errors() -> None:
    with pytest.raises(ValueError):
        Limit("nope", "10/s")


def test_huge_int_burst() -> None:
    with pytest.raises(InvalidLimit):
        Limit("gcra", "10/s", burst=10**400)


# -- costs -----------------------------------------------------------------------------------

@pytest.mark.parametrize("cost", [0, 0.0, -1, -0.5, -math.inf, math.nan, math.inf, True, False,
                                  "1", None, [1], 1j])
@pytest.mark.parametrize("algo", ALL)
def test_invalid_costs(algo: str, cost: object) -> None:
    lim = Limit(algo, "10/s")
    with pytest.raises(InvalidCost) as e:
        lim.check_cost(cost)  # type: ignore[arg-type]
    assert repr(cost) in str(e.value)
    with pytest.raises(InvalidCost):
        check_cost(cost)


@pytest.mark.parametrize("algo", ALL)
def test_whole_costs_are_accepted_as_floats(algo: str) -> None:
    lim = Limit(algo, "10/s")
    for cost in (1, 2, 1.0, 7.0, 10**6):
        c = lim.check_cost(cost)
        assert type(c) is float and c == cost


@pytest.mark.parametrize("algo", ["token-bucket", "gcra", "fixed-window", "sliding-window-counter"])
def test_fractional_costs_where_they_make_sense(algo: str) -> None:
    assert Limit(algo, "10/s").check_cost(0.25) == 0.25
    assert Limit(algo, "10/s").check_cost(1e-9) == 1e-9


@pytest.mark.parametrize("algo", ["leaky-bucket", "sliding-window-log"])
@pytest.mark.parametrize("cost", [0.5, 1.5, 2.000001])
def test_fractional_costs_rejected_where_requests_are_counted(algo: str, cost: float) -> None:
    with pytest.raises(InvalidCost) as e:
        Limit(algo, "10/s").check_cost(cost)
    msg = str(e.value)
    assert repr(cost) in msg and algo in msg and "whole" in msg


def test_huge_int_cost() -> None:
    with pytest.raises(InvalidCost):
        check_cost(10**400)


# -- Decision --------------------------------------------------------------------------------

LIM = Limit("gcra", "1/s", burst=3, name="api")


def test_decision_bool_is_allowed() -> None:
    yes = Decision(True, 2, 0.0, 1.0, 0.0, LIM)
    no = Decision(False, 0, 1.0, 3.0, 0.0, LIM)
    assert bool(yes) is True and bool(no) is False
    assert yes and not no
    # A NamedTuple whose truth is not "non-empty".
    assert len(no) == 7


def test_decision_fields_and_defaults() -> None:
    d = Decision(True, 2, 0.0, 1.0, 0.0)
    assert d.limit is None and d.degraded is False
    assert d._fields == ("allowed", "remaining", "retry_after", "reset_after", "delay", "limit",
                         "degraded")
    with pytest.raises(AttributeError):
        d.allowed = False  # type: ignore[misc]
    assert d._replace(allowed=False).allowed is False


def test_decision_repr() -> None:
    assert repr(Decision(True, 2, 0.0, 1.0, 0.0, LIM)) == (
        "Decision(allowed, remaining=2, reset_after=1, limit='api')"
    )
    assert repr(Decision(False, 0, 0.5, 2.5, 0.0, LIM)) == (
        "Decision(rejected, remaining=0, retry_after=0.5, reset_after=2.5, limit='api')"
    )
    assert repr(Decision(False, 3, None, 0.0, 0.0, LIM)) == (
        "Decision(rejected, remaining=3, retry_after=None, reset_after=0, limit='api')"
    )
    assert repr(Decision(True, 4, 0.0, 2.0, 1.5, None)) == (
        "Decision(allowed, remaining=4, delay=1.5, reset_after=2)"
    )
    assert repr(Decision(False, 0, 1.0, 1.0, 0.0, LIM, True)).endswith("degraded)")


# -- every parameter error, word for word -------------------------------------------------
# The rules moved into the algorithm modules (each owns its parameter rules); these are the
# exact messages users and the service's config errors have always shown.

_LEAKY_ONLY = "nodelay/delay apply to 'leaky-bucket' only, not {!r}"
EXACT_ERRORS: list[tuple[str, str, dict[str, object], str]] = [
    ("nosuch", "1/s", {}, "unknown algorithm 'nosuch'; choose one of: token-bucket, gcra, "
     "leaky-bucket, fixed-window, sliding-window-log, sliding-window-counter"),
    ("gcra", "1/s", {"burst": -1}, "burst must be > 0, got -1"),
    ("token-bucket", "1/s", {"burst": 0}, "burst must be > 0, got 0"),
    ("token-bucket", "1/s", {"burst": "x"}, "burst must be a number, got 'x'"),
    ("gcra", "1/s", {"burst": math.inf}, "burst must be a finite number, got inf"),
    ("gcra", "1/s", {"burst": 10**400},
     "burst is too large to be a number: 1000000000000000000000000000000000000000..."),
    ("token-bucket", "1/s", {"nodelay": True}, _LEAKY_ONLY.format("token-bucket")),
    ("gcra", "1/s", {"delay": 2}, _LEAKY_ONLY.format("gcra")),
    ("leaky-bucket", "1r/s", {"burst": 1.5}, "leaky-bucket burst counts requests; got 1.5"),
    ("leaky-bucket", "1r/s", {"burst": -1}, "burst must be >= 0, got -1"),
    ("leaky-bucket", "1r/2000s", {}, "leaky-bucket rate 1/2000s is below nginx's resolution "
     "of 1 request per 1000 seconds; use a faster rate or a window algorithm"),
    ("leaky-bucket", "1r/s", {"delay": -1}, "delay must be a whole number >= 0, got -1"),
    ("leaky-bucket", "1r/s", {"delay": True}, "delay must be a whole number >= 0, got True"),
    ("leaky-bucket", "1r/s", {"delay": 1.0}, "delay must be a whole number >= 0, got 1.0"),
    ("leaky-bucket", "1r/s", {"delay": 1, "nodelay": True},
     "use either nodelay=True or delay=D, not both (as in nginx)"),
    ("fixed-window", "5/m", {"burst": 3},
     "'fixed-window' takes no burst: its capacity is the rate's amount (5 per 60s)"),
    ("sliding-window-log", "5/m", {"nodelay": True}, _LEAKY_ONLY.format("sliding-window-log")),
    ("sliding-window-counter", "5/m", {"delay": 1},
     _LEAKY_ONLY.format("sliding-window-counter")),
    ("gcra", "1/s", {"scope": "x"}, "scope must be 'key' or 'global', got 'x'"),
]


@pytest.mark.parametrize(("algo", "rate", "kwargs", "message"), EXACT_ERRORS)
def test_each_parameter_error_keeps_its_exact_message(
        algo: str, rate: str, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidLimit) as e:
        Limit(algo, rate, **kwargs)  # type: ignore[arg-type]
    assert str(e.value) == message


@pytest.mark.parametrize("algo", ["sliding-window-log", "leaky-bucket"])
def test_the_whole_cost_error_keeps_its_exact_message(algo: str) -> None:
    with pytest.raises(InvalidCost) as e:
        Limit(algo, "5r/s" if algo == "leaky-bucket" else "5/s").check_cost(1.5)
    assert str(e.value) == f"{algo} counts whole requests; cost must be a whole number, got 1.5"
