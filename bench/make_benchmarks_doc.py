"""docs/benchmarks.md and its charts, made from one committed run of the peer yardstick.

The yardstick (`../shared/peer-bench/run.py`, see its README) writes its results as JSON under
$RLBENCH_HOME/results/. One full run of it is kept in bench/results/<date>-peer-bench.json
(`--import` copies it there, with the load average taken before and after the run), and this
script turns the newest such file into:

- docs/benchmarks.md: the run (command, commit, machine, versions, load average), then one
  table per section with every contender's ratio to the ceiling measured in the same run;
- docs/img/bench-<section>.svg: one bar chart per section, hand-written SVG (no plotting
  library), ratekeeper's rows in blue, the peers' in grey.

    .venv/bin/python bench/make_benchmarks_doc.py            # rewrite the page and charts
    .venv/bin/python bench/make_benchmarks_doc.py --check    # exit 1 if any is stale
    .venv/bin/python bench/make_benchmarks_doc.py --import "$RLBENCH_HOME/results/latest.json" \\
        --load-before "$(cat /proc/loadavg)" --load-after "..." --commit 31548cc

tests/test_benchmarks_doc.py runs the check, so the page cannot drift from the data.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
IMG = ROOT / "docs" / "img"
SUFFIX = "-peer-bench.json"

Row = dict[str, Any]


def results_file() -> Path:
    """The newest committed run (files are named by date, so the last name is the newest)."""
    runs = sorted(RESULTS.glob(f"*{SUFFIX}"))
    if not runs:
        raise SystemExit(f"no {RESULTS.relative_to(ROOT)}/*{SUFFIX}: import a run first (--import)")
    return runs[-1]


def load(path: Path | None = None) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path or results_file()).read_text(encoding="utf-8"))
    return data


def is_ratekeeper(name: str) -> bool:
    return name.startswith(("ratekeeper/", "ratekeeper-aio/"))


def is_reference(name: str) -> bool:
    """The yardstick's ceilings (a bare loop, a bare EVALSHA or PING): not peers."""
    return name.startswith(("reference/", "ceiling/"))


# ---------------------------------------------------------------- numbers

def ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def count(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


def spread(row: Row) -> str:
    """Half the interquartile range of the per-round ratios, relative to their median (of the
    rates for the anchor row, whose ratios are all 1): the yardstick's own report does the same."""
    xs = row.get("ratios")
    if not xs or len(set(xs)) <= 1:
        xs = row.get("rates")
    if not xs or len(xs) < 4:
        return ""
    q1, med, q3 = statistics.quantiles(xs, n=4)
    return f"±{(q3 - q1) / 2 / med * 100:.0f}%" if med else ""


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: int = 1) -> str:
    """A Markdown table; the columns from `right` on are numbers, aligned right."""
    align = ["---" if i < right else "---:" for i in range(len(headers))]
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _by_adapter(section: dict[str, list[Row]]) -> dict[str, dict[str, Row]]:
    """{adapter: {pattern: row}} in the order the run measured them."""
    by: dict[str, dict[str, Row]] = {}
    for pattern, rows in section.items():
        for row in rows:
            by.setdefault(row["adapter"], {})[pattern] = row
    return by


def best(rows: dict[str, float | None]) -> tuple[tuple[str, float] | None, tuple[str, float] | None]:
    """The highest ratekeeper figure and the highest peer figure (references left out)."""
    rk = [(n, v) for n, v in rows.items() if v is not None and is_ratekeeper(n)]
    peers = [(n, v) for n, v in rows.items()
             if v is not None and not is_ratekeeper(n) and not is_reference(n)]
    key = lambda nv: nv[1]  # noqa: E731
    return (max(rk, key=key) if rk else None), (max(peers, key=key) if peers else None)


def _best_line(label: str, rows: dict[str, float | None], fmt: str = "{:.3f}") -> str:
    rk, peer = best(rows)
    if rk is None or peer is None:
        return ""
    return (f"{label}: best ratekeeper row `{rk[0]}` {fmt.format(rk[1])}, best peer "
            f"`{peer[0]}` {fmt.format(peer[1])} (ratekeeper ÷ peer = {rk[1] / peer[1]:.2f}).")


# ---------------------------------------------------------------- sections

