"""Rates: "how many per how long", parsed from the strings people write.

Accepted forms (case-insensitive, spaces optional)::

    10/s   10/sec   10/second   10 per second   10r/s (nginx)   10/1s
    100/minute   100/m   100/min   5 per 2 seconds   3/2s   1000/day   1000/d   50/hour   50/h
    1/week   1/w   5/month   5/mo   100/year   100/y

A week is 7 days, a month 30 days and a year 365 days, as envoyproxy/ratelimit counts Envoy's
WEEK, MONTH and YEAR units (fixed lengths, not calendar months).

A rate is an amount per period; `Rate.per_second` is the amount divided by the period.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ._errors import InvalidRate

__all__ = ["Rate", "parse_rate"]

_UNITS: dict[str, float] = {
    "ms": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    # Envoy's WEEK, MONTH and YEAR, with envoyproxy/ratelimit's lengths: 7, 30 and 365 days
    # (calendar months and years would make the limit's period vary).
    "w": 7 * 86400.0,
    "wk": 7 * 86400.0,
    "week": 7 * 86400.0,
    "weeks": 7 * 86400.0,
    "mo": 30 * 86400.0,
    "month": 30 * 86400.0,
    "months": 30 * 86400.0,
    "y": 365 * 86400.0,
    "yr": 365 * 86400.0,
    "year": 365 * 86400.0,
    "years": 365 * 86400.0,
}

_RATE_RE = re.compile(
    r"""^\s*
    (?P<amount>[0-9]+(?:\.[0-9]+)?)\s*r?\s* # 10, 10r (nginx), 2.5 (ASCII digits only)
    (?:/|\bper\b)\s*                        # "/" or "per"
    (?P<count>[0-9]+(?:\.[0-9]+)?)?\s*      # optional multiplier: 3/2s, 5 per 2 seconds
    (?P<unit>[a-z]+)\s*$""",
    re.VERBOSE | re.IGNORECASE,
)

_VALID_FORMS = '"10/s", "100/minute", "5 per 2 seconds", "3/2s", "10r/s", "1000/day"'


@dataclass(frozen=True, slots=True)
class Rate:
    """`amount` units per `period` seconds, e.g. ``Rate(100, 60.0)`` is 100 per minute."""

    amount: float
    period: float

    def __post_init__(self) -> None:
        for name, v in (("amount", self.amount), ("period", self.period)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise InvalidRate(f"rate {name} must be a number, got {v!r}")
            if not math.isfinite(v) or v <= 0:
                raise InvalidRate(
                    f"rate {name} must be a finite number above 0, got {v!r}; "
                    f"write a rate like {_VALID_FORMS}"
                )

    @property
    def per_second(self) -> float:
        """Units per second (`amount / period`)."""
        return self.amount / self.period

    @classmethod
    def parse(cls, text: str | Rate) -> Rate:
        """Parse a rate string such as ``"10/s"`` or ``"5 per 2 seconds"``."""
        return parse_rate(text)

    def __str__(self) -> str:
        amount = _fmt(self.amount)
        for unit, seconds in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
            if self.period == seconds:
                return f"{amount}/{unit}"
        return f"{amount}/{_fmt(self.period)}s"


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def parse_rate(text: str | Rate) -> Rate:
    """Parse `text` into a `Rate`; raise `InvalidRate` quoting the input otherwise."""
    if isinstance(text, Rate):
        return text
    if not isinstance(text, str):
        raise InvalidRate(f"a rate must be a string like {_VALID_FORMS}, got {text!r}")
    if len(text) > 64:
        raise InvalidRate(
            f"rate string is too long ({len(text)} characters): {text[:64]!r}...; "
            f"valid forms: {_VALID_FORMS}"
        )
    m = _RATE_RE.match(text)
    if m is None:
        if ";" in text or "," in text:
            parts = [p.strip() for p in re.split("[;,]", text) if p.strip()]
            raise InvalidRate(f"cannot parse rate {text!r}: one rate per limit; several "
                              f"limits are a list, e.g. {parts!r}")
        raise InvalidRate(f"cannot parse rate {text!r}; valid forms: {_VALID_FORMS}")
    unit = m.group("unit").lower()
    if unit not in _UNITS:
        raise InvalidRate(
            f"unknown time unit {m.group('unit')!r} in rate {text!r}; use s, m, h, d, w, mo, y "
            f"(or second, minute, hour, day, week, month, year); valid forms: {_VALID_FORMS}"
        )
    amount = float(m.group("amount"))
    count = float(m.group("count")) if m.group("count") else 1.0
    if amount <= 0 or count <= 0:
        raise InvalidRate(
            f"rate {text!r} must have an amount and a period above 0; valid forms: {_VALID_FORMS}"
        )
    return Rate(int(amount) if amount.is_integer() else amount, count * _UNITS[unit])
