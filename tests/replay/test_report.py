"""The replay report: one HTML file that loads nothing, whose table and charts are the
numbers it embeds, as SVG and PNG files too, and a real render in headless Chromium."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
import zlib
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ratekeeper.policy import load_policies, parse_policies
from ratekeeper.replay import (
    Candidate,
    Comparison,
    Recommendation,
    compare,
    read_log,
    recommend,
    report_html,
    with_overrides,
    write_pngs,
    write_svgs,
)
from ratekeeper.replay._compare import client_resolver
from ratekeeper.replay._recommend import per_client_policies, required_burst
from ratekeeper.replay._report import COLORS, LIMIT_COLUMNS, TABLE_ROWS, burst_bins, time_ticks
from tests.replay.make_sample import REPLAY_FORMAT
from tests.replay.test_named_clients import BURST_2, LINES
from tests.replay.test_recommend import scanner_heavy, traffic
from tests.replay.test_replay import POLICIES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = Path(__file__).parent / "data"
LOG = str(DATA / "nginx-replay.log")
SVG = "{http://www.w3.org/2000/svg}"
CLI = [sys.executable, "-c", "import sys; from ratekeeper.cli import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    """The real nginx sample through its policies and a stricter copy (burst 2)."""
    path = tmp_path_factory.mktemp("policies") / "p.toml"
    path.write_text(textwrap.dedent(POLICIES))
    p1 = load_policies(path)
    p2 = parse_policies(with_overrides(tomllib.loads(path.read_text()),
                                       ["per-client.burst=2"]))
    with read_log(LOG, REPLAY_FORMAT) as events:
        return compare([Candidate("as is", p1), Candidate("burst 2", p2)], events,
                       client_of=client_resolver(p1))


@pytest.fixture(scope="module")
def rec() -> Recommendation:
    """test_recommend's known answer: 99 clients need burst 10 at 5/s, one needs ~5,400."""
    evs = traffic()
    return recommend(lambda: evs, target=0.99)


def _xml(text: str) -> ET.Element:
    return ET.fromstring(text.replace("<!DOCTYPE html>", "", 1))


def _svgs(root: ET.Element, chart: str) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG}svg") if e.get("data-chart") == chart]


def _points(el: ET.Element) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in
            (p.split(",") for p in (el.get("points") or "").split())]


class _Balance(HTMLParser):
    """Every element an HTML parser sees is closed, in order."""

    VOID = frozenset({"meta", "br", "img", "hr", "input", "link"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.seen: Counter[str] = Counter()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen[tag] += 1
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen[tag] += 1

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-5:])
        self.stack.pop()


def test_the_report_is_well_formed_and_loads_nothing(comparison: Comparison,
                                                     rec: Recommendation) -> None:
    text = report_html(comparison, rec)
    b = _Balance()
    b.feed(text)
    b.close()
    assert b.stack == [] and b.seen["table"] == 2 and b.seen["svg"] == 3
    root = _xml(text)  # the SVG parts (and the whole page) parse as XML
    assert root.tag == "html" and len(list(root.iter(f"{SVG}svg"))) == 3
    # Nothing is fetched when the page is viewed: no links, sources, imports or URLs but the
    # SVG namespace.
    for el in root.iter():
        assert el.tag not in ("link", "img", "iframe", "object"), el.tag
        assert not {"src", "href", "{http://www.w3.org/1999/xlink}href"} & set(el.attrib)
    scripts = list(root.iter("script"))
    assert [s.get("type") for s in scripts] == ["application/json"]
    assert "url(" not in text and "@import" not in text
    assert set(text.replace("http://www.w3.org/2000/svg", "").split("://")[1:]) == set()


