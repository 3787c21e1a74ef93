"""The report of `compare` and `recommend`: one self-contained HTML file, and the same charts
as standalone SVG files (or PNG, with the ``plot`` extra).

    from ratekeeper.replay import report_html, write_svgs
    Path("report.html").write_text(report_html(comparison, recommendation))
    write_svgs("charts/", comparison, recommendation)   # one .svg per chart

The page needs no network when it is viewed: its CSS is inline, its charts are inline SVG
written here from the numbers (no script, no font, no image is fetched), and it carries the
numbers themselves as JSON in ``<script type="application/json" id="ratekeeper-data">``
(``{"comparison": Comparison.to_json(), "recommendation": Recommendation.to_json(),
"log": ...}``), so a reader's tool or a test can check the table against them.

The charts:

- **over time**, one for every candidate at once: requests offered (an area, the same log
  for all), then each candidate's rejected (and delayed, when it delays) per series bucket,
  each candidate in its own colour and each kind in its own dash, one polyline vertex per
  bucket at its middle, on a wall-clock axis (UTC times at clock-aligned ticks);
- **burst sizes**, one per limit: how many keys needed each burst at the recommended rate (the
  smallest capacity that admits all of a key's requests), as a histogram whose bins are the
  trade-off curve's bursts: a key counts in the bin ``lo..hi`` when it needs a burst in it,
  which is ``affected(lo - 1) - affected(hi)`` keys, exactly. A vertical line after the
  chosen burst splits the keys admitted in full (left) from those capped (right);
- **trade-off**, one per limit: the share of keys that would see a rejection against the
  burst, at the recommended rate (bold, the chosen point marked) and at the other rates of
  the curve.

A burst axis, and the histogram's count axis, is logarithmic when its values span more
than a factor of 50 (ticks 1, 2, 5, 10, 20, 50 ...: a bar of one capped key stays visible
beside a bar of a thousand). Every drawn
element carries its numbers as ``data-*`` attributes. No I/O here but `write_svgs` and
`write_pngs`.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from .._errors import RateKeeperError
from ._compare import Comparison, Series
from ._recommend import CurvePoint, LimitRecommendation, Recommendation

__all__ = [
    "PLOT_EXTRA",
    "Chart",
    "PlotExtraMissing",
    "burst_bins",
    "charts",
    "report_html",
    "require_plot",
    "write_pngs",
    "write_svgs",
]

#: What to install for `write_pngs`.
PLOT_EXTRA = "pip install 'ratekeeper[plot]'"

COLORS = {"offered": "#9ecae1", "admitted": "#2ca02c", "delayed": "#ff7f0e",
          "rejected": "#d62728", "bar": "#4c72b0", "chosen": "#d62728", "other": "#8c8c8c",
          "axis": "#444444", "grid": "#e3e3e3"}
KINDS = ("offered", "admitted", "delayed", "rejected")
#: One colour per candidate on the chart over time, and per rate on the trade-off chart.
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22")
#: Dashes for the other rates of the trade-off chart (the recommended one is solid), and
#: their colours: none close to the recommended blue, so a dashed curve drawn over it where
#: the two coincide (a client whose need does not change with the rate) still shows.
DASHES = ("8 4", "2 3", "12 3 2 3", "4 2")
RATE_COLORS = ("#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
WIDTH, HEIGHT = 1040, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 24, 60, 50


class PlotExtraMissing(RateKeeperError, ImportError):
    """PNG pictures need matplotlib, which the ``plot`` extra installs."""


@dataclass(frozen=True, slots=True)
class Chart:
    """One chart: `name` (a file stem, unique in a report), `title`, `svg` (a standalone
    SVG document)."""

    name: str
    title: str
    svg: str


@dataclass(frozen=True, slots=True)
class Bin:
    """`keys` keys needed a burst between `lo` and `hi` (whole requests, both included)."""

    lo: int
    hi: int
    keys: int


# ---------------------------------------------------------------- the numbers drawn

def burst_bins(lim: LimitRecommendation) -> list[Bin]:
    """The burst-size histogram of `lim` at its recommended rate, from its trade-off curve:
    ``affected(b)`` keys need more than ``b``, so ``affected(lo - 1) - affected(hi)`` need a
    burst in ``lo..hi``. Every key is in one bin (the curve runs from 1 to the largest)."""
    out: list[Bin] = []
    prev_b, prev_affected = 0, lim.keys
    for p in _at_rate(lim, lim.rate):
        out.append(Bin(prev_b + 1, p.burst, prev_affected - p.keys_affected))
        prev_b, prev_affected = p.burst, p.keys_affected
    return out


def _at_rate(lim: LimitRecommendation, rate: float) -> list[CurvePoint]:
    return sorted((p for p in lim.curve if p.rate == rate), key=lambda p: p.burst)


def _series_x(s: Series) -> list[float]:
    """Each bucket's middle, in seconds from the series' start."""
    return [(i + 0.5) * s.width for i in range(len(s.offered))]


# ---------------------------------------------------------------- axes

def _nice_step(span: float, n: int = 5) -> float:
    raw = span / n if span > 0 else 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag  # pragma: no cover


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    step = _nice_step(v)
    return math.ceil(v / step - 1e-9) * step


def _num(v: float) -> str:
    """A tick label: 1,200, 0.5, 12k."""
    if abs(v) >= 10_000:
        return f"{v / 1000:g}k"
    return f"{v:,.0f}" if v == int(v) else f"{v:g}"


class _Axis:
    """A value -> pixel mapping on [lo, hi], linear or logarithmic, with its ticks."""

    def __init__(self, lo: float, hi: float, p0: float, p1: float, *, log: bool = False
                 ) -> None:
        if hi <= lo:
            hi = lo + 1.0
        self.lo, self.hi, self.p0, self.p1, self.log = lo, hi, p0, p1, log

    def __call__(self, v: float) -> float:
        if self.log:
            f = (math.log(v) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        else:
            f = (v - self.lo) / (self.hi - self.lo)
        return self.p0 + f * (self.p1 - self.p0)

    def ticks(self) -> list[float]:
        if self.log:
            out = []
            k = math.floor(math.log10(self.lo))
            while 10.0 ** k <= self.hi:
                for m in (1, 2, 5):
                    v = m * 10.0 ** k
                    if self.lo <= v <= self.hi:
                        out.append(v)
                k += 1
            return out if len(out) <= 9 else [v for v in out if math.log10(v) % 1 == 0]
        step = _nice_step(self.hi - self.lo)
        first = math.ceil(self.lo / step - 1e-9)
        return [round(i * step, 12) for i in range(first, int(self.hi / step + 1e-9) + 1)]


#: Tick steps of a wall-clock axis, seconds: the series' widths and a few between.
_TIME_STEPS = (1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0,
               3600.0, 7200.0, 10800.0, 21600.0, 43200.0, 86400.0, 172800.0, 604800.0)


def time_ticks(t_lo: float, t_hi: float, n: int = 8) -> list[tuple[float, str]]:
    """Clock-aligned ticks over Unix times `t_lo`..`t_hi`, at most about `n`, each with its
    UTC label: ``14:05:30`` under a minute's step, ``14:05`` under a day's (the date added
    where it changes), ``05 Oct`` from a day up."""
    span = max(t_hi - t_lo, 1.0)
    step = next((st for st in _TIME_STEPS if span / st <= n), None)
    if step is None:
        step = 604800.0 * math.ceil(span / n / 604800.0)
    out = []
    day = None
    t = math.ceil(t_lo / step - 1e-9) * step
    while t <= t_hi + 1e-9:
        d = datetime.fromtimestamp(t, timezone.utc)
        if step >= 86400:
            label = d.strftime("%d %b")
        else:
            label = d.strftime("%H:%M:%S" if step < 60 else "%H:%M")
            if d.date() != day:
                label = d.strftime("%d %b ") + label
                day = d.date()
        out.append((t, label))
        t += step
    return out


def _count_axis(counts: Sequence[int], p0: float, p1: float) -> _Axis:
    """Counts from 0 (linear) or, when the non-zero ones span more than a factor of 50,
    from 0.7 on a log scale (a bar of 1 still shows)."""
    hi = max([*counts, 5])
    lo = min((c for c in counts if c > 0), default=1)
    if hi / lo > 50:
        return _Axis(0.7, 10.0 ** math.ceil(math.log10(hi) + 1e-9), p0, p1, log=True)
    return _Axis(0.0, _nice_max(hi), p0, p1)


def _burst_axis(hi_burst: int, p0: float, p1: float) -> _Axis:
    """Bursts 1..`hi_burst`, each whole burst ``b`` drawn over ``b - 0.5 .. b + 0.5``."""
    lo, hi = 0.5, hi_burst + 0.5
    return _Axis(lo, hi, p0, p1, log=hi / lo > 50)


# ---------------------------------------------------------------- SVG

def _f(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _a(value: object) -> str:
    return html.escape(str(value), quote=True)


def _t(text: str) -> str:
    return html.escape(text, quote=False)


class _Svg:
    """One chart's SVG, built element by element."""

    def __init__(self, title: str, chart: str) -> None:
        self.parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" data-chart="{_a(chart)}" '
            'font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">',
            f"<title>{_t(title)}</title>",
            f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
            f'<text x="{LEFT}" y="20" font-size="14" font-weight="bold" '
            f'fill="{COLORS["axis"]}">{_t(title)}</text>']

    def add(self, s: str) -> None:
        self.parts.append(s)

    def text(self, x: float, y: float, s: str, *, anchor: str = "start", size: int = 12,
             color: str = COLORS["axis"], extra: str = "") -> None:
        self.add(f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}" font-size="{size}" '
                 f'fill="{color}"{extra}>{_t(s)}</text>')

    def axes(self, xa: _Axis, ya: _Axis, xlabel: str, ylabel: str, *,
             ylabel_of: Callable[[float], str] = _num,
             xticks: Sequence[tuple[float, str]] | None = None) -> None:
        bottom, top = ya.p0, ya.p1
        for v in ya.ticks():
            y = ya(v)
            self.add(f'<line x1="{_f(xa.p0)}" y1="{_f(y)}" x2="{_f(xa.p1)}" y2="{_f(y)}" '
                     f'stroke="{COLORS["grid"]}"/>')
            self.text(xa.p0 - 6, y + 4, ylabel_of(v), anchor="end", size=11,
                      extra=' data-tick="y"')
        for v, label in (xticks if xticks is not None
                         else [(v, _num(v)) for v in xa.ticks()]):
            x = xa(v)
            self.add(f'<line x1="{_f(x)}" y1="{_f(bottom)}" x2="{_f(x)}" '
                     f'y2="{_f(bottom + 5)}" stroke="{COLORS["axis"]}"/>')
            self.text(x, bottom + 18, label, anchor="middle", size=11,
                      extra=' data-tick="x"')
        self.add(f'<line x1="{_f(xa.p0)}" y1="{_f(bottom)}" x2="{_f(xa.p1)}" '
                 f'y2="{_f(bottom)}" stroke="{COLORS["axis"]}"/>')
        self.add(f'<line x1="{_f(xa.p0)}" y1="{_f(bottom)}" x2="{_f(xa.p0)}" '
                 f'y2="{_f(top)}" stroke="{COLORS["axis"]}"/>')
        self.text((xa.p0 + xa.p1) / 2, HEIGHT - 8, xlabel, anchor="middle")
        self.text(14, (top + bottom) / 2, ylabel, anchor="middle",
                  extra=f' transform="rotate(-90 14 {_f((top + bottom) / 2)})"')

    def legend(self, items: Sequence[tuple[str, str] | tuple[str, str, str]], *,
               x: float = WIDTH - RIGHT) -> None:
        """Right-aligned entries in the row under the title (``data-legend`` the label): a
        line in the series' colour and dash, or a swatch for an area."""
        for item in reversed(items):
            label, color = item[0], item[1]
            dash = item[2] if len(item) == 3 else None
            w = 7 * len(label) + 34
            x -= w
            if dash is None:
                mark = f'<rect x="{_f(x)}" y="29" width="22" height="10" fill="{color}"/>'
            else:
                mark = (f'<line x1="{_f(x)}" y1="34" x2="{_f(x + 22)}" y2="34" '
                        f'stroke="{color}" stroke-width="2.5"'
                        + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
            self.add(f'<g data-legend="{_a(label)}">{mark}</g>')
            self.text(x + 27, 38, label, size=11)

    def done(self) -> str:
        return "\n".join([*self.parts, "</svg>"]) + "\n"


def _points(xs: Sequence[float], ys: Sequence[float]) -> str:
    return " ".join(f"{_f(x)},{_f(y)}" for x, y in zip(xs, ys, strict=True))


def _timeline_lines(c: Comparison) -> list[tuple[str, str, str, str, list[int]]]:
    """The polylines over time: (policy, kind, colour, dash, counts), each candidate's
    rejected (solid) and, when it delays any, delayed (dashed), in its own colour."""
    out = []
    for i, p in enumerate(c.policies):
        color = PALETTE[i % len(PALETTE)]
        out.append((p.name, "rejected", color, "", p.series.rejected))
        if any(p.series.delayed):
            out.append((p.name, "delayed", color, "6 3", p.series.delayed))
    return out


def timeline_svg(c: Comparison) -> str:
    """Every candidate over time on one chart: requests offered per bucket (an area, the
    first candidate's series: the same log for all), and each candidate's rejected and
    delayed (`_timeline_lines`): ``data-policy``, ``data-series`` and ``data-values`` on
    each polyline, a legend entry each, the x axis in UTC (`time_ticks`)."""
    s = c.policies[0].series if c.policies else Series()
    title = f"requests per {_duration(s.width)}: offered, and each candidate's rejections"
    svg = _Svg(title, "timeline")
    n = len(s.offered)
    t0 = s.t0 if s.t0 is not None else 0.0
    xa = _Axis(t0, t0 + max(n * s.width, s.width), LEFT, WIDTH - RIGHT)
    ya = _Axis(0.0, _nice_max(max([*s.offered, 5])), HEIGHT - BOTTOM, TOP)
    lines = _timeline_lines(c)
    svg.axes(xa, ya, "time (UTC)", "requests",
             xticks=time_ticks(xa.lo, xa.hi) if s.t0 is not None else [])
    svg.legend([("offered", COLORS["offered"]),
                *((f"{name}: {kind}", color, dash) for name, kind, color, dash, _ in lines)])
    if not n:
        svg.text((xa.p0 + xa.p1) / 2, (ya.p0 + ya.p1) / 2, "no requests", anchor="middle")
        return svg.done()
    xs = [xa(t0 + x) for x in _series_x(s)]
    off = [ya(v) for v in s.offered]
    area = [(xs[0], ya.p0), *zip(xs, off, strict=True), (xs[-1], ya.p0)]
    svg.add(f'<polygon data-series="offered" data-values="{_a(json.dumps(s.offered))}" '
            f'points="{_points([a for a, _ in area], [b for _, b in area])}" '
            f'fill="{COLORS["offered"]}" fill-opacity="0.55" stroke="none"/>')
    for name, kind, color, dash, values in lines:
        d = f' stroke-dasharray="{dash}"' if dash else ""
        svg.add(f'<polyline data-policy="{_a(name)}" data-series="{kind}" '
                f'data-values="{_a(json.dumps(values))}" '
                f'points="{_points(xs, [ya(v) for v in values])}" fill="none" '
                f'stroke="{color}" stroke-width="2.5" stroke-linejoin="round"{d}/>')
    return svg.done()


def _duration(width: float) -> str:
    """A bucket width as a clock reads it: 1 s, 10 min, 1 h, 1 day."""
    for unit, name in ((86400.0, "day"), (3600.0, "h"), (60.0, "min")):
        if width >= unit and (width / unit).is_integer():
            n = int(width / unit)
            return f"{n} {name}" + ("s" if name == "day" and n > 1 else "")
    return f"{width:g} s"


def bursts_svg(lim: LimitRecommendation) -> str:
    """The burst sizes the keys of one limit needed at its rate (`burst_bins`), with the
    chosen burst marked: each bar has ``data-lo``/``data-hi``/``data-keys``, the marker
    ``data-burst``."""
    bins = burst_bins(lim)
    title = f"{lim.name}: burst each key needs at {lim.rate_text}"
    svg = _Svg(title, "bursts")
    xa = _burst_axis(max((b.hi for b in bins), default=lim.burst), LEFT, WIDTH - RIGHT)
    ya = _count_axis([b.keys for b in bins], HEIGHT - BOTTOM, TOP)
    svg.axes(xa, ya, "burst needed (requests)" + (", log scale" if xa.log else ""),
             "keys" + (", log scale" if ya.log else ""))
    for b in bins:
        x0, x1 = xa(b.lo - 0.5), xa(b.hi + 0.5)
        y = ya(b.keys) if b.keys else ya.p0
        rng = f"{b.lo}" if b.lo == b.hi else f"{b.lo}-{b.hi}"
        svg.add(f'<rect data-lo="{b.lo}" data-hi="{b.hi}" data-keys="{b.keys}" '
                f'x="{_f(x0)}" y="{_f(y)}" width="{_f(max(x1 - x0 - 1, 1))}" '
                f'height="{_f(ya.p0 - y)}" fill="{COLORS["bar"]}">'
                f"<title>burst {rng}: {b.keys} keys</title></rect>")
    mx = xa(lim.burst + 0.5)
    svg.add(f'<line data-burst="{lim.burst}" x1="{_f(mx)}" y1="{_f(ya.p0)}" x2="{_f(mx)}" '
            f'y2="{_f(ya.p1)}" stroke="{COLORS["chosen"]}" stroke-width="2" '
            'stroke-dasharray="6 3"/>')
    right = mx < WIDTH * 0.6
    svg.text(mx + 6 if right else mx - 6, ya.p1 - 8,  # above the bars
             f"burst {lim.burst}: {lim.keys_affected} of {lim.keys} keys capped",
             anchor="start" if right else "end", color=COLORS["chosen"])
    return svg.done()


def _rate_styles(lim: LimitRecommendation) -> list[tuple[float, str, str]]:
    """(rate, colour, dash) per rate of the curve, in drawing order: the recommended one
    first, solid blue, then each other over it in a colour and dash of its own."""
    out: list[tuple[float, str, str]] = []
    k = 0
    for r in sorted({p.rate for p in lim.curve}):
        if r == lim.rate:
            out.insert(0, (r, COLORS["bar"], ""))
        else:
            out.append((r, RATE_COLORS[k % len(RATE_COLORS)], DASHES[k % len(DASHES)]))
            k += 1
    return out


def tradeoff_svg(lim: LimitRecommendation) -> str:
    """Share of keys that would see a rejection against the burst, one polyline per rate of
    the curve (``data-rate``; the recommended one bold), the chosen point a circle
    (``data-burst``, ``data-share``)."""
    title = f"{lim.name}: keys rejected at least once vs burst"
    svg = _Svg(title, "tradeoff")
    xa = _burst_axis(max((p.burst for p in lim.curve), default=lim.burst), LEFT,
                     WIDTH - RIGHT)
    ya = _Axis(0.0, 1.0, HEIGHT - BOTTOM, TOP)
    svg.axes(xa, ya, "burst (requests)" + (", log scale" if xa.log else ""),
             "share of keys affected", ylabel_of=lambda v: f"{v:.0%}")
    legend: list[tuple[str, str, str]] = []
    for r, color, dash in _rate_styles(lim):
        pts = _at_rate(lim, r)
        chosen = r == lim.rate
        label = f"{r:g}/s" + (" (recommended)" if chosen else "")
        legend.append((label, color, dash))
        bursts = json.dumps([p.burst for p in pts])
        d = f' stroke-dasharray="{dash}"' if dash else ""
        svg.add(f'<polyline data-rate="{r:g}" data-bursts="{_a(bursts)}" '
                f'points="{_points([xa(p.burst) for p in pts], [ya(p.share) for p in pts])}" '
                f'fill="none" stroke="{color}" stroke-width="3" '
                f'stroke-linejoin="round"{d}/>')
    share = lim.keys_affected / lim.keys if lim.keys else 0.0
    cx, cy = xa(lim.burst), ya(share)
    svg.add(f'<circle data-burst="{lim.burst}" data-share="{share!r}" cx="{_f(cx)}" '
            f'cy="{_f(cy)}" r="6" fill="{COLORS["chosen"]}" stroke="#ffffff" '
            'stroke-width="1.5"/>')
    right = cx < WIDTH * 0.6
    svg.text(cx + 9 if right else cx - 9, cy - 9, f"burst {lim.burst}: {share:.1%}",
             color=COLORS["chosen"], anchor="start" if right else "end")
    svg.legend(legend)
    return svg.done()


# ---------------------------------------------------------------- the charts of a report

def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "x"


def _parts(comparison: Comparison | None, recommendation: Recommendation | None
           ) -> tuple[Comparison | None, tuple[LimitRecommendation, ...]]:
    if comparison is None and recommendation is not None:
        comparison = recommendation.comparison
    return comparison, () if recommendation is None else recommendation.limits


def charts(comparison: Comparison | None = None,
           recommendation: Recommendation | None = None) -> list[Chart]:
    """Every chart of the report: ``timeline`` (every candidate), then ``bursts-<limit>``
    and ``tradeoff-<limit>`` per recommended limit. Without `comparison`, the
    recommendation's own replay is shown."""
    comparison, limits = _parts(comparison, recommendation)
    out: list[Chart] = []
    used: set[str] = set()

    def add(stem: str, title: str, svg: str) -> None:
        name, i = stem, 2
        while name in used:
            name, i = f"{stem}-{i}", i + 1
        used.add(name)
        out.append(Chart(name, title, svg))

    if comparison is not None:
        add("timeline", "every candidate over time", timeline_svg(comparison))
    for lim in limits:
        add(f"bursts-{_slug(lim.name)}", f"{lim.name}: burst sizes", bursts_svg(lim))
        add(f"tradeoff-{_slug(lim.name)}", f"{lim.name}: trade-off", tradeoff_svg(lim))
    return out


def write_svgs(directory: str | Path, comparison: Comparison | None = None,
               recommendation: Recommendation | None = None) -> list[Path]:
    """Each chart of `charts` as ``<directory>/<name>.svg`` (the directory is made)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for c in charts(comparison, recommendation):
        path = d / f"{c.name}.svg"
        path.write_text(c.svg, encoding="utf-8")
        out.append(path)
    return out


# ---------------------------------------------------------------- PNG (matplotlib)

def require_plot() -> Any:
    """matplotlib's `Figure`, or `PlotExtraMissing` saying what to install."""
    try:
        from matplotlib.figure import Figure  # noqa: PLC0415
    except ImportError as e:
        raise PlotExtraMissing(
            f"PNG pictures need matplotlib, which is not installed ({e}): {PLOT_EXTRA}, "
            "or write the same charts as SVG, which needs nothing more") from None
    return Figure


def write_pngs(directory: str | Path, comparison: Comparison | None = None,
               recommendation: Recommendation | None = None, *, dpi: int = 100
               ) -> list[Path]:
    """The charts of `charts` as ``<directory>/<name>.png``, drawn by matplotlib from the
    same numbers. Raises `PlotExtraMissing` without the ``plot`` extra."""
    figure = require_plot()
    comparison, limits = _parts(comparison, recommendation)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    names = [c.name for c in charts(comparison, recommendation)]
    # In the order of `charts`, so each picture gets its chart's name.
    drawn: list[Callable[[Any], None]] = (
        [] if comparison is None else [partial(_png_timeline, c=comparison)])
    for lim in limits:
        drawn += [partial(_png_bursts, lim=lim), partial(_png_tradeoff, lim=lim)]
    out = []
    for name, draw in zip(names, drawn, strict=True):
        fig = figure(figsize=(WIDTH / 100, HEIGHT / 100), dpi=dpi)  # 1040 x 420 px
        ax = fig.add_subplot()
        draw(ax)
        fig.tight_layout()
        path = d / f"{name}.png"
        fig.savefig(path, dpi=dpi, facecolor="white")
        out.append(path)
    return out


def _png_timeline(ax: Any, c: Comparison) -> None:
    import matplotlib.dates as mdates  # noqa: PLC0415

    s = c.policies[0].series if c.policies else Series()
    t0 = s.t0 if s.t0 is not None else 0.0
    xs = [datetime.fromtimestamp(t0 + x, timezone.utc) for x in _series_x(s)]
    ax.set_title(f"requests per {_duration(s.width)}: offered, and each candidate's "
                 "rejections", fontsize=12, loc="left")
    if xs:
        ax.fill_between(xs, s.offered, color=COLORS["offered"], alpha=0.55, linewidth=0,
                        label="offered")
    for name, kind, color, dash, values in _timeline_lines(c):
        ax.plot(xs, values, color=color, linewidth=2, label=f"{name}: {kind}",
                linestyle=(0, tuple(float(v) for v in dash.split())) if dash else "-")
    loc = mdates.AutoDateLocator(tz=timezone.utc)  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(loc)
    ax.xaxis.set_major_formatter(
        mdates.ConciseDateFormatter(loc, tz=timezone.utc))  # type: ignore[no-untyped-call]
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel("requests")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=9, loc="upper right")