def section_a(a: dict[str, list[Row]]) -> tuple[str, str]:
    pats = list(a)
    by = _by_adapter(a)
    hdr = ["adapter", "algorithm"]
    for p in pats:
        hdr += [f"{p}: decisions/s", f"{p}: × ref", f"{p}: spread"]
    rows = []
    for name, d in by.items():
        first = next(iter(d.values()))
        r = [f"`{name}`", first.get("algorithm", "")]
        for p in pats:
            x = d.get(p, {})
            r += [count(x.get("median_per_s")), ratio(x.get("ratio_to_ref")), spread(x)]
        rows.append(r)
    lines = [_best_line(f"`{p}`", {n: d.get(p, {}).get("ratio_to_ref") for n, d in by.items()})
             for p in pats]
    md = "\n".join([
        "## A. In memory, one thread",
        "",
        "Decisions per second through each library's public call, and the paired ratio to the "
        "ceiling `reference/bare-loop` (`monotonic()` + `dict.get` + compare + float store, "
        "inline) measured in the same rounds: 1.000 = as cheap as the bare loop. "
        f"{_pattern_note(pats)}",
        "",
        _table(hdr, rows, right=2),
        "",
        *[f"- {line}" for line in lines if line],
        "",
        "![Section A: ratio to the bare loop](img/bench-a.svg)",
        "",
    ])
    series = [(p, {n: d.get(p, {}).get("ratio_to_ref") for n, d in by.items()}) for p in pats]
    return md, bar_chart("A. In memory: decisions/s as a ratio to the bare loop (1.0)",
                         series, "{:.3f}")


def _pattern_note(pats: Sequence[str]) -> str:
    known = {"hot": "`hot`: one key at 100/s (mostly denials)",
             "100k": "`100k`: 100,000 keys round-robin (mostly admits)",
             "10k": "`10k`: 10,000 keys round-robin"}
    notes = [known.get(p, f"`{p}`") for p in pats]
    return "; ".join(notes) + "." if notes else ""


def section_b(b: list[Row]) -> tuple[str, str]:
    ref = next((x for x in b if x.get("adapter") == "reference/gcra-func"), None)
    refb = ref.get("bytes_per_key") if ref else None
    rows = []
    per_key: dict[str, float | None] = {}
    for x in b:
        name = x["adapter"]
        if "error" in x:
            rows.append([f"`{name}`", "error: " + str(x["error"])[:80].replace("|", "/")]
                        + [""] * 6)
            continue
        bpk = x["bytes_per_key"]
        kept = x.get("entries_after_fill")
        # A store that forgot most keys (an LRU of 1,024) has no per-key figure to compare.
        if kept is None or kept >= x["keys_hit"]:
            per_key[name] = bpk
        rf = x.get("reclaimed_fraction")
        freed = "–" if rf is None else f"{round(rf * 100)} %"  # an int: no "-0 %"
        rows.append([
            f"`{name}`",
            f"{x['keys_hit']:,}" + (" (capped)" if x.get("capped") else ""),
            count(kept), count(bpk), ratio(bpk / refb) if refb else "–",
            f"{x['fill_s']:.1f}",
            f"{count(x.get('entries_reclaim_fill'))} → {count(x.get('entries_after_wait'))}",
            freed,
        ])
    # Fewer bytes is better here, so the best of each side is its smallest figure.
    smallest = {n: (-v if v is not None else None) for n, v in per_key.items()}
    rk, peer = best(smallest)
    line = ""
    if rk and peer:
        line = (f"- Bytes per key: smallest ratekeeper row `{rk[0]}` {-rk[1]:,.0f}, smallest peer "
                f"`{peer[0]}` {-peer[1]:,.0f}.")
    md = "\n".join([
        "## B. In memory, footprint",
        "",
        "A fresh process per contender fills up to 1,000,000 keys (for at most the yardstick's "
        "fill cap, then `capped`); bytes per key is the growth of the resident set divided by "
        "the keys hit, `× ref` its ratio to `reference/gcra-func` (a dict of floats). The "
        "reclaim test: 100,000 keys left idle past their window, then traffic on new keys; "
        "objects freed is the share of their records gone afterwards. A store that kept fewer "
        "records than keys (`throttled-py`'s default `MemoryStore` is an LRU of 1,024 keys) "
        "forgot the rest: its bytes per key is not comparable and is left out of the chart.",
        "",
        _table(["adapter", "keys hit", "records kept", "bytes/key", "× ref", "fill s",
                "reclaim: records (100k keys → after window + traffic)",
                "objects freed after window"], rows),
        "",
        line,
        "",
        "![Section B: bytes per key](img/bench-b.svg)",
        "",
    ])
    return md, bar_chart("B. In memory: bytes per key at up to 1M keys (fewer is better)",
                         [("bytes/key", per_key)], "{:,.0f}")