def test_the_embedded_json_is_the_comparisons_and_the_table_shows_it(
        comparison: Comparison) -> None:
    root = _xml(report_html(comparison))
    (script,) = [s for s in root.iter("script") if s.get("id") == "ratekeeper-data"]
    data = json.loads(script.text or "")
    assert data["comparison"] == comparison.to_json()
    assert data["recommendation"] is None
    table = next(t for t in root.iter("table") if t.get("id") == "comparison")
    heads = [th.text for th in table.iter("th") if th.get("data-policy") is not None]
    assert heads == [p["name"] for p in data["comparison"]["policies"]]
    formats = {fld: fmt for _, fld, fmt in TABLE_ROWS}
    cells = [td for td in table.iter("td") if td.get("data-field")]
    assert len(cells) == len(TABLE_ROWS) * len(comparison.policies)
    for td in cells:
        want = data["comparison"]["policies"][int(td.get("data-policy", ""))][
            td.get("data-field", "")]
        assert json.loads(td.get("data-value", "")) == want
        _check_text(td.text or "", want, formats[td.get("data-field", "")])
    # the figures that tell the candidates apart are really in the table
    rejected = [td.text for td in cells if td.get("data-field") == "rejected"]
    assert rejected == [f"{p.rejected:,}" for p in comparison.policies]
    assert comparison.policies[1].rejected > comparison.policies[0].rejected


def _check_text(text: str, value: object, fmt: str) -> None:
    """What a person reads in a cell is the embedded value."""
    if value is None:
        assert text == "-"
    elif fmt == "int":
        assert int(text.replace(",", "")) == value, text
    elif fmt == "share":
        assert isinstance(value, float) and text.endswith(" %")
        assert abs(float(text[:-2]) - 100 * value) <= 0.05, (text, value)
    elif fmt == "seconds":
        assert isinstance(value, float) and text.endswith(" ms")
        assert abs(float(text[:-3]) - 1000 * value) <= 0.05, (text, value)
    else:
        assert text == value


def test_the_recommendation_table_is_the_embedded_recommendation(rec: Recommendation) -> None:
    root = _xml(report_html(recommendation=rec))
    (script,) = [s for s in root.iter("script") if s.get("id") == "ratekeeper-data"]
    data = json.loads(script.text or "")
    # as JSON values (to_json's tuples are JSON arrays)
    assert data["recommendation"] == json.loads(json.dumps(rec.to_json()))
    assert rec.comparison is not None and data["comparison"] == rec.comparison.to_json()
    table = next(t for t in root.iter("table") if t.get("id") == "recommendation")
    formats = {fld: fmt for _, fld, fmt in LIMIT_COLUMNS}
    cells = [td for td in table.iter("td") if td.get("data-field")]
    assert len(cells) == len(LIMIT_COLUMNS) * len(rec.limits) == len(LIMIT_COLUMNS)
    for td in cells:
        want = data["recommendation"]["limits"][int(td.get("data-limit", ""))][
            td.get("data-field", "")]
        assert json.loads(td.get("data-value", "")) == want
        _check_text(td.text or "", want, formats[td.get("data-field", "")])
    assert {td.get("data-field"): td.text for td in cells}["burst"] == "10"


def test_every_candidate_is_on_one_timeline_each_line_in_its_own_style_with_a_legend(
        comparison: Comparison) -> None:
    root = _xml(report_html(comparison))
    (svg,) = _svgs(root, "timeline")  # one chart for both candidates, not one each
    assert not _svgs(root, "series")
    first = comparison.policies[0].series
    n = len(first.offered)
    assert first.t0 is not None and comparison.last_t is not None
    assert n == math.floor((comparison.last_t - first.t0) / first.width) + 1 == 9
    (area,) = [e for e in svg.iter(f"{SVG}polygon") if e.get("data-series") == "offered"]
    assert json.loads(area.get("data-values", "")) == first.offered
    lines = list(svg.iter(f"{SVG}polyline"))
    drawn = {(pl.get("data-policy"), pl.get("data-series")) for pl in lines}
    want = {(p.name, "rejected") for p in comparison.policies} | {
        (p.name, "delayed") for p in comparison.policies if any(p.series.delayed)}
    assert drawn == want and len(lines) == len(want) >= 2
    # every line in a style of its own, and a legend entry each (and one for the area)
    styles = {(pl.get("stroke"), pl.get("stroke-dasharray")) for pl in lines}
    assert len(styles) == len(lines)
    legend = {g.get("data-legend") for g in svg.iter(f"{SVG}g") if g.get("data-legend")}
    assert legend == {"offered"} | {f"{name}: {kind}" for name, kind in want}
    fit: list[tuple[float, float]] = []
    for pl in lines:
        p = next(q for q in comparison.policies if q.name == pl.get("data-policy"))
        values = getattr(p.series, pl.get("data-series", ""))
        assert json.loads(pl.get("data-values", "")) == values
        pts = _points(pl)
        assert len(pts) == n
        steps = {round(b - a, 1) for (a, _), (b, _) in itertools.pairwise(pts)}
        assert len(steps) == 1 and steps.pop() > 0  # evenly spaced, in time order
        fit += [(v, y) for v, (_, y) in zip(values, pts, strict=True)]
    (v0, y0), (v1, y1) = min(fit), max(fit)
    slope = (y1 - y0) / (v1 - v0)
    for v, y in fit:  # one count scale for every line
        assert y == pytest.approx(y0 + slope * (v - v0), abs=0.02), (v, y)
    # the stricter candidate's line shows more rejected requests than the first's
    rej = {pl.get("data-policy"): sum(json.loads(pl.get("data-values", ""))) for pl in lines
           if pl.get("data-series") == "rejected"}
    assert rej == {p.name: p.rejected for p in comparison.policies}


