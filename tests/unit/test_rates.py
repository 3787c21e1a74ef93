"""Rate strings: every accepted spelling, and clear errors (quoting the input) for the rest."""

from __future__ import annotations

import math

import pytest

from ratekeeper import InvalidLimit, InvalidRate, Limit, Rate, parse_rate

VALID_FORMS = '"10/s", "100/minute", "5 per 2 seconds", "3/2s", "10r/s", "1000/day"'

ACCEPTED = [
    # text, amount, period (s)
    ("10/s", 10, 1.0),
    ("10/sec", 10, 1.0),
    ("10/secs", 10, 1.0),
    ("10/second", 10, 1.0),
    ("10/seconds", 10, 1.0),
    ("10 per second", 10, 1.0),
    ("10 per s", 10, 1.0),
    ("10/1s", 10, 1.0),
    ("10r/s", 10, 1.0),  # nginx
    ("10 r/s", 10, 1.0),
    ("30r/m", 30, 60.0),  # nginx per minute
    ("100/minute", 100, 60.0),
    ("100/minutes", 100, 60.0),
    ("100/min", 100, 60.0),
    ("100/mins", 100, 60.0),
    ("100/m", 100, 60.0),  # m is a minute, not a millisecond
    ("5 per 2 seconds", 5, 2.0),
    ("5 per 2 s", 5, 2.0),
    ("3/2s", 3, 2.0),
    ("3/2 s", 3, 2.0),
    ("1000/day", 1000, 86400.0),
    ("1000/days", 1000, 86400.0),
    ("1000/d", 1000, 86400.0),
    ("50/hour", 50, 3600.0),
    ("50/hours", 50, 3600.0),
    ("50/hr", 50, 3600.0),
    ("50/h", 50, 3600.0),
    ("7/12h", 7, 43200.0),
    ("1/100ms", 1, 0.1),
    # Envoy's WEEK, MONTH and YEAR, as envoyproxy/ratelimit counts them (src/utils/utilities.go,
    # UnitToDivider): 7, 30 and 365 days.
    ("1/week", 1, 604800.0),
    ("1/weeks", 1, 604800.0),
    ("1/wk", 1, 604800.0),
    ("1/w", 1, 604800.0),
    ("5/month", 5, 2592000.0),
    ("5/months", 5, 2592000.0),
    ("5/mo", 5, 2592000.0),
    ("100/year", 100, 31536000.0),
    ("100/years", 100, 31536000.0),
    ("100/yr", 100, 31536000.0),
    ("100/y", 100, 31536000.0),
    ("1/ms", 1, 0.001),
    ("1/millisecond", 1, 0.001),
    ("2/500milliseconds", 2, 0.5),
    ("2.5/s", 2.5, 1.0),
    ("10/2.5s", 10, 2.5),
    ("  10 / s  ", 10, 1.0),
    ("10/S", 10, 1.0),
    ("10R/SECOND", 10, 1.0),
    ("10 PER MINUTE", 10, 60.0),
]


@pytest.mark.parametrize(("text", "amount", "period"), ACCEPTED)
def test_accepted_forms(text: str, amount: float, period: float) -> None:
    r = parse_rate(text)
    assert r == Rate(amount, period)
    assert r.amount == amount and type(r.amount) is type(amount)
    assert math.isclose(r.period, period)
    assert math.isclose(r.per_second, amount / period)
    assert Rate.parse(text) == r


@pytest.mark.parametrize(("text", "amount", "period"), ACCEPTED)
def test_str_round_trips(text: str, amount: float, period: float) -> None:
    r = parse_rate(text)
    assert parse_rate(str(r)) == r


@pytest.mark.parametrize(
    ("rate", "text"),
    [(Rate(10, 1.0), "10/s"), (Rate(100, 60.0), "100/m"), (Rate(1, 3600.0), "1/h"),
     (Rate(1000, 86400.0), "1000/d"), (Rate(3, 2.0), "3/2s"), (Rate(2.5, 1.0), "2.5/s"),
     (Rate(5, 0.5), "5/0.5s")],
)
def test_str(rate: Rate, text: str) -> None:
    assert str(rate) == text


