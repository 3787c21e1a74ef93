"""Log timestamps to Unix seconds, fast: a line's time string repeats for every request of
that second, so each parser keeps a small cache keyed by the string (cleared when full, so
memory stays bounded on any log)."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

__all__ = ["TimeCache", "epoch_seconds"]

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
#: ``10/Oct/2000:13:55:36 -0700`` (nginx ``$time_local``, Apache ``%t``).
_CLF = re.compile(r"(\d{1,2})/([A-Za-z]{3})/(\d{4}):(\d{2}):(\d{2}):(\d{2})"
                  r"(?: ?([+-])(\d{2}):?(\d{2})| ?(Z|UTC|GMT))?")
#: ``2000-10-10T13:55:36-07:00``, with optional fraction, ``Z``, ``+0700`` or no zone.
_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(\.\d+)?"
                  r"(?:([+-])(\d{2}):?(\d{2})|(Z|z))?")
_CACHE_SIZE = 1024  # seconds of a nearly sorted log: the recent ones are enough
_UTC = timezone.utc


def _seconds(  # noqa: PLR0917 (the fields of one timestamp, in order)
        y: int, mo: int, d: int, h: int, mi: int, s: int, sign: str | None,
             oh: str | None, om: str | None) -> float:
    # datetime validates the ranges (no 31 Feb, no 25:00); a leap second 60 is folded to 59.
    off = 0 if sign is None else (int(oh or 0) * 3600 + int(om or 0) * 60) * (
        -1 if sign == "-" else 1)
    tz = _UTC if off == 0 else timezone(timedelta(seconds=off))
    return datetime(y, mo, d, h, mi, min(s, 59), tzinfo=tz).timestamp() + (s == 60)


class TimeCache:
    """Parse ``$time_local``-style and ISO-8601 times, caching the whole-second part.

    A time without a zone is taken as UTC (replay needs only the log's own clock, so
    differences are what matter). Raises `ValueError` with the reason for a bad time.
    """

    __slots__ = ("_clf", "_iso")

    def __init__(self) -> None:
        self._clf: dict[str, float] = {}
        self._iso: dict[str, float] = {}

    def clf(self, s: str) -> float:
        """``10/Oct/2000:13:55:36 -0700`` -> Unix seconds."""
        t = self._clf.get(s)
        if t is None:
            m = _CLF.fullmatch(s)
            if m is None:
                raise ValueError(f"not a time like 10/Oct/2000:13:55:36 -0700: {s!r}")
            mon = _MONTHS.get(m[2].title())
            if mon is None:
                raise ValueError(f"unknown month {m[2]!r} in {s!r}")
            try:
                t = _seconds(int(m[3]), mon, int(m[1]), int(m[4]), int(m[5]), int(m[6]),
                             m[7] or ("+" if m[10] else None), m[8], m[9])
            except ValueError as e:
                raise ValueError(f"{e} in {s!r}") from None
            if len(self._clf) >= _CACHE_SIZE:
                self._clf.clear()
            self._clf[s] = t
        return t

    def iso(self, s: str) -> float:
        """``2000-10-10T13:55:36.250-07:00`` (or ``Z``, ``+0700``, no zone) -> Unix seconds."""
        m = _ISO.fullmatch(s)
        if m is None:
            raise ValueError(f"not an ISO-8601 time like 2000-10-10T13:55:36+00:00: {s!r}")
        frac = m[7]
        key = s if frac is None else s[:m.start(7)] + s[m.end(7):]
        t = self._iso.get(key)
        if t is None:
            try:
                t = _seconds(int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]),
                             int(m[6]), m[8] or ("+" if m[11] else None), m[9], m[10])
            except ValueError as e:
                raise ValueError(f"{e} in {s!r}") from None
            if len(self._iso) >= _CACHE_SIZE:
                self._iso.clear()
            self._iso[key] = t
        return t if frac is None else t + float(frac)

    def any(self, s: str) -> float:
        """A time in any of the forms the readers know: epoch seconds as text, ISO-8601, or
        ``$time_local``."""
        if s[:1].isdigit() and len(s) >= 5 and s[4] == "-":
            return self.iso(s)
        if s[:1].isdigit() and s[2:3] != "/" and s[1:2] != "/":
            return epoch_seconds(float(s))
        return self.clf(s)


def epoch_seconds(v: float, unit: str = "auto") -> float:
    """A number of epoch seconds, milliseconds or microseconds -> seconds.

    ``auto`` reads a value of 1e11 or more as milliseconds (1e11 s is the year 5138, 1e11 ms
    is 1973) and 1e14 or more as microseconds.
    """
    if not math.isfinite(v):
        raise ValueError(f"time must be a finite number, got {v!r}")
    if unit == "s":
        return v
    if unit == "ms":
        return v / 1e3
    if unit == "us":
        return v / 1e6
    a = abs(v)
    return v / 1e6 if a >= 1e14 else v / 1e3 if a >= 1e11 else v