def test_the_time_axis_is_wall_clock_at_clock_aligned_ticks() -> None:
    # a 2-day log: ticks at whole hours or days, labelled as times and dates, not seconds
    day = time_ticks(1_700_000_017.0, 1_700_000_017.0 + 2 * 86400)
    assert 3 <= len(day) <= 8
    assert all(t % 21600 == 0 for t, _ in day)
    assert [label for _, label in day][:2] == ["15 Nov 00:00", "06:00"]
    minutes = time_ticks(1_700_000_017.0, 1_700_000_017.0 + 600)
    assert all(t % 60 == 0 for t, _ in minutes)
    assert all(re.fullmatch(r"(\d\d \w{3} )?\d\d:\d\d", label) for _, label in minutes)
    days = time_ticks(1_700_000_000.0, 1_700_000_000.0 + 30 * 86400)
    assert all(re.fullmatch(r"\d\d \w{3}", label) for _, label in days)


def test_the_burst_histogram_counts_each_key_once_and_marks_the_chosen_burst(
        rec: Recommendation) -> None:
    (lim,) = rec.limits
    (svg,) = _svgs(_xml(report_html(recommendation=rec)), "bursts")
    bars = [r for r in svg.iter(f"{SVG}rect") if r.get("data-keys") is not None]
    assert sum(int(r.get("data-keys", "")) for r in bars) == lim.keys == 100
    # Independently: each client's required burst at the recommended rate, by a plain
    # loop over its own requests, counted in the bars' ranges.
    times: dict[str, list[float]] = {}
    for e in traffic():
        times.setdefault(e.client or "", []).append(e.t - 1_700_000_000.0)
    need = [max(1, math.ceil(required_burst(ts, lim.rate) - 1e-6)) for ts in times.values()]
    for r in bars:
        lo, hi = int(r.get("data-lo", "")), int(r.get("data-hi", ""))
        assert int(r.get("data-keys", "")) == sum(1 for b in need if lo <= b <= hi), (lo, hi)
    (marker,) = [ln for ln in svg.iter(f"{SVG}line") if ln.get("data-burst") is not None]
    assert int(marker.get("data-burst", "")) == lim.burst == 10
    mx = float(marker.get("x1", ""))
    left = sum(int(r.get("data-keys", "")) for r in bars
               if float(r.get("x", "")) + float(r.get("width", "")) <= mx)
    assert left == lim.keys - lim.keys_affected == 99  # admitted in full, left of the line
    # and the line is the boundary: no bar straddles it
    for r in bars:
        x0 = float(r.get("x", ""))
        assert x0 + float(r.get("width", "")) <= mx or x0 >= mx - 0.01, (mx, r.attrib)
    assert [(b.lo, b.hi, b.keys) for b in burst_bins(lim)] == [
        (int(r.get("data-lo", "")), int(r.get("data-hi", "")), int(r.get("data-keys", "")))
        for r in bars]


