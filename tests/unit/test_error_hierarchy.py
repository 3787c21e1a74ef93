"""A bad rate is an `InvalidRate` wherever it is given, and still an `InvalidLimit` in a `Limit`.

The README promises ``except InvalidRate`` catches a bad rate string; code written against
``except InvalidLimit`` (everything wrong with a Limit) must keep catching it too.
"""

from __future__ import annotations

import pytest

from ratekeeper import InvalidLimit, InvalidRate, Limit, Rate, RateKeeperError, parse_rate


@pytest.mark.parametrize("rate", ["10 per sec ond", "10/fortnight", "0/s", "", 10])
def test_a_bad_rate_in_a_limit_is_an_invalid_rate_and_an_invalid_limit(rate: object) -> None:
    with pytest.raises(InvalidRate) as e:
        Limit("gcra", rate)  # type: ignore[arg-type]
    assert isinstance(e.value, InvalidLimit) and isinstance(e.value, ValueError)
    assert repr(rate) in str(e.value)  # still quotes the input


def test_bad_rates_outside_a_limit_are_invalid_rates() -> None:
    with pytest.raises(InvalidRate):
        parse_rate("10 per sec ond")
    with pytest.raises(InvalidRate):
        Rate(0, 1.0)


def test_other_limit_errors_are_not_rate_errors() -> None:
    with pytest.raises(InvalidLimit) as e:
        Limit("gcra", "10/s", burst=-1)
    assert not isinstance(e.value, InvalidRate)
    assert issubclass(InvalidRate, RateKeeperError)
