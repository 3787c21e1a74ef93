"""docs/benchmarks.md and docs/img/bench-*.svg are what bench/make_benchmarks_doc.py makes from
the committed yardstick run, and every ratekeeper figure on the page is in that run's data.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    name = "_bench_make_benchmarks_doc"
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench/make_benchmarks_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_page_and_charts_are_what_the_committed_run_makes() -> None:
    mk = _script()
    made = mk.outputs()
    assert ROOT / "docs/benchmarks.md" in made
    charts = sorted(p.name for p in made if p.suffix == ".svg")
    assert charts == [f"bench-{s}.svg" for s in "abcd"], charts
    stale = [str(p.relative_to(ROOT)) for p, text in made.items()
             if not p.exists() or p.read_text(encoding="utf-8") != text]
    assert not stale, f"regenerate with: .venv/bin/python bench/make_benchmarks_doc.py ({stale})"
    # Each chart is on the page, and the page names its data.
    page = (ROOT / "docs/benchmarks.md").read_text(encoding="utf-8")
    for name in charts:
        assert f"](img/{name})" in page, name
    assert mk.results_file().relative_to(ROOT).as_posix() in page


def test_a_changed_figure_makes_the_page_stale(tmp_path: Path) -> None:
    mk = _script()
    data = json.loads(mk.results_file().read_text(encoding="utf-8"))
    row = next(r for r in data["A"]["hot"] if mk.is_ratekeeper(r["adapter"]))
    row["ratio_to_ref"] += 0.5
    changed = tmp_path / "changed-peer-bench.json"
    changed.write_text(json.dumps(data), encoding="utf-8")
    assert mk.stale() == []
    bad = mk.stale(changed)
    assert ROOT / "docs/benchmarks.md" in bad and ROOT / "docs/img/bench-a.svg" in bad, bad


def _doc_tables() -> dict[str, list[dict[str, str]]]:
    """{section letter: the rows of its first table, as {header: cell}} read from the page."""
    tables: dict[str, list[dict[str, str]]] = {}
    letter = ""
    header: list[str] | None = None
    for line in (ROOT / "docs/benchmarks.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"## ([A-E])\. ", line)
        if m:
            letter, header = m.group(1), None
            continue
        if not letter or not line.startswith("|"):
            if header is not None and letter in tables:
                letter = ""  # the section's first table is over
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-: "):
            tables.setdefault(letter, []).append(dict(zip(header, cells, strict=True)))
    return tables


def test_every_ratekeeper_row_on_the_page_is_in_the_data() -> None:
    mk = _script()
    data = mk.load()
    tables = _doc_tables()
    assert set(tables) == {"A", "B", "C", "D"}, set(tables)
    checked = 0
    for letter, rows in tables.items():
        for row in rows:
            name = row["adapter"].strip("`")
            if not mk.is_ratekeeper(name):
                continue
            if letter in ("A", "C"):
                key = "ratio_to_ref" if letter == "A" else "ratio_to_evalsha"
                col = "× ref" if letter == "A" else "× EVALSHA"
                for pattern, found in data[letter].items():
                    hit = [r for r in found if r["adapter"] == name]
                    assert len(hit) == 1, (letter, pattern, name)
                    assert row[f"{pattern}: {col}"] == f"{hit[0][key]:.3f}", (letter, name)
                    assert row[f"{pattern}: decisions/s"] == f"{hit[0]['median_per_s']:,.0f}"
            elif letter == "B":
                hit = [r for r in data["B"] if r["adapter"] == name]
                assert len(hit) == 1, name
                assert row["bytes/key"] == f"{hit[0]['bytes_per_key']:,.0f}", name
            else:
                hit = [r for r in data["D"]["rows"] if r["adapter"] == name]
                assert len(hit) == 1, name
                assert row["× EVALSHA"] == f"{hit[0]['ratio_to_evalsha']:.3f}", name
            checked += 1
    # Every ratekeeper contender the run measured has its row, so none was dropped either.
    measured = ({r["adapter"] for rows in data["A"].values() for r in rows}
                | {r["adapter"] for rows in data["C"].values() for r in rows}
                | {r["adapter"] for r in data["B"]} | {r["adapter"] for r in data["D"]["rows"]})
    on_page = {row["adapter"].strip("`") for rows in tables.values() for row in rows}
    assert {n for n in measured if mk.is_ratekeeper(n)} <= on_page
    assert checked >= 4


def test_check_reports_a_stale_chart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mk = _script()
    img, doc = tmp_path / "img", tmp_path / "benchmarks.md"
    img.mkdir()
    for p in (ROOT / "docs/img").glob("bench-*.svg"):
        shutil.copy(p, img / p.name)
    shutil.copy(ROOT / "docs/benchmarks.md", doc)
    monkeypatch.setattr(mk, "IMG", img)
    monkeypatch.setattr(mk, "DOC", doc)
    assert mk.main(["--check"]) == 0
    chart = img / "bench-c.svg"
    chart.write_text(chart.read_text(encoding="utf-8").replace("#1565c0", "#000000"),
                     encoding="utf-8")
    assert mk.main(["--check"]) == 1
    assert mk.stale() == [chart]