def test_the_tradeoff_curve_has_a_vertex_per_point_and_the_chosen_one_on_it(
        rec: Recommendation) -> None:
    (lim,) = rec.limits
    (svg,) = _svgs(_xml(report_html(recommendation=rec)), "tradeoff")
    lines = {float(pl.get("data-rate", "")): pl for pl in svg.iter(f"{SVG}polyline")}
    assert set(lines) == {p.rate for p in lim.curve} == {2.5, 5.0, 10.0}
    for r, pl in lines.items():
        pts = sorted((p for p in lim.curve if p.rate == r), key=lambda p: p.burst)
        assert json.loads(pl.get("data-bursts", "")) == [p.burst for p in pts]
        vs = _points(pl)
        assert len(vs) == len(pts)
        assert [x for x, _ in vs] == sorted(x for x, _ in vs)  # bursts left to right
        ys = [y for _, y in vs]
        shares = [p.share for p in pts]
        for (s0, y0), (s1, y1) in itertools.pairwise(zip(shares, ys, strict=True)):
            assert (s1 < s0) == (y1 > y0)  # fewer keys affected is lower on the chart
    (dot,) = list(svg.iter(f"{SVG}circle"))
    assert (int(dot.get("data-burst", "")), float(dot.get("data-share", ""))) == (10, 0.01)
    chosen = sorted((p for p in lim.curve if p.rate == lim.rate), key=lambda p: p.burst)
    i = [p.burst for p in chosen].index(lim.burst)
    assert _points(lines[lim.rate])[i] == (float(dot.get("cx", "")), float(dot.get("cy", "")))
    assert lines[lim.rate].get("stroke-width") == "3"  # the recommended rate stands out


def test_svg_files_are_the_reports_charts(tmp_path: Path, comparison: Comparison,
                                         rec: Recommendation) -> None:
    paths = write_svgs(tmp_path / "svg", comparison, rec)
    assert [p.name for p in paths] == ["timeline.svg", "bursts-per-client.svg",
                                       "tradeoff-per-client.svg"]
    inline = [ET.tostring(e).strip()
              for e in _xml(report_html(comparison, rec)).iter(f"{SVG}svg")]
    files = [ET.tostring(ET.parse(p).getroot()).strip() for p in paths]
    # the same drawings, the comparison's after the recommendation's in the page
    assert sorted(files) == sorted(inline)