def test_a_rate_passes_through() -> None:
    r = Rate(3, 2.0)
    assert parse_rate(r) is r
    assert Limit("gcra", r).rate is r


def test_limit_parses_its_rate() -> None:
    lim = Limit("token-bucket", "5 per 2 seconds")
    assert lim.rate == Rate(5, 2.0)
    assert lim.per_second == 2.5
    assert lim.interval == 0.4


REJECTED = [
    "",
    " ",
    "garbage",
    "10",
    "/s",
    "10/",
    "10//s",
    "s/10",
    "0/s",
    "0.0/s",
    "10/0s",
    "-1/s",
    "10/-1s",
    "+1/s",
    "nan/s",
    "inf/s",
    "1e3/s",
    "10/fortnight",
    "10/decade",
    "10/sx",
    "10 persecond",
    "10persecond",
    "10 s",
    "ten/s",
    "10/s/s",
    "10/s extra",
    "1,000/s",
    "10/s;DROP",
    "10r/s burst=5",
]


@pytest.mark.parametrize("text", REJECTED)
def test_rejected_forms_quote_the_input(text: str) -> None:
    with pytest.raises(InvalidRate) as e:
        parse_rate(text)
    assert repr(text) in str(e.value)
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("text", REJECTED)
def test_limit_rejects_the_same_forms(text: str) -> None:
    with pytest.raises(InvalidLimit) as e:
        Limit("gcra", text)
    assert repr(text) in str(e.value)


@pytest.mark.parametrize("text", ["", "garbage", "10", "10/fortnight", "nan/s", "-1/s"])
def test_parse_errors_show_the_valid_forms(text: str) -> None:
    with pytest.raises(InvalidRate, match="valid forms") as e:
        parse_rate(text)
    assert VALID_FORMS in str(e.value)


def test_unknown_unit_names_the_unit() -> None:
    with pytest.raises(InvalidRate) as e:
        parse_rate("10/fortnight")
    msg = str(e.value)
    assert "'fortnight'" in msg and "unit" in msg


@pytest.mark.parametrize("text", ["0/s", "10/0s", "1" * 100 + "/s"])
def test_value_errors_also_show_the_valid_forms(text: str) -> None:
    with pytest.raises(InvalidRate) as e:
        parse_rate(text)
    assert VALID_FORMS in str(e.value)


@pytest.mark.parametrize("n", [65, 1000, 1_000_000])
def test_huge_strings_are_rejected_quickly_with_a_prefix(n: int) -> None:
    text = "1" * (n - 2) + "/s"
    with pytest.raises(InvalidRate) as e:
        parse_rate(text)
    msg = str(e.value)
    assert "too long" in msg and str(n) in msg
    assert repr(text[:64]) in msg
    assert len(msg) < 300  # quotes a prefix, not a megabyte


def test_longest_accepted_string() -> None:
    text = "1" * 62 + "/s"  # 64 characters: the limit
    assert parse_rate(text).amount == float("1" * 62)


@pytest.mark.parametrize("value", [10, 10.0, None, b"10/s", ["10/s"], {"rate": "10/s"}, True])
def test_non_strings_are_rejected(value: object) -> None:
    with pytest.raises(InvalidRate) as e:
        parse_rate(value)  # type: ignore[arg-type]
    msg = str(e.value)
    assert repr(value) in msg and VALID_FORMS in msg


@pytest.mark.parametrize(
    ("amount", "period", "bad"),
    [(0, 1.0, 0), (-1, 1.0, -1), (1, 0.0, 0.0), (1, -1.0, -1.0), (math.nan, 1.0, math.nan),
     (1, math.nan, math.nan), (math.inf, 1.0, math.inf), (1, math.inf, math.inf),
     (True, 1.0, True), ("10", 1.0, "10"), (None, 1.0, None)],
)
def test_rate_values_are_validated(amount: object, period: object, bad: object) -> None:
    with pytest.raises(InvalidRate) as e:
        Rate(amount, period)  # type: ignore[arg-type]
    assert f"got {bad!r}" in str(e.value)


def test_rate_is_frozen() -> None:
    r = Rate(1, 1.0)
    with pytest.raises(AttributeError):
        r.amount = 2  # type: ignore[misc]