def _png_bursts(ax: Any, lim: LimitRecommendation) -> None:
    bins = burst_bins(lim)
    ax.set_title(f"{lim.name}: burst each key needs at {lim.rate_text}", fontsize=11,
                 loc="left")
    ax.bar([b.lo - 0.5 for b in bins], [b.keys for b in bins],
           width=[b.hi - b.lo + 1 for b in bins], align="edge", color=COLORS["bar"])
    if bins and (bins[-1].hi + 0.5) / 0.5 > 50:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(_plain_ticks())
    if _count_axis([b.keys for b in bins], 0, 1).log:
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.7)
        ax.yaxis.set_major_formatter(_plain_ticks())
    ax.axvline(lim.burst + 0.5, color=COLORS["chosen"], linestyle="--",
               label=f"burst {lim.burst}: {lim.keys_affected} of {lim.keys} keys capped")
    ax.set_xlabel("burst needed (requests)")
    ax.set_ylabel("keys")
    ax.legend(fontsize=8)


def _plain_ticks() -> Any:
    """Log-axis tick labels as numbers (1, 10, 100), not powers (10⁰, 10¹)."""
    from matplotlib.ticker import FuncFormatter  # noqa: PLC0415

    return FuncFormatter(lambda v, _pos: _num(v))


def _png_tradeoff(ax: Any, lim: LimitRecommendation) -> None:
    ax.set_title(f"{lim.name}: keys rejected at least once vs burst", fontsize=11, loc="left")
    for r, color, dash in _rate_styles(lim):
        pts = _at_rate(lim, r)
        chosen = r == lim.rate
        ax.plot([p.burst for p in pts], [p.share for p in pts], color=color, linewidth=3,
                linestyle=(0, tuple(float(v) for v in dash.split())) if dash else "-",
                label=f"{r:g}/s" + (" (recommended)" if chosen else ""))
    share = lim.keys_affected / lim.keys if lim.keys else 0.0
    ax.plot([lim.burst], [share], "o", color=COLORS["chosen"], markersize=8)
    if max((p.burst for p in lim.curve), default=1) > 25:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(_plain_ticks())
    ax.set_ylim(0, 1)
    ax.set_xlabel("burst (requests)")
    ax.set_ylabel("share of keys affected")
    ax.legend(fontsize=8)