def _png(path: Path) -> tuple[int, int, list[bytes]]:
    """A tiny PNG decoder (8-bit RGB or RGBA, not interlaced): width, height, the rows'
    pixels (no filter bytes)."""
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, ihdr = 8, b"", b""
    while pos < len(raw):
        (n,) = struct.unpack(">I", raw[pos:pos + 4])
        kind, body = raw[pos + 4:pos + 8], raw[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", ihdr)
    assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
    bpp = 3 if ctype == 2 else 4
    data = zlib.decompress(idat)
    stride = w * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(h):
        f = data[y * (stride + 1)]
        line = bytearray(data[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)
                           ) & 255
        rows.append(bytes(line if bpp == 3 else
                          b"".join(line[i:i + 3] for i in range(0, stride, 4))))
        prev = line
    return w, h, rows


def _colours(rows: list[bytes]) -> Counter[bytes]:
    return Counter(r[i:i + 3] for r in rows for i in range(0, len(r), 3))


def _rgb(hex_colour: str) -> bytes:
    return bytes.fromhex(hex_colour.lstrip("#"))


def test_png_pictures_are_drawn_with_the_plot_extra(tmp_path: Path,
                                                    rec: Recommendation) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra is in [test]; installed in CI")
    paths = write_pngs(tmp_path, recommendation=rec)
    assert [p.name for p in paths] == ["timeline.png", "bursts-per-client.png",
                                       "tradeoff-per-client.png"]
    w, h, rows = _png(paths[1])
    assert (w, h) == (1040, 420)  # readable: over 1000 px wide
    colours = _colours(rows)
    assert colours[_rgb(COLORS["bar"])] > 500  # the histogram's bars are drawn


def test_png_without_matplotlib_says_to_install_the_plot_extra(tmp_path: Path) -> None:
    # matplotlib made unimportable in the child, as on an install without the extra
    cli = [sys.executable, "-c", "import sys; sys.modules['matplotlib'] = None; "
           "from ratekeeper.cli import main; sys.exit(main())"]
    r = subprocess.run([*cli, "recommend", "--log", LOG, "--format", REPLAY_FORMAT,
                        "--png", str(tmp_path / "png")], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "pip install 'ratekeeper[plot]'" in r.stderr and "--svg" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "png").exists()
    assert r.stdout == ""  # refused before any work


def test_replay_and_recommend_write_the_report_beside_the_json(tmp_path: Path) -> None:
    pol = tmp_path / "p.toml"
    pol.write_text(textwrap.dedent(POLICIES))
    for cmd, extra in (("replay", ["--policies", "p.toml", "--policy", "per-client.burst=2"]),
                       ("recommend", [])):
        out = tmp_path / cmd
        out.mkdir()
        r = subprocess.run([*CLI, cmd, *extra, "--log", LOG, "--format", REPLAY_FORMAT,
                            "--json", str(out / "f.json"), "--html", str(out / "r.html"),
                            "--svg", str(out / "svg")], capture_output=True, text=True,
                           timeout=120, check=False, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert "admitted" in r.stdout  # the table is still printed
        js = json.loads((out / "f.json").read_text())
        root = _xml((out / "r.html").read_text())
        (script,) = list(root.iter("script"))
        data = json.loads(script.text or "")
        assert data["log"] == js.pop("log") and data["log"]["malformed"] == {"request": 1}
        if cmd == "replay":
            assert data["comparison"] == js and len(js["policies"]) == 2
        else:
            assert data["recommendation"] == js
            assert data["comparison"] == js["comparison"]
        names = sorted(p.name for p in (out / "svg").iterdir())
        assert names == sorted(f"{c}.svg" for c in (
            ["timeline"] if cmd == "replay" else
            ["timeline", "bursts-per-client", "tradeoff-per-client"])), names
    bad = subprocess.run([*CLI, "replay", "--policies", str(pol), "--log", LOG, "--format",
                          REPLAY_FORMAT, "--html", str(tmp_path / "no" / "such" / "r.html")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "cannot write the report" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr


def test_the_report_renders_in_headless_chromium(tmp_path: Path, comparison: Comparison,
                                                 rec: Recommendation) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        msg = ("chromium is not installed, so the HTML report was NOT rendered: "
               "apt-get install chromium (Debian's package; .ci/run installs it)")
        if os.environ.get("CI"):
            pytest.fail(f"under CI: {msg}")
        pytest.skip(msg)
    page = tmp_path / "report.html"
    page.write_text(report_html(comparison, rec), encoding="utf-8")
    shot = tmp_path / "shot.png"
    # No network: the flags that keep Chromium from calling home on a closed machine.
    r = subprocess.run([chromium, "--headless", "--disable-gpu", "--no-sandbox",
                        "--disable-background-networking", "--disable-component-update",
                        "--disable-sync", "--no-first-run", "--hide-scrollbars",
                        f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                        "--window-size=1200,1600", page.as_uri()],
                       capture_output=True, text=True, timeout=90, check=False)
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    w, h, rows = _png(shot)
    assert (w, h) == (1200, 1600)
    colours = _colours(rows)
    white = colours[b"\xff\xff\xff"]
    assert white < w * h * 0.97 and len(colours) > 50  # not blank, and text was drawn
    # The inline SVG was drawn: the histogram's bars and the chosen point's red are there
    # in their exact colours (solid fills, so some pixels are not anti-aliased).
    assert colours[_rgb(COLORS["bar"])] > 2000, colours.most_common(8)
    assert colours[_rgb(COLORS["chosen"])] > 20, colours.most_common(8)


def test_an_empty_log_still_makes_a_valid_report() -> None:
    c = compare([Candidate("x", parse_policies(per_client_policies()))], [])
    root = _xml(report_html(c))
    (svg,) = _svgs(root, "timeline")
    assert "no requests" in ET.tostring(svg, encoding="unicode")
    assert not list(svg.iter(f"{SVG}polyline"))
    r = recommend(lambda: [], target=0.99)
    data = json.loads(next(iter(_xml(report_html(recommendation=r)).iter("script"))).text or "")
    assert data["recommendation"]["limits"] == [] and data["comparison"] is None


def test_the_tradeoff_rates_each_have_a_style_and_a_legend_entry(rec: Recommendation) -> None:
    (svg,) = _svgs(_xml(report_html(recommendation=rec)), "tradeoff")
    lines = list(svg.iter(f"{SVG}polyline"))
    assert sorted(float(pl.get("data-rate", "")) for pl in lines) == [2.5, 5.0, 10.0]
    styles = {(pl.get("stroke"), pl.get("stroke-dasharray")) for pl in lines}
    assert len(styles) == 3  # the two comparison rates no longer share one style
    legend = {g.get("data-legend") for g in svg.iter(f"{SVG}g") if g.get("data-legend")}
    assert legend == {"2.5/s", "5/s (recommended)", "10/s"}


def test_counts_spanning_decades_are_on_a_log_axis_and_a_capped_key_shows(
        rec: Recommendation) -> None:
    (svg,) = _svgs(_xml(report_html(recommendation=rec)), "bursts")
    yticks = [t.text for t in svg.iter(f"{SVG}text") if t.get("data-tick") == "y"]
    assert {"1", "10", "100"} <= set(yticks)  # numbers, not powers of ten
    bars = {int(r.get("data-keys", "")): float(r.get("height", "")) for r in
            svg.iter(f"{SVG}rect") if r.get("data-keys") not in (None, "0")}
    assert set(bars) == {99, 1}  # 99 keys need 10, the heavy one 5,401
    assert bars[1] > 0.05 * bars[99]  # the capped key plainly visible (linear: 1 %)


def test_the_report_shows_the_clamped_lines_and_why_the_figures_are_not_exact(
        comparison: Comparison) -> None:
    log = {"lines": 1200, "malformed": {}, "clamped_lines": 37, "grown_order_window": 30.0}
    root = _xml(report_html(comparison, log=log))
    (warn,) = [e for e in root.iter("p") if e.get("id") == "clamped"]
    assert warn.get("data-lines") == "37"
    text = "".join(warn.itertext())
    assert "37 lines" in text and "not exact" in text and "grew to 30 s" in text
    clean = _xml(report_html(comparison, log={**log, "clamped_lines": 0}))
    assert not [e for e in clean.iter("p") if e.get("id") == "clamped"]


def test_the_report_lists_the_abusive_keys_left_out_of_the_proposal() -> None:
    evs = scanner_heavy()
    r = recommend(lambda: evs, target=1.0, replay=False)
    (lim,) = r.limits
    root = _xml(report_html(None, r))
    (table,) = [e for e in root.iter("table") if e.get("id") == "abusive-0"]
    rows = [[("".join(td.itertext())) for td in tr.iter("td")] for tr in table.iter("tr")][1:]
    assert sorted(row[0] for row in rows) == sorted(k for k, *_ in lim.abusive)
    assert len(rows) == 3 and all(row[1] == "200" and row[2] == "100.0 %" for row in rows)


def test_the_report_says_how_many_clients_are_not_addresses(tmp_path: Path) -> None:
    log = tmp_path / "hosts.log"
    log.write_text("\n".join(LINES) + "\n")
    pol = tmp_path / "p.toml"
    pol.write_text(BURST_2)
    html = tmp_path / "r.html"
    r = subprocess.run([*CLI, "replay", "--policies", str(pol), "--log", str(log),
                        "--html", str(html)], capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 0, r.stderr
    (p,) = [e for e in _xml(html.read_text()).iter("p") if e.get("id") == "named-clients"]
    assert (p.get("data-clients"), p.get("data-lines")) == ("5", "10")


def test_a_comparison_rate_whose_curve_is_the_recommended_ones_is_drawn_over_it() -> None:
    """Scanner-heavy traffic: every site client sends its burst at once, so at twice the
    rate each needs the same burst and the 2/s curve is the 1/s one; it is drawn after it,
    as wide, in a colour far from the blue, so its dots show on it."""
    evs = scanner_heavy()
    r = recommend(lambda: evs, target=0.99, replay=False)
    (svg,) = _svgs(_xml(report_html(recommendation=r)), "tradeoff")
    lines = {pl.get("data-rate"): pl for pl in svg.iter(f"{SVG}polyline")}
    assert lines["2"].get("points") == lines["1"].get("points")  # the two coincide
    order = [pl.get("data-rate") for pl in svg.iter(f"{SVG}polyline")]
    assert order.index("1") < order.index("2")
    assert float(lines["2"].get("stroke-width", "")) >= float(lines["1"].get(
        "stroke-width", ""))
    assert lines["2"].get("stroke") not in (lines["1"].get("stroke"), "#9467bd")
