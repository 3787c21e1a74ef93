"""Put events back in time order, in bounded memory.

nginx writes a line when a request *ends*, and several workers write to one file, so a log
is only nearly sorted: a line can be older than the one before it by up to a request's
duration. `reorder` holds events back until the newest time seen is `window` seconds
past them, then hands them out oldest first (equal times keep their line order).

An event older than one already handed out cannot be put in place: it is *late*. With
``late="clamp"`` (the default) it is handed out at the time of the last event handed out, so
every request of the log still counts (its true time stays in ``fields``); ``late="drop"``
leaves it out. Either way it is counted in `ReadStats.late`.

Memory: `reorder` holds the events of one window (and never more than `max_pending`; past
that the oldest is handed out early, so a log with a huge backwards jump stays bounded).

A stream cannot be read twice to measure its disorder first, so with ``grow=True`` the
window grows to the most any line so far was older than the newest before it: a late line
is still late (clamped or dropped, and counted), but the lines after it that are as far out
of order are put in place. The bound stays `max_pending` events, however far it grows.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Iterator

from .._errors import ConfigError
from ._events import LogEvent, ReadStats

__all__ = ["LATE_POLICIES", "reorder"]

LATE_POLICIES = ("clamp", "drop")


def check_order_options(window: float, late: str, max_pending: int) -> None:
    if (isinstance(window, bool) or not isinstance(window, (int, float))
            or not math.isfinite(window) or window < 0):
        raise ConfigError(f"window must be a finite number of seconds >= 0, got {window!r} "
                          "(e.g. 2.0: lines may be up to 2 s out of order)")
    if late not in LATE_POLICIES:
        raise ConfigError(f"late must be 'clamp' or 'drop', got {late!r}")
    if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
        raise ConfigError(f"max_pending must be a positive integer, got {max_pending!r}")


def reorder(events: Iterable[LogEvent], stats: ReadStats, *, window: float = 2.0,
            late: str = "clamp", max_pending: int = 1_000_000,
            grow: bool = False) -> Iterator[LogEvent]:
    """`events` (nearly sorted) -> the same events in time order; counts go to `stats`
    (`reordered`, `late`, `dropped`, `events`, `first_t`, `last_t`; with `grow`, the window
    it grew to in `grown_window`)."""
    check_order_options(window, late, max_pending)
    drop = late == "drop"
    # Two sorted stores, merged on the way out by (time, line order): `pending`, the events
    # that came in time order (nearly all of a log: an append and a popleft each), and
    # `heap`, the few that came after a later one.
    pending: deque[tuple[float, int, LogEvent]] = deque()
    heap: list[tuple[float, int, LogEvent]] = []
    push, pop, append, popleft = heapq.heappush, heapq.heappop, pending.append, pending.popleft
    seq = 0
    hi = last = tail = -math.inf  # tail: the time of pending's newest event
    n = 0
    try:
        for ev in events:
            t = ev.t
            if grow and hi - t > window:  # the disorder seen so far: the window from now on
                window = stats.grown_window = hi - t
            if t < last:
                stats.late += 1
                if drop:
                    stats.dropped += 1
                    continue
                ev = ev._replace(t=last)  # noqa: PLW2901 (the clamped copy goes on)
                t = last
            elif t < hi:
                stats.reordered += 1
            else:
                hi = t
            if t >= tail:
                append((t, seq, ev))
                tail = t
            else:
                push(heap, (t, seq, ev))
            seq += 1
            edge = hi - window
            while True:
                if heap and (not pending or heap[0] < pending[0]):
                    if heap[0][0] > edge and len(heap) + len(pending) <= max_pending:
                        break
                    last, _, out = pop(heap)
                elif pending:
                    if pending[0][0] > edge and len(pending) + len(heap) <= max_pending:
                        break
                    last, _, out = popleft()
                else:
                    break
                if n == 0:
                    stats.first_t = last
                n += 1
                yield out
        while heap or pending:
            if heap and (not pending or heap[0] < pending[0]):
                last, _, out = pop(heap)
            else:
                last, _, out = popleft()
            if n == 0:
                stats.first_t = last
            n += 1
            yield out
    finally:
        stats.events += n
        if n:
            stats.last_t = last