# ---------------------------------------------------------------- HTML

_CSS = """
body { font-family: DejaVu Sans, Helvetica, Arial, sans-serif; color: #222; margin: 24px;
       max-width: 1320px; }
h1 { font-size: 22px; margin: 0 0 4px 0; }
h2 { font-size: 17px; margin: 28px 0 8px 0; border-bottom: 1px solid #ddd; }
p.meta { color: #555; margin: 0 0 12px 0; }
table { border-collapse: collapse; margin: 6px 0 12px 0; }
th, td { padding: 4px 12px; border-bottom: 1px solid #e6e6e6; }
th { text-align: left; background: #f4f6f8; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
figure { margin: 0; border: 1px solid #e3e3e3; }
ul.top { margin: 4px 0; color: #444; }
p.warn { background: #fff4e0; border-left: 4px solid #e08a00; padding: 6px 10px; }
"""

#: The comparison table's rows: (label, field of PolicyResult.to_json(), format).
TABLE_ROWS: tuple[tuple[str, str, str], ...] = (
    ("requests", "requests", "int"),
    ("admitted", "admitted", "int"),
    ("delayed", "delayed", "int"),
    ("rejected", "rejected", "int"),
    ("not limited", "not_limited", "int"),
    ("shadow-rejected", "shadow_rejected", "int"),
    ("clients", "clients", "int"),
    ("clients affected", "clients_affected", "int"),
    ("share of clients affected", "clients_affected_share", "share"),
    ("page loads", "page_loads", "int"),
    ("page loads with a rejection", "page_loads_rejected", "int"),
    ("share of page loads rejected", "page_load_share", "share"),
    ("queueing delay p50", "delay_p50", "seconds"),
    ("queueing delay p99", "delay_p99", "seconds"),
    ("queueing delay max", "delay_max", "seconds"),
)

