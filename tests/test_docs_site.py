"""The documentation site builds with warnings as errors, and its pictures are current.

- `mkdocs build --strict` of mkdocs.yml (a broken link or anchor, a page missing from the nav,
  a docstring mkdocstrings cannot render: any warning fails it);
- the same configuration really fails on each kind of defect (a copy of docs/ with one of each);
- the timeline pictures and tables of docs/algorithms/ are exactly what
  docs/_gen/make_timelines.py makes now from the algorithms.

mkdocs comes with the ``test`` extra (through ``docs``), so CI always builds the site. Without
it, these tests are skipped with a loud reason on a developer's machine and FAIL under CI.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ratekeeper import ALGORITHMS

ROOT = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT = 120


def _need_mkdocs() -> None:
    missing = [m for m in ("mkdocs", "material", "mkdocstrings_handlers.python")
               if importlib.util.find_spec(m.split(".")[0]) is None]
    if not missing:
        return
    why = (f"THE DOCUMENTATION SITE IS NOT BUILT: {', '.join(missing)} not installed "
           f"(pip install -e '.[docs]')")
    if os.environ.get("CI"):
        pytest.fail(why + "; CI installs the test extra, which must bring them")
    pytest.skip(why)


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "NO_COLOR": "1"}
    return subprocess.run(
        # Not -q: it silences warnings, and strict mode then has none to count.
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
         "-d", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False)


def test_site_builds_strict_with_no_warning(tmp_path: Path) -> None:
    _need_mkdocs()
    site = tmp_path / "site"
    r = _mkdocs(ROOT / "mkdocs.yml", site)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "WARNING" not in out, out
    # Every page of the nav was written, the generated ones included.
    for page in ("index", "guide/index", "benchmarks/index", "algorithms/gcra/index",
                 "api/ratekeeper/index", "policies/index", "replay/index"):
        assert (site / f"{page}.html").is_file() or (site / page / "index.html").is_file(), page
    # The API reference comes from the docstrings.
    api = (site / "api/ratekeeper/index.html").read_text(encoding="utf-8")
    assert 'id="ratekeeper.Limiter"' in api and "Rate limits for synchronous code." in api
    # A link to a file outside docs/ (docs/http.md -> ../examples/fastapi_app.py) leads to a
    # page that shows that file.
    shown = (site / "repo/examples/fastapi_app.py/index.html").read_text(encoding="utf-8")
    assert "<code>examples/fastapi_app.py</code>" in shown and "FastAPI" in shown
    assert "repo/examples/fastapi_app.py/" in (site / "http/index.html").read_text("utf-8")
    # The timeline pictures are served.
    assert (site / "img/timeline-leaky-bucket.svg").is_file()


def test_strict_build_fails_on_each_kind_of_defect(tmp_path: Path) -> None:
    _need_mkdocs()
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("__pycache__"))
    with (docs / "index.md").open("a", encoding="utf-8") as f:
        f.write("\n[gone](no-such-page.md) [bad anchor](algorithms.md#no-such-heading)"
                " [gone outside](../examples/no_such_example.py)\n")
    (docs / "orphan.md").write_text("# Not in the nav\n", encoding="utf-8")
    # The project's configuration on the copy; without mkdocstrings, which is slow and
    # exercised by the full build above.
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\n"
        f"docs_dir: {docs}\n"
        f"hooks: [{ROOT / 'docs/_gen/hooks.py'}]\n"
        "plugins: [search]\n", encoding="utf-8")
    r = _mkdocs(config, tmp_path / "site")
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert re.search(r"WARNING.*no-such-page\.md", out), out
    assert re.search(r"WARNING.*no-such-heading", out), out
    assert re.search(r"WARNING.*no_such_example\.py", out), out
    assert re.search(r"WARNING.*not included in the \"nav\".*\n\s*- orphan\.md", out), out


def _tutorial_commands() -> list[str]:
    text = (ROOT / "docs/replay.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)
    return [c.strip() for b in blocks for c in b.replace("\\\n", " ").splitlines() if c.strip()]


@pytest.mark.parametrize("command", _tutorial_commands())
def test_replay_tutorial_commands_run_as_written(command: str) -> None:
    """The tutorial's commands, taken from its text, on the files it names."""
    argv = shlex.split(command)
    assert argv[0] == "ratekeeper", command
    cli = [sys.executable, "-c", "import sys; from ratekeeper.cli import main; sys.exit(main())"]
    r = subprocess.run([*cli, *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                       timeout=BUILD_TIMEOUT, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "admitted" in r.stdout, r.stdout


# ---------------------------------------------------------------- timelines

def _make_timelines() -> ModuleType:
    """A fresh copy of the script as a module (its dataclasses need it in sys.modules)."""
    name = "_docs_make_timelines"
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs/_gen/make_timelines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_timeline_pictures_and_tables_are_what_the_algorithms_make_now() -> None:
    mt = _make_timelines()
    stale = [str(p.relative_to(ROOT)) for p in mt.stale()]
    assert not stale, f"regenerate with: .venv/bin/python docs/_gen/make_timelines.py ({stale})"
    # Every algorithm has its page, its picture and a place in the site's nav.
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for name in ALGORITHMS:
        assert name in mt.LIMITS, name
        assert f"algorithms/{name}.md" in nav, name
        assert f"../img/timeline-{name}.svg" in (ROOT / f"docs/algorithms/{name}.md").read_text(
            encoding="utf-8"), name


def test_timeline_check_reports_a_stale_picture(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    mt = _make_timelines()
    img = tmp_path / "img"
    shutil.copytree(ROOT / "docs/img", img)
    monkeypatch.setattr(mt, "IMG", img)
    assert mt.main(["--check"]) == 0
    picture = img / "timeline-gcra.svg"
    picture.write_text(picture.read_text(encoding="utf-8").replace("#2e7d32", "#000000"),
                       encoding="utf-8")
    assert mt.main(["--check"]) == 1
    assert mt.stale() == [picture]


def test_timelines_show_the_documented_behaviour() -> None:
    """What docs/algorithms.md says, seen in the simulated trace (t = 0: a page load of 6)."""
    mt = _make_timelines()
    runs = {name: mt.simulate(limit) for name, (limit, _) in mt.LIMITS.items()}
    at0 = {name: [e for e in run.events if e.t == 0] for name, run in runs.items()}
    # The bucket starts full: burst 4 of the 6 pass, the others are rejected.
    assert [e.allowed for e in at0["token-bucket"]] == [True] * 4 + [False] * 2
    # GCRA decides exactly as the token bucket.
    assert runs["gcra"].events == runs["token-bucket"].events
    # nginx burst=3 at 2r/s: one served, three queued 0.5 s apart, then rejected.
    assert [(e.allowed, e.delay) for e in at0["leaky-bucket"]] == [
        (True, 0.0), (True, 0.5), (True, 1.0), (True, 1.5), (False, 0.0), (False, 0.0)]
    # Windows: the fixed window resets at t = 2, the sliding log lets the 4 slide out at 2.
    for name in ("fixed-window", "sliding-window-log"):
        first = [e for e in runs[name].events if 1 <= e.t < 2]
        assert first and not any(e.allowed for e in first), name
        assert [e.allowed for e in runs[name].events if e.t == 2] == [True], name
