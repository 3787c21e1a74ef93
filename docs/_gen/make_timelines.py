"""Timeline pictures of the algorithm pages, made by the limiter itself.

One fixed trace of requests (one key) goes through each algorithm with `ratekeeper.Limiter`
on a `ratekeeper.testing.ManualClock`; what the limiter decided is drawn as a small
hand-written SVG (no plotting library) and tabulated:

- docs/img/timeline-<algorithm>.svg: every request at its arrival time (admitted, admitted
  after a delay, rejected), and below it the capacity left: how many more requests would be
  admitted at that instant (`Limiter.peek`), sampled every 50 ms and around each request;
- the table between the ``timeline`` markers of docs/algorithms/<algorithm>.md.

    .venv/bin/python docs/_gen/make_timelines.py           # rewrite the pictures and tables
    .venv/bin/python docs/_gen/make_timelines.py --check   # exit 1 if any is stale

tests/test_docs_site.py runs the check, so the pictures cannot drift from the algorithms.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "src") not in sys.path:  # the working tree, also without an installed package
    sys.path.insert(0, str(ROOT / "src"))

from ratekeeper import Limit, Limiter  # noqa: E402
from ratekeeper.testing import ManualClock  # noqa: E402

IMG = ROOT / "docs" / "img"
PAGES = ROOT / "docs" / "algorithms"

#: The trace: a page load of 6 requests at t = 0, then 4 per second (twice the rate) from
#: t = 1 to 3, a few at t = 4.5, another page load at t = 6 and a last request at t = 7.5.
TRACE: tuple[float, ...] = (
    (0.0,) * 6
    + tuple(1.0 + 0.25 * i for i in range(9))
    + (4.5,) * 3
    + (6.0,) * 6
    + (7.5,)
)
END = 8.5  # seconds shown
STEP = 0.05  # capacity sampling interval, seconds

#: Each algorithm at about the same strength: 2 requests per second, 4 at once.
LIMITS: dict[str, tuple[Limit, str]] = {
    "token-bucket": (Limit("token-bucket", "2/s", burst=4),
                     'Limit("token-bucket", "2/s", burst=4)'),
    "gcra": (Limit("gcra", "2/s", burst=4), 'Limit("gcra", "2/s", burst=4)'),
    "leaky-bucket": (Limit("leaky-bucket", "2r/s", burst=3),
                     'Limit("leaky-bucket", "2r/s", burst=3)'),
    "fixed-window": (Limit("fixed-window", "4/2s"), 'Limit("fixed-window", "4/2s")'),
    "sliding-window-log": (Limit("sliding-window-log", "4/2s"),
                           'Limit("sliding-window-log", "4/2s")'),
    "sliding-window-counter": (Limit("sliding-window-counter", "4/2s"),
                               'Limit("sliding-window-counter", "4/2s")'),
}
WINDOWED = {"fixed-window": 2.0, "sliding-window-counter": 2.0}  # aligned windows to draw


@dataclass(frozen=True)
class Event:
    t: float
    allowed: bool
    delay: float
    remaining: int


@dataclass(frozen=True)
class Run:
    events: list[Event]
    capacity: list[tuple[float, int]]  # (t, requests that would be admitted at t)


def _capacity(limiter: Limiter) -> int:
    d = limiter.peek("k")
    return d.remaining + 1 if d.allowed else 0


def simulate(limit: Limit) -> Run:
    """The trace through `limit`, decided by a real `Limiter` on a `ManualClock`."""
    clock = ManualClock()
    limiter = Limiter(limit, clock=clock)
    events: list[Event] = []
    capacity: list[tuple[float, int]] = []
    arrivals = sorted(TRACE)
    i, n = 0, 0
    while True:
        t = round(n * STEP, 9)
        nxt = arrivals[i] if i < len(arrivals) else None
        if nxt is not None and nxt <= t:
            clock.set(nxt)
            capacity.append((nxt, _capacity(limiter)))
            while i < len(arrivals) and arrivals[i] == nxt:
                d = limiter.hit("k")
                events.append(Event(nxt, d.allowed, d.delay, d.remaining))
                i += 1
            capacity.append((nxt, _capacity(limiter)))
            if nxt == t:
                n += 1
            continue
        if t > END:
            break
        clock.set(t)
        capacity.append((t, _capacity(limiter)))
        n += 1
    return Run(events, capacity)


# ---------------------------------------------------------------- SVG

W, H = 800, 320
LEFT, RIGHT = 70, 20
TOP_BASE = 150  # y of the first request of a group; more at the same instant stack upwards
CAP_TOP, CAP_BOTTOM = 190, 280
GREEN, AMBER, RED, INK, GRID = "#2e7d32", "#e69500", "#c62828", "#222222", "#bbbbbb"


def _x(t: float) -> float:
    return LEFT + (W - LEFT - RIGHT) * t / END


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _f(v: float) -> str:
    return f"{v:.1f}"


def svg(name: str, run: Run) -> str:
    shown = LIMITS[name][1]
    top = max(c for _, c in run.capacity) or 1
    admitted = sum(e.allowed and not e.delay for e in run.events)
    delayed = sum(e.allowed and e.delay > 0 for e in run.events)
    rejected = sum(not e.allowed for e in run.events)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
        f"<title>{_esc(shown)}: {len(run.events)} requests, {admitted} admitted, "
        f"{delayed} delayed, {rejected} rejected</title>",
        f'<rect width="{W}" height="{H}" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="20" font-size="14" fill="{INK}">{_esc(shown)}</text>',
        # legend
        f'<circle cx="{LEFT + 6}" cy="38" r="5" fill="{GREEN}"/>'
        f'<text x="{LEFT + 16}" y="42" fill="{INK}">admitted ({admitted})</text>',
        f'<circle cx="{LEFT + 136}" cy="38" r="5" fill="{AMBER}"/>'
        f'<text x="{LEFT + 146}" y="42" fill="{INK}">admitted after a delay ({delayed})</text>',
        _cross(LEFT + 326, 38, RED) +
        f'<text x="{LEFT + 336}" y="42" fill="{INK}">rejected ({rejected})</text>',
        f'<text x="{LEFT - 8}" y="{TOP_BASE + 4}" text-anchor="end" fill="{INK}">requests</text>',
        f'<text x="{LEFT - 8}" y="{(CAP_TOP + CAP_BOTTOM) // 2 - 4}" text-anchor="end" '
        f'fill="{INK}">capacity</text>',
        f'<text x="{LEFT - 8}" y="{(CAP_TOP + CAP_BOTTOM) // 2 + 10}" text-anchor="end" '
        f'fill="{INK}">left</text>',
    ]
    # time axis, and the windows of the windowed algorithms
    for s in range(int(END) + 1):
        tick = _f(_x(s))
        out.append(f'<line x1="{tick}" y1="{CAP_BOTTOM}" x2="{tick}" y2="{CAP_BOTTOM + 5}" '
                   f'stroke="{INK}"/>')
        out.append(f'<text x="{tick}" y="{CAP_BOTTOM + 18}" text-anchor="middle" '
                   f'fill="{INK}">{s} s</text>')
    period = WINDOWED.get(name)
    if period:
        k = 0.0
        while k <= END:
            edge = _f(_x(k))
            out.append(f'<line x1="{edge}" y1="55" x2="{edge}" y2="{CAP_BOTTOM}" stroke="{GRID}" '
                       f'stroke-dasharray="4 3"/>')
            k += period
        out.append(f'<text x="{W - RIGHT}" y="42" text-anchor="end" fill="#777777">'
                   f"dashed: window boundaries</text>")
    out.append(f'<line x1="{LEFT}" y1="{CAP_BOTTOM}" x2="{W - RIGHT}" y2="{CAP_BOTTOM}" '
               f'stroke="{INK}"/>')
    # capacity: a staircase of the sampled values, with its scale
    def cy(c: int) -> float:
        return CAP_BOTTOM - (CAP_BOTTOM - CAP_TOP) * c / top

    for c in (0, top):
        out.append(f'<text x="{LEFT - 52}" y="{_f(cy(c) + 4)}" text-anchor="end" '
                   f'fill="#777777">{c}</text>')
    points: list[str] = []
    prev: int | None = None
    for t, c in run.capacity:
        if prev is not None and prev != c:
            points.append(f"{_f(_x(t))},{_f(cy(prev))}")
        points.append(f"{_f(_x(t))},{_f(cy(c))}")
        prev = c
    out.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="#1565c0" '
               f'stroke-width="2"/>')
    # requests: one mark each, stacked when several arrive at once
    stack: dict[float, int] = {}
    for e in run.events:
        level = stack.get(e.t, 0)
        stack[e.t] = level + 1
        x, y = _x(e.t), TOP_BASE - 12 * level
        if not e.allowed:
            out.append(_cross(x, y, RED))
        elif e.delay > 0:
            xd = _x(e.t + e.delay)
            out.append(f'<line x1="{_f(x)}" y1="{_f(y)}" x2="{_f(xd)}" y2="{_f(y)}" '
                       f'stroke="{AMBER}" stroke-width="1.5"/>'
                       f'<line x1="{_f(xd)}" y1="{_f(y - 4)}" x2="{_f(xd)}" y2="{_f(y + 4)}" '
                       f'stroke="{AMBER}" stroke-width="1.5"/>')
            out.append(f'<circle cx="{_f(x)}" cy="{_f(y)}" r="5" fill="{AMBER}"/>')
        else:
            out.append(f'<circle cx="{_f(x)}" cy="{_f(y)}" r="5" fill="{GREEN}"/>')
    out.append("</svg>")
    return "\n".join(line for line in out if line) + "\n"


def _cross(x: float, y: float, color: str) -> str:
    a, b = 4.5, 4.5
    return (f'<path d="M{_f(x - a)},{_f(y - b)}L{_f(x + a)},{_f(y + b)}'
            f'M{_f(x - a)},{_f(y + b)}L{_f(x + a)},{_f(y - b)}" stroke="{color}" '
            f'stroke-width="2"/>')


# ---------------------------------------------------------------- table

BEGIN_MARK = "<!-- timeline: generated by docs/_gen/make_timelines.py, do not edit -->"
END_MARK = "<!-- timeline: end -->"


def table(run: Run) -> str:
    rows = ["| t (s) | requests | admitted | delayed (s) | rejected | remaining after |",
            "| --- | --- | --- | --- | --- | --- |"]
    groups: dict[float, list[Event]] = {}
    for e in run.events:
        groups.setdefault(e.t, []).append(e)
    for t, es in groups.items():
        now = sum(e.allowed and not e.delay for e in es)
        later = [e.delay for e in es if e.allowed and e.delay > 0]
        rows.append(f"| {t:g} | {len(es)} | {now} | "
                    f"{', '.join(f'{d:g}' for d in later) or '–'} | "
                    f"{sum(not e.allowed for e in es)} | {es[-1].remaining} |")
    return "\n".join(rows) + "\n"


def page_with_table(text: str, tab: str, path: Path) -> str:
    pattern = re.compile(re.escape(BEGIN_MARK) + r"\n.*?" + re.escape(END_MARK), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{path}: no {BEGIN_MARK!r} ... {END_MARK!r} region to fill")
    return pattern.sub(lambda _: f"{BEGIN_MARK}\n{tab}{END_MARK}", text, count=1)


# ---------------------------------------------------------------- files

def outputs(names: Iterable[str] = LIMITS) -> dict[Path, str]:
    """Every generated file and the text it must have now."""
    out: dict[Path, str] = {}
    for name in names:
        run = simulate(LIMITS[name][0])
        out[IMG / f"timeline-{name}.svg"] = svg(name, run)
        page = PAGES / f"{name}.md"
        out[page] = page_with_table(page.read_text(encoding="utf-8"), table(run), page)
    return out


def stale() -> list[Path]:
    """The generated files that differ from what this script makes now."""
    return [p for p, text in outputs().items()
            if not p.exists() or p.read_text(encoding="utf-8") != text]


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a picture or table is stale")
    args = ap.parse_args(argv)
    if args.check:
        bad = stale()
        for p in bad:
            print(f"stale: {_rel(p)} (run docs/_gen/make_timelines.py)")
        return 1 if bad else 0
    IMG.mkdir(exist_ok=True)
    for p, text in outputs().items():
        p.write_text(text, encoding="utf-8")
        print(f"wrote {_rel(p)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