#: The recommendation table's columns: (label, field of LimitRecommendation.to_json(), format).
LIMIT_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("limit", "name", "text"),
    ("algorithm", "algorithm", "text"),
    ("rate", "rate_text", "text"),
    ("burst", "burst", "int"),
    ("keys", "keys", "int"),
    ("keys capped", "keys_affected", "int"),
    ("share capped", "share_affected", "share"),
)


def cell_text(value: Any, fmt: str) -> str:
    """How the report writes a value of format `fmt` (int, share, seconds, text)."""
    if value is None:
        return "-"
    if fmt == "int":
        return f"{value:,}"
    if fmt == "share":
        return f"{value * 100:.1f} %"
    if fmt == "seconds":
        return f"{value * 1000:.1f} ms"
    return str(value)


def _cell(value: Any, fmt: str, **data: object) -> str:
    attrs = "".join(f' data-{k}="{_a(v)}"' for k, v in data.items())
    cls = "" if fmt == "text" else ' class="num"'
    return (f'<td{cls}{attrs} data-value="{_a(json.dumps(value))}">'
            f"{_t(cell_text(value, fmt))}</td>")


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _json_script(value: Any) -> str:
    # Escaped so that no "</script>" (nor any markup) can end the block early; JSON reads
    # the \u escapes back as the same characters.
    text = json.dumps(value, indent=1, allow_nan=False)
    for ch, esc in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e")):
        text = text.replace(ch, esc)
    return f'<script type="application/json" id="ratekeeper-data">\n{text}\n</script>'


