"""What the log readers hand out: one `LogEvent` per request line, and a `ReadStats` tally.

No I/O here. `LogEvent` is a `NamedTuple` rather than a frozen dataclass on purpose: it is
built once per log line, and a frozen dataclass's ``__init__`` (``object.__setattr__`` per
field) costs about three times as much; a named tuple is just as immutable and slotted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["LogEvent", "Malformed", "ReadStats"]


class LogEvent(NamedTuple):
    """One request as a log recorded it.

    `t` is Unix seconds on the log's own clock (the time the line gives: nginx's
    ``$time_local``/``$msec`` is when the request *ended*). Text fields a log had as ``-``
    are `None`; `method` and `path` are ``""`` when the format has no request.
    """

    #: Unix seconds (UTC), float.
    t: float
    #: The peer address as logged (``$remote_addr``; an IPv6 address is written bare, no []).
    client: str
    #: ``GET``, ``POST``, ...; ``""`` when the format has none.
    method: str
    #: The request path without its query string (``/a/b`` for ``/a/b?x=1``).
    path: str
    #: The response status, `None` when the log has none (or ``-``).
    status: int | None
    #: Response body bytes (``$body_bytes_sent``, else ``$bytes_sent``; Apache's ``-`` is 0).
    bytes: int | None
    user_agent: str | None
    referer: str | None
    #: ``$host``/``$http_host``/``$server_name``, or the host of an absolute-form target.
    host: str | None
    #: Request headers the log recorded (``$http_x_forwarded_for`` -> ``x-forwarded-for``),
    #: names lowercased with ``-``; a header logged as ``-`` (absent) is left out.
    headers: Mapping[str, str]
    #: Every named field of the line, as text (nginx variables without ``$``; JSON keys,
    #: nested ones joined with ``.``). Escapes (``\\x22``, ``\\"``) are already decoded.
    fields: Mapping[str, str]
    #: The line number in the input (1-based), for messages.
    line: int


@dataclass(frozen=True, slots=True)
class Malformed:
    """An example of a line that could not be read: where, why, and what it looked like."""

    line: int
    reason: str
    why: str
    excerpt: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.why}: {self.excerpt!r}"


@dataclass(slots=True)
class ReadStats:
    """The running tally of one read. Filled while iterating; final once the reader is
    exhausted.

    - `lines`: lines read (every line, blank and malformed ones included);
    - `events`: events handed out (after reordering, late lines dropped or clamped);
    - `skipped`: well-formed lines that are not requests, by reason (``blank``, ``comment``,
      ``no-request`` for nginx's ``"-"`` request line of a connection closed early);
    - `malformed`: lines that could not be read, by reason (``format``, ``time``,
      ``request``, ``status``, ``bytes``, ``json``, ``field``, ``truncated``, ``too-long``,
      ``gzip``, ``decode``); `examples` keeps the first few of them;
    - `reordered`: events that came after a later one and were put back in time order
      within the window; `late`: events older than the window allows (older than an event
      already handed out), `dropped` of them when ``late="drop"``, else clamped to that
      event's time;
    - `first_t`, `last_t`: the time span of the events handed out;
    - `grown_window`: for a stream read with a growing window, the seconds it grew to
      (None: it kept the window it was given).
    """

    max_examples: int = 5
    lines: int = 0
    events: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    malformed: dict[str, int] = field(default_factory=dict)
    examples: list[Malformed] = field(default_factory=list)
    reordered: int = 0
    late: int = 0
    dropped: int = 0
    first_t: float | None = None
    last_t: float | None = None
    grown_window: float | None = None

    @property
    def malformed_total(self) -> int:
        return sum(self.malformed.values())

    def bad(self, line: int, reason: str, why: str, text: str) -> None:
        """Count one malformed line (and keep it as an example while there is room)."""
        self.malformed[reason] = self.malformed.get(reason, 0) + 1
        if len(self.examples) < self.max_examples:
            excerpt = text if len(text) <= 120 else text[:117] + "..."
            self.examples.append(Malformed(line, reason, why, excerpt))

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + count

    def summary(self) -> str:
        """One paragraph for a person: ``12000 lines, 11990 events, 3 malformed (...)``."""
        parts = [f"{self.lines} lines", f"{self.events} events"]
        if self.skipped:
            parts.append("skipped " + ", ".join(f"{k} {v}" for k, v in
                                                 sorted(self.skipped.items())))
        if self.malformed:
            parts.append(f"{self.malformed_total} malformed (" + ", ".join(
                f"{k} {v}" for k, v in sorted(self.malformed.items())) + ")")
        if self.reordered:
            parts.append(f"{self.reordered} reordered")
        if self.late:
            parts.append(f"{self.late} late ({self.dropped} dropped)" if self.dropped
                         else f"{self.late} late (clamped)")
        text = ", ".join(parts)
        for ex in self.examples:
            text += f"\n  {ex}"
        return text
