"""`reorder` keeps in-order events in a queue and only the out-of-order ones in a heap; it
must hand out exactly what one heap of every event would (the former mechanism, kept here
as the oracle), with the same counts, on random nearly-sorted logs: ties, late lines clamped
or dropped, and a `max_pending` small enough to force early hand-outs."""

from __future__ import annotations

import heapq
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.replay import LogEvent, ReadStats, reorder


def one_heap(times: list[float], window: float, late: str, max_pending: int
             ) -> tuple[list[tuple[float, int]], tuple[object, ...]]:
    heap: list[tuple[float, int]] = []
    out: list[tuple[float, int]] = []
    hi = last = -math.inf
    reordered = n_late = dropped = 0
    for line, arrived in enumerate(times, 1):
        t = arrived
        if t < last:
            n_late += 1
            if late == "drop":
                dropped += 1
                continue
            t = last
        elif t < hi:
            reordered += 1
        else:
            hi = t
        heapq.heappush(heap, (t, line))
        while heap and (heap[0][0] <= hi - window or len(heap) > max_pending):
            last = heap[0][0]
            out.append(heapq.heappop(heap))
    while heap:
        out.append(heapq.heappop(heap))
    return out, (reordered, n_late, dropped, len(out))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=60), st.sampled_from([0.0, 1.0, 2.5]),
       st.sampled_from(["clamp", "drop"]), st.integers(1, 8))
def test_reorder_hands_out_what_one_heap_of_every_event_would(
        steps: list[int], window: float, late: str, max_pending: int) -> None:
    # times that mostly rise, by whole and half seconds (ties), sometimes falling back
    times, t = [], 100.0
    for s in steps:
        t += (s - 12) / 4 if s < 12 else (s % 3) / 2
        times.append(t)
    stats = ReadStats()
    events = (LogEvent(t, "", "GET", "/", None, None, None, None, None, {}, {}, i)
              for i, t in enumerate(times, 1))
    got = [(e.t, e.line) for e in reorder(events, stats, window=window, late=late,
                                          max_pending=max_pending)]
    want, counts = one_heap(times, window, late, max_pending)
    assert got == want
    assert (stats.reordered, stats.late, stats.dropped, stats.events) == counts