def section_c(c: dict[str, list[Row]]) -> tuple[str, str]:
    pats = list(c)
    by = _by_adapter(c)
    hdr = ["adapter"]
    for p in pats:
        hdr += [f"{p}: decisions/s", f"{p}: × EVALSHA", f"{p}: spread"]
    hdr += ["round trips/decision (hot)", "Lua commands (hot)", "round trips, new key"]
    rows = []
    for name, d in by.items():
        r = [f"`{name}`"]
        for p in pats:
            x = d.get(p, {})
            r += [count(x.get("median_per_s")), ratio(x.get("ratio_to_evalsha")), spread(x)]
        w = d.get(pats[0], {}).get("wire_hot") or {}
        f = d.get(pats[0], {}).get("wire_new_key") or {}
        r += [_num2(w.get("round_trips")), _num2(w.get("lua_commands")),
              _num2(f.get("round_trips"))]
        rows.append(r)
    lines = [_best_line(f"`{p}`", {n: d.get(p, {}).get("ratio_to_evalsha") for n, d in by.items()})
             for p in pats]
    md = "\n".join([
        "## C. Redis, synchronous, one connection",
        "",
        "Sequential decisions on one connection, as a paired ratio to a redis-py `EVALSHA` of "
        f"`return 1` (the same round trip, no work): 1.000 = as fast as that. {_pattern_note(pats)}",
        "",
        _table(hdr, rows),
        "",
        *[f"- {line}" for line in lines if line],
        "",
        "![Section C: ratio to a bare EVALSHA](img/bench-c.svg)",
        "",
    ])
    series = [(p, {n: d.get(p, {}).get("ratio_to_evalsha") for n, d in by.items()}) for p in pats]
    return md, bar_chart("C. Redis sync: decisions/s as a ratio to a bare EVALSHA (1.0)",
                         series, "{:.3f}")