def _comparison_html(c: Comparison) -> list[str]:
    out = ["<h2>Policies side by side</h2>"]
    span = ("" if c.first_t is None or c.last_t is None
            else f", {_utc(c.first_t)} to {_utc(c.last_t)}")
    out.append(f'<p class="meta">{c.events:,} requests{_t(span)}; a page load is one '
               f"client's requests at most {c.gap:g} s apart.</p>")
    if c.named_clients:
        out.append(f'<p class="meta" id="named-clients" data-clients="{c.named_clients}" '
                   f'data-lines="{c.named_lines}">{_t(c.named_note())} '
                   f"({c.named_lines:,} lines).</p>")
    out.append('<table id="comparison"><thead><tr><th></th>')
    out += [f'<th data-policy="{i}">{_t(p.name)}</th>' for i, p in enumerate(c.policies)]
    out.append("</tr></thead><tbody>")
    for label, fld, fmt in TABLE_ROWS:
        out.append(f'<tr><th scope="row">{_t(label)}</th>')
        for i, p in enumerate(c.policies):
            out.append(_cell(p.to_json()[fld], fmt, policy=i, field=fld))
        out.append("</tr>")
    out.append("</tbody></table>")
    for p in c.policies:
        if p.top_clients or p.top_counters:
            out.append(f"<p>Rejected most under <b>{_t(p.name)}</b>:</p><ul class=\"top\">")
            out += [f"<li>{_t(k.key)}: {k.count:,}</li>" for k in p.top_counters[:5]]
            out.append("</ul>")
    out.append("<h2>Requests over time</h2>")
    out.append('<div class="charts">')
    out.append(f"<figure>{timeline_svg(c)}</figure>")
    out.append("</div>")
    return out


