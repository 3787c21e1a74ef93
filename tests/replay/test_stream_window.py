"""A stream (standard input) cannot be read twice to measure how far its lines are out of
order, so its order window grows: to the most a line so far was older than the newest one
before it, within the reader's bound of pending lines. The first line of a new disorder is
still late (clamped, reported, exit 3); the lines after it that are as far out of order are
put in their place."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ratekeeper.replay import read_log
from ratekeeper.replay._events import LogEvent, ReadStats
from ratekeeper.replay._order import reorder

CLI = [sys.executable, "-m", "ratekeeper"]
T0 = datetime(2024, 3, 1, tzinfo=timezone.utc)
PER_CLIENT = '''
[http]
domain = "web"
descriptors = [["client_ip"]]

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-client", algorithm = "token-bucket", rate = "2/s", burst = 5 }]
'''


def slow_requests_log(n: int = 2000, every: int = 300, late: float = 25.0) -> str:
    """Requests 0.1 s apart, every `every`-th one a slow request written `late` seconds
    after it began (the line carries its start, as nginx's $time_local does not, but
    Apache's %t does): one line in `every` is `late` s out of order, each once the grown
    window has caught up with the one before it."""
    lines = []
    for i in range(n):
        start = T0 + timedelta(seconds=i / 10)
        # a slow one is written just after the lines of the second it ended in
        written = start + timedelta(seconds=late + 0.05 if i % every == every // 2 else 0)
        lines.append((written, f'192.0.2.{i % 7} - - [{start:%d/%b/%Y:%H:%M:%S} +0000] '
                               f'"GET /p HTTP/1.1" 200 5 "-" "ua"'))
    lines.sort(key=lambda w: w[0])
    return "".join(text + "\n" for _, text in lines)


def _event(t: float, line: int) -> LogEvent:
    return LogEvent(t, "192.0.2.1", "GET", "/", 200, 1, None, None, None, {}, {}, line)


def test_a_growing_window_clamps_only_the_first_line_of_a_disorder() -> None:
    # two lines 16 s late, the second one once the grown window has caught up
    times = [*range(20), 3.0, *range(20, 40), 23.0, *range(40, 45)]
    evs = [_event(float(t), i) for i, t in enumerate(times, 1)]
    fixed, grown = ReadStats(), ReadStats()
    list(reorder(evs, fixed, window=2.0))
    out = list(reorder(evs, grown, window=2.0, grow=True))
    assert (fixed.late, grown.late, grown.grown_window) == (2, 1, 16.0)
    # the second 16-s disorder is put in place; the first was clamped to the time before it
    want = sorted(times[:20] + times[21:])
    assert [e.t for e in out if e.line != 21] == want
    assert grown.reordered == fixed.reordered + 1


def test_a_growing_window_stays_within_the_pending_bound() -> None:
    evs = [_event(float(i), i) for i in range(1, 50)] + [_event(0.5, 50)] + [
        _event(float(i), i + 1) for i in range(50, 200)]
    stats = ReadStats()
    held = []

    def watch() -> object:
        for e in evs:
            held.append(e)
            yield e

    out = []
    for e in reorder(watch(), stats, window=2.0, grow=True, max_pending=10):
        out.append(e)
        assert len(held) - len(out) <= 10  # never more than max_pending held back
    assert len(out) == len(evs) and stats.grown_window == 48.5


def test_replay_of_stdin_grows_its_window_and_says_how_far(tmp_path: Path) -> None:
    log = slow_requests_log()
    pol = tmp_path / "per-client.toml"
    pol.write_text(PER_CLIENT)
    out = tmp_path / "out.json"
    args = [*CLI, "replay", "--policies", str(pol), "--log", "-", "--json", str(out)]
    r = subprocess.run(args, input=log, capture_output=True, text=True, timeout=120,
                       check=False)
    assert r.returncode == 3, r.stderr
    got = json.loads(out.read_text())["log"]
    assert (got["clamped_lines"], got["grown_order_window"]) == (1, 25.0), got
    assert "grew to 25 s" in r.stderr
    # the same log as a file: measured first, nothing clamped
    path = tmp_path / "slow.log"
    path.write_text(log)
    r = subprocess.run([*args[:7], str(path), *args[8:]], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["log"]["clamped_lines"] == 0
    with read_log(path, "combined", window=2.0) as events:  # a fixed 2 s: every slow one
        list(events)
        assert events.stats.late == sum(1 for i in range(2000) if i % 300 == 150) == 7