def _num2(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def section_d(d: dict[str, Any]) -> tuple[str, str]:
    rows = []
    fig: dict[str, float | None] = {}
    for x in d["rows"]:
        w = x.get("wire_hot") or {}
        fig[x["adapter"]] = x.get("ratio_to_evalsha")
        rows.append([f"`{x['adapter']}`", count(x.get("median_per_s")),
                     ratio(x.get("ratio_to_evalsha")), spread(x), _num2(w.get("commands")),
                     str(x.get("errors", 0))])
    bench = d.get("redis_benchmark") or []
    extra: list[str] = []
    if bench:
        extra = ["`redis-benchmark -c 64` on the same server (its own ceiling, not a ratio):", "",
                 _table(["case", "requests/s", "spread"],
                        [[x["case"], count(x.get("median_per_s")), spread(x)] for x in bench]),
                 ""]
    line = _best_line("64 tasks, hot key", fig)
    md = "\n".join([
        f"## D. Redis, asyncio, {d.get('tasks', 64)} concurrent tasks",
        "",
        f"{d.get('tasks', 64)} tasks on one event loop deciding on one hot key, as a paired ratio "
        "to redis.asyncio `EVALSHA` of `return 1` from the same number of tasks. Above 1.0 means "
        "more decisions per second than the bare script calls (a library that pipelines "
        "concurrent decisions can get there).",
        "",
        _table(["adapter", "decisions/s", "× EVALSHA", "spread", "commands/decision (hot)",
                "errors"], rows),
        "",
        f"- {line}" if line else "",
        "",
        *extra,
        "![Section D: ratio to a bare async EVALSHA](img/bench-d.svg)",
        "",
    ])
    return md, bar_chart(f"D. Redis asyncio, {d.get('tasks', 64)} tasks: ratio to a bare "
                         "EVALSHA (1.0)", [("hot", fig)], "{:.3f}")


# ---------------------------------------------------------------- chart

W = 760
LABEL_W = 300
BAR_H = 11
GAP = 7
TOP = 48
RIGHT = 70
INK = "#222222"
GRID = "#dddddd"
#: (ratekeeper, peer, reference) colour of each series, darker first.
COLOURS = [("#1565c0", "#757575", "#000000"), ("#90caf9", "#bdbdbd", "#616161")]


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def bar_chart(title: str, series: Sequence[tuple[str, dict[str, float | None]]],
              fmt: str) -> str:
    """Horizontal bars, one group per adapter (sorted by the first series, highest first),
    one bar per series; a value label at each bar's end."""
    names = list(dict.fromkeys(n for _, values in series for n in values))
    first = series[0][1]
    names.sort(key=lambda n: -(first.get(n) or 0.0))
    top = max((v for _, values in series for v in values.values() if v is not None),
              default=1.0) or 1.0
    group = len(series) * BAR_H + GAP
    legend_h = 18 if len(series) > 1 else 0
    h = TOP + legend_h + group * len(names) + 30
    plot_w = W - LABEL_W - RIGHT
    y0 = TOP + legend_h

    def x(v: float) -> float:
        return LABEL_W + plot_w * v / top

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" '
        f'viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="11">',
        f"<title>{_esc(title)}</title>",
        f'<rect width="{W}" height="{h}" fill="#ffffff"/>',
        f'<text x="10" y="20" font-size="14" fill="{INK}">{_esc(title)}</text>',
        f'<rect x="10" y="30" width="10" height="10" fill="{COLOURS[0][0]}"/>'
        f'<text x="24" y="39" fill="{INK}">ratekeeper</text>'
        f'<rect x="100" y="30" width="10" height="10" fill="{COLOURS[0][1]}"/>'
        f'<text x="114" y="39" fill="{INK}">peers</text>'
        f'<rect x="165" y="30" width="10" height="10" fill="{COLOURS[0][2]}"/>'
        f'<text x="179" y="39" fill="{INK}">reference (ceiling)</text>',
    ]
    if len(series) > 1:
        lx = 320
        for i, (label, _) in enumerate(series):
            out.append(f'<rect x="{lx}" y="{TOP - 2}" width="10" height="10" '
                       f'fill="{COLOURS[i % 2][0]}"/>'
                       f'<text x="{lx + 14}" y="{TOP + 7}" fill="{INK}">{_esc(label)}</text>')
            lx += 30 + 7 * len(label)
    # grid: five steps of the scale
    for k in range(6):
        v = top * k / 5
        gx = f"{x(v):.1f}"
        out.append(f'<line x1="{gx}" y1="{y0 - 4}" x2="{gx}" y2="{h - 26}" stroke="{GRID}"/>')
        out.append(f'<text x="{gx}" y="{h - 12}" text-anchor="middle" fill="#777777">'
                   f"{_esc(fmt.format(v))}</text>")
    for i, name in enumerate(names):
        gy = y0 + i * group
        kind = 0 if is_ratekeeper(name) else 2 if is_reference(name) else 1
        weight = ' font-weight="bold"' if kind == 0 else ""
        out.append(f'<text x="{LABEL_W - 6}" y="{gy + len(series) * BAR_H / 2 + 4:.1f}" '
                   f'text-anchor="end" fill="{INK}"{weight}>{_esc(name)}</text>')
        for j, (_, values) in enumerate(series):
            val = values.get(name)
            by = gy + j * BAR_H
            if val is None:
                out.append(f'<text x="{LABEL_W + 2}" y="{by + 9}" fill="#777777">–</text>')
                continue
            colour = COLOURS[j % 2][kind]
            out.append(f'<rect x="{LABEL_W}" y="{by}" width="{x(val) - LABEL_W:.1f}" '
                       f'height="{BAR_H - 1}" fill="{colour}"/>'
                       f'<text x="{x(val) + 3:.1f}" y="{by + 9}" fill="{INK}">'
                       f"{_esc(fmt.format(val))}</text>")
    out.append(f'<line x1="{LABEL_W}" y1="{y0 - 4}" x2="{LABEL_W}" y2="{h - 26}" stroke="{INK}"/>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- page

SECTIONS: dict[str, Callable[[Any], tuple[str, str]]] = {"A": section_a, "B": section_b, "C": section_c, "D": section_d}


def page(res: dict[str, Any], source: str) -> tuple[str, dict[str, str]]:
    """The page's Markdown and {section letter: SVG}."""
    meta = res.get("meta", {})
    run = res.get("run", {})
    m = dict(meta.get("machine", {}))
    load = m.pop("loadavg_at_start", None)
    vers = meta.get("versions", {})
    head = [
        "# Benchmarks",
        "",
        "<!-- Generated by bench/make_benchmarks_doc.py from " + source + ": do not edit by "
        "hand; tests/test_benchmarks_doc.py fails when this page or its charts differ from "
        "what the script makes from the data. -->",
        "",
        "ratekeeper next to `limits`, `throttled-py`, `pyrate-limiter`, `token-bucket` and "
        "`aiolimiter`, measured with one yardstick (`../shared/peer-bench/`) in **one full "
        "run**, interleaved, each figure a ratio to a ceiling measured in that same run, so the "
        "figures survive a noisy machine better than absolute rates do. Compare ratios, not "
        "decisions per second across runs. The scripts of [bench/](../bench/README.md) measure "
        "other things (the middleware, the service, Envoy, replay).",
        "",
        f"The data: [`{source}`](../{source}). The page and the charts: "
        "`.venv/bin/python bench/make_benchmarks_doc.py`.",
        "",
        "## The run",
        "",
        f"- Command, from a clean clone of commit `{run.get('commit', '?')}`: "
        f"`{run.get('command', meta.get('command', '?'))}`",
        f"- The yardstick's own command line: `{meta.get('command', '?')}`",
        f"- Started {meta.get('started', '?')}, {meta.get('duration_s', 0):.0f} s, "
        f"{meta.get('reps', '?')} rounds per figure" + (" (quick)" if meta.get("quick") else ""),
        "- Machine: " + ", ".join(f"{k} {v}" for k, v in m.items()),
    ]
    if run.get("load_before") or run.get("load_after"):
        head.append(f"- Load average (1, 5, 15 min): {run.get('load_before', '?')} before, "
                    f"{run.get('load_after', '?')} after; no other benchmark was running")
    elif load:
        head.append("- Load average at start (1, 5, 15 min): "
                    + ", ".join(f"{v:.2f}" for v in load))
    pin = meta.get("pinning")
    if pin:
        head.append(f"- CPU placement (A, C, D): the measured process and redis-server on CPU "
                    f"{pin['active']}, the coordinator parked on CPU {pin['idle']}")
    if vers:
        head.append("- Versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    head += ["", "Spread is half the interquartile range of the per-round ratios, relative to "
             "their median.", ""]
    body: list[str] = []
    svgs: dict[str, str] = {}
    for letter, make in SECTIONS.items():
        if res.get(letter):
            md, svg = make(res[letter])
            body.append(md)
            svgs[letter] = svg
    text = "\n".join(head + body)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.rstrip("\n") + "\n", svgs


def outputs(path: Path | None = None) -> dict[Path, str]:
    """Every generated file and the text it must have now."""
    path = path or results_file()
    source = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    md, svgs = page(load(path), source)
    out = {DOC: md}
    for letter, svg in svgs.items():
        out[IMG / f"bench-{letter.lower()}.svg"] = svg
    return out


def stale(path: Path | None = None) -> list[Path]:
    return [p for p, text in outputs(path).items()
            if not p.exists() or p.read_text(encoding="utf-8") != text]


def import_run(src: Path, load_before: str, load_after: str, commit: str,
               command: str) -> Path:
    """Copy a yardstick results JSON into bench/results/, with what the JSON does not record."""
    res = json.loads(src.read_text(encoding="utf-8"))
    if res.get("meta", {}).get("quick"):
        raise SystemExit(f"{src} is a --quick run: commit full runs only")
    res["run"] = {"command": command, "commit": commit,
                  "load_before": load_before, "load_after": load_after}
    date = str(res["meta"]["started"])[:10]
    dest = RESULTS / f"{date}{SUFFIX}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    dest.write_text(_dump(res), encoding="utf-8")
    return dest


def _dump(res: dict[str, Any]) -> str:
    """Indented JSON with each list of numbers (the per-round figures) on one line: a third
    of the size, and a later run's diff still reads figure by figure."""
    text = json.dumps(res, indent=1)
    number_list = re.compile(r"\[\s*(-?[\d.eE+-]+(?:,\s*-?[\d.eE+-]+)*)\s*\]")
    return number_list.sub(lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",")
                           + "]", text) + "\n"


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT) else str(p)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the page or a chart is stale")
    ap.add_argument("--import", dest="src", type=Path,
                    help="a yardstick results JSON to copy into bench/results/ first")
    ap.add_argument("--load-before", default="", help="with --import: load average before")
    ap.add_argument("--load-after", default="", help="with --import: load average after")
    ap.add_argument("--commit", default="", help="with --import: the commit measured")
    ap.add_argument("--command", default="", help="with --import: the command that was run")
    args = ap.parse_args(argv)
    if args.src:
        dest = import_run(args.src, args.load_before, args.load_after, args.commit, args.command)
        print(f"wrote {dest.relative_to(ROOT)}")
    if args.check:
        bad = stale()
        for p in bad:
            print(f"stale: {_rel(p)} (run bench/make_benchmarks_doc.py)")
        return 1 if bad else 0
    IMG.mkdir(exist_ok=True)
    for p, text in outputs().items():
        p.write_text(text, encoding="utf-8")
        print(f"wrote {_rel(p)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