def _recommendation_html(r: Recommendation) -> list[str]:
    out = ["<h2>Recommendation</h2>",
           f'<p class="meta">Every request of {r.target:.1%} of the keys admitted; rates over '
           f"{r.window:g} s windows.</p>",
           '<table id="recommendation"><thead><tr>']
    out += [f"<th>{_t(label)}</th>" for label, _, _ in LIMIT_COLUMNS]
    out.append("</tr></thead><tbody>")
    for i, lim in enumerate(r.limits):
        js = lim.to_json()
        out.append("<tr>")
        out += [_cell(js[fld], fmt, limit=i, field=fld) for _, fld, fmt in LIMIT_COLUMNS]
        out.append("</tr>")
    out.append("</tbody></table>")
    for i, lim in enumerate(r.limits):
        if lim.abusive:
            out.append(f"<h2>{_t(lim.name)}: abusive keys, left out</h2>")
            rule = ("every key counts" if r.abusive_share is None else
                    f"at least {r.abusive_min} requests, {r.abusive_share:.0%} or more "
                    "answered 4xx other than 429")
            out.append(f'<p class="meta">{len(lim.abusive):,} keys ({_t(rule)}) are shown '
                       "here and do not drive the proposal.</p>")
            out.append(f'<table id="abusive-{i}"><thead><tr><th>key</th><th>requests</th>'
                       "<th>answered 4xx</th><th>burst it would need</th></tr></thead><tbody>")
            for key, burst, n, share in lim.abusive:
                need = max(1, math.ceil(burst - 1e-6))  # whole requests, as a burst is
                out.append(f"<tr><td>{_t(key)}</td>{_cell(n, 'int')}{_cell(share, 'share')}"
                           f"{_cell(need, 'int')}</tr>")
            out.append("</tbody></table>")
    for lim in r.limits:
        out.append(f"<h2>{_t(lim.name)}: burst sizes and the trade-off</h2>")
        out.append(f'<div class="charts"><figure>{bursts_svg(lim)}</figure>'
                   f"<figure>{tradeoff_svg(lim)}</figure></div>")
    return out


