"""Time order within a window: a table of arrival times -> what comes out, and the counts."""

from __future__ import annotations

import io

import pytest

from ratekeeper.replay import LogEvent, ReadStats, read_log, reorder


def ev(t: float, line: int) -> LogEvent:
    return LogEvent(t, "::1", "GET", "/", 200, 0, None, None, None, {}, {}, line)


def run(times: list[float], **kw: object) -> tuple[list[tuple[float, int]], ReadStats]:
    stats = ReadStats()
    out = [(e.t, e.line) for e in reorder(
        (ev(t, i) for i, t in enumerate(times, 1)), stats, **kw)]  # type: ignore[arg-type]
    return out, stats


def test_lines_out_of_order_within_the_window_come_out_in_time_order() -> None:
    out, stats = run([10.0, 11.0, 9.5, 11.0, 12.0, 10.5, 13.0], window=2.0)
    assert out == [(9.5, 3), (10.0, 1), (10.5, 6), (11.0, 2), (11.0, 4), (12.0, 5),
                   (13.0, 7)]
    assert (stats.reordered, stats.late, stats.dropped, stats.events) == (2, 0, 0, 7)
    assert (stats.first_t, stats.last_t) == (9.5, 13.0)


def test_a_line_older_than_the_window_is_late_and_clamped_by_default() -> None:
    # 10 is handed out once 12.5 arrives (12.5 - 2 >= 10); then 9 can no longer go before it.
    out, stats = run([10.0, 12.5, 9.0, 12.6], window=2.0)
    assert out == [(10.0, 1), (10.0, 3), (12.5, 2), (12.6, 4)]
    assert (stats.late, stats.dropped, stats.reordered, stats.events) == (1, 0, 0, 4)


def test_late_lines_can_be_dropped_instead() -> None:
    out, stats = run([10.0, 12.5, 9.0, 12.6], window=2.0, late="drop")
    assert out == [(10.0, 1), (12.5, 2), (12.6, 4)]
    assert (stats.late, stats.dropped, stats.events) == (1, 1, 3)


def test_a_line_just_inside_the_window_is_still_put_in_place() -> None:
    out, stats = run([10.0, 11.9, 10.0, 10.05], window=2.0)
    assert out == [(10.0, 1), (10.0, 3), (10.05, 4), (11.9, 2)]
    assert (stats.reordered, stats.late) == (2, 0)


def test_window_zero_hands_out_at_once_and_every_backward_line_is_late() -> None:
    out, stats = run([1.0, 1.0, 0.5, 2.0], window=0)
    assert out == [(1.0, 1), (1.0, 2), (1.0, 3), (2.0, 4)]
    assert (stats.late, stats.reordered) == (1, 0)


def test_the_heap_never_holds_more_than_max_pending_events() -> None:
    # All within the window, yet at most 2 are held: the oldest goes out early, and a line
    # older than it becomes late.
    out, stats = run([5.0, 6.0, 7.0, 4.0], window=100, max_pending=2)
    assert out == [(5.0, 1), (5.0, 4), (6.0, 2), (7.0, 3)]
    assert stats.late == 1


def test_reader_reorders_nginx_lines_logged_at_request_end() -> None:
    # A slow request that started first is logged after two fast ones, 1 s older.
    fmt = '$remote_addr [$time_local] "$request" $status $request_time'
    raw = ('::1 [01/Jan/2024:00:00:01 +0000] "GET /fast HTTP/1.1" 200 0.001\n'
           '::1 [01/Jan/2024:00:00:02 +0000] "GET /fast HTTP/1.1" 200 0.001\n'
           '::2 [01/Jan/2024:00:00:01 +0000] "GET /slow HTTP/1.1" 200 1.500\n'
           '::1 [01/Jan/2024:00:00:05 +0000] "GET /late HTTP/1.1" 200 0.001\n'
           '::3 [01/Jan/2024:00:00:00 +0000] "GET /very-late HTTP/1.1" 200 9.000\n')
    with read_log(io.StringIO(raw), fmt, window=2.0) as r:
        got = [(e.path, e.t - 1704067200) for e in r]
    # /late (5 s) pushes 1, 1 and 2 out; /very-late (0 s) is older than 2 s: clamped to 2.
    assert got == [("/fast", 1), ("/slow", 1), ("/fast", 2), ("/very-late", 2), ("/late", 5)]
    assert (r.stats.reordered, r.stats.late) == (1, 1)
    assert r.stats.events == 5 and r.stats.lines == 5


@pytest.mark.parametrize("late", ["clamp", "drop"])
def test_counts_add_up(late: str) -> None:
    times = [float(x % 7) + x / 10 for x in range(200)]
    out, stats = run(times, window=1.5, late=late)
    assert [t for t, _ in out] == sorted(t for t, _ in out)
    assert stats.events == len(out) == len(times) - stats.dropped
