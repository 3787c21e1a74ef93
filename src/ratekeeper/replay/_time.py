"""Log timestamps to Unix seconds, fast: a line's time string repeats for every request of
that second, so each parser keeps a small cache keyed by the string (cleared when full, so
memory stays bounded on any log)."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

__all__ = ["StrftimeTime", "TimeCache", "epoch_seconds"]

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


#: What each strftime directive of an Apache ``%{format}t`` time matches (``%f``: the
#: fraction ``.%{usec_frac}t`` or ``.%{msec_frac}t`` writes after it).
_STRFTIME = {"Y": r"\d{4}", "y": r"\d{2}", "m": r"\d{2}", "d": r"\d{2}", "e": r" ?\d{1,2}",
             "H": r"\d{2}", "M": r"\d{2}", "S": r"\d{2}", "b": r"[A-Za-z]{3}",
             "h": r"[A-Za-z]{3}", "z": r"[+-]\d{4}", "f": r"\d{1,9}"}
_STRFTIME_DIRECTIVE = re.compile(r"%(.?)")


class StrftimeTime:
    """A time written by a strftime `format` (Apache's ``%{%Y-%m-%d %H:%M:%S}t``; ``%f``
    for the fraction its ``%{usec_frac}t`` adds) -> Unix seconds, exactly (no `strptime`:
    a regex and the calendar). Directives: ``%Y %y %m %b %h %d %e %H %M %S %z %f %%``; a
    time with no ``%z`` is taken as UTC, as `TimeCache` does. An unknown directive, or a
    format without a year, month, day, hour, minute and second, raises `ValueError`
    naming it."""

    __slots__ = ("_match", "format", "pattern")

    def __init__(self, format: str) -> None:
        parts, pos, seen = [], 0, set()
        for m in _STRFTIME_DIRECTIVE.finditer(format):
            parts.append(re.escape(format[pos:m.start()]))
            d = m[1]
            if d == "%":
                parts.append("%")
            elif d not in _STRFTIME:
                raise ValueError(f"strftime directive {m[0]!r} in {format!r} is not one replay "
                                 "reads: use %Y %y %m %b %d %e %H %M %S %z (and "
                                 "%{usec_frac}t or %{msec_frac}t for the fraction)")
            else:
                key = {"y": "Y", "e": "d", "h": "b"}.get(d, d)
                if key in seen:
                    raise ValueError(f"{format!r} writes %{d} twice")
                seen.add(key)
                parts.append(f"(?P<{key}>{_STRFTIME[d]})")
            pos = m.end()
        parts.append(re.escape(format[pos:]))
        missing = [f"%{k}" for k in ("Y", "m", "d", "H", "M", "S")
                   if k not in seen and not (k == "m" and "b" in seen)]
        if missing:
            raise ValueError(f"the time format {format!r} has no {' '.join(missing)}: "
                             "replay needs the date and the time of day to the second")
        self.format = format
        rx = "".join(parts)
        self._match = re.compile(rx).fullmatch
        #: What the time matches, without groups (to be part of a line's regex).
        self.pattern = re.sub(r"\(\?P<\w+>", "(?:", rx)

    def __repr__(self) -> str:
        return f"StrftimeTime({self.format!r})"

    def __call__(self, s: str) -> float:
        m = self._match(s)
        if m is None:
            raise ValueError(f"not a time in the format {self.format!r}: {s!r}")
        g = m.groupdict()
        y = int(g["Y"])
        if len(g["Y"]) == 2:
            y += 2000 if y < 69 else 1900  # strftime's %y: 69-99 are the 1900s
        mon = _MONTHS.get(g["b"].title()) if g.get("b") else int(g["m"])
        if mon is None:
            raise ValueError(f"unknown month {g['b']!r} in {s!r}")
        z = g.get("z")
        try:
            t = _seconds(y, mon, int(g["d"]), int(g["H"]), int(g["M"]), int(g["S"]),
                         None if z is None else z[0], None if z is None else z[1:3],
                         None if z is None else z[3:5])
        except ValueError as e:
            raise ValueError(f"{e} in {s!r}") from None
        f = g.get("f")
        return t if f is None else t + int(f) / 10 ** len(f)


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