def report_html(comparison: Comparison | None = None,
                recommendation: Recommendation | None = None, *,
                title: str = "ratekeeper report", log: dict[str, Any] | None = None) -> str:
    """The whole report as one HTML document (well-formed XML too) that loads nothing:
    the recommendation (if any: its table, burst histogram and trade-off curve per limit),
    then the comparison (the recommendation's own replay when `comparison` is None): the
    table, the top rejected keys and a chart over time per policy. `log`: the reader's
    figures (lines, malformed, ...), embedded as given."""
    if comparison is None and recommendation is None:
        raise ValueError("nothing to report: give a Comparison, a Recommendation or both")
    shown, _ = _parts(comparison, recommendation)
    data = {"comparison": None if shown is None else shown.to_json(),
            "recommendation": None if recommendation is None else recommendation.to_json(),
            "log": log}
    body: list[str] = [f"<h1>{_t(title)}</h1>"]
    if log is not None and "lines" in log:
        bad = sum(log.get("malformed", {}).values())
        body.append(f'<p class="meta">{log["lines"]:,} log lines, {bad:,} malformed.</p>')
        clamped = log.get("clamped_lines") or 0
        if clamped:
            grown = log.get("grown_order_window")
            how = "" if grown is None else f" (the window grew to {grown:g} s, too late for them)"
            body.append(f'<p class="warn" id="clamped" data-lines="{clamped}">{clamped:,} lines '
                        f"were further out of time order than the order window{_t(how)} and "
                        "were decided at the time of the line before them: the figures below "
                        "are not exact. Raise --order-window (or leave it unset for a file: "
                        "it is then measured).</p>")
    if recommendation is not None:
        body += _recommendation_html(recommendation)
    if shown is not None:
        body += _comparison_html(shown)
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"/>',
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>',
        f"<title>{_t(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head><body>",
        *body,
        _json_script(data),
        "</body></html>",
    ]) + "\n"
