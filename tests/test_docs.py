"""The documentation runs as written.

- Every ```python block of README.md and docs/*.md is executed on its own, in a fresh
  interpreter (a subprocess per block), from the repository root: a block that needs an
  import, an ``app`` or a server it does not create itself fails here. A block that is a
  deliberate fragment says so with ```python no-run; there are very few (`MAX_NO_RUN`).
- Every ```toml block is a policy file and must pass ``ratekeeper check-config``.
- Every command line of a ```sh / ```console block of README.md is listed in
  `README_COMMANDS` with the test that runs it; a command added to the README without a
  test fails `test_every_readme_command_is_exercised`.

Commands run here are taken from the README text itself (never retyped), with ``.venv/bin/``
mapped to the interpreter running the tests, so the README cannot drift from what is tested.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.service._proc import ServiceProcess

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
#: ``python -c`` rather than ``-m ratekeeper.cli``: see tests/service/_proc.py.
CLI = [sys.executable, "-c", "import sys; from ratekeeper.cli import main; sys.exit(main())"]
MAX_NO_RUN = 2
BLOCK_TIMEOUT = 60

_FENCE = re.compile(r"^\s*```(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    flags: tuple[str, ...]
    text: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        info = m.group("info").split()
        start, body = i, []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        assert i < len(lines), f"{path.name}:{start + 1}: unclosed code block"
        out.append(Block(path, start + 1, info[0] if info else "", tuple(info[1:]),
                         "\n".join(body) + "\n"))
        i += 1
    return out


ALL_BLOCKS = [b for p in DOCS for b in blocks_of(p)]
PYTHON = [b for b in ALL_BLOCKS if b.lang == "python" and "no-run" not in b.flags]
TOML = [b for b in ALL_BLOCKS if b.lang == "toml"]


def test_blocks_are_found() -> None:
    """The extraction itself works (a broken parser would make every test below vacuous)."""
    assert len(PYTHON) >= 8 and TOML
    readme = [b for b in ALL_BLOCKS if b.path.name == "README.md"]
    assert {"python", "sh"} <= {b.lang for b in readme}
    assert all(b.text.strip() for b in ALL_BLOCKS)


def test_few_blocks_are_marked_not_runnable() -> None:
    no_run = [b.id for b in ALL_BLOCKS if b.lang == "python" and "no-run" in b.flags]
    assert len(no_run) <= MAX_NO_RUN, no_run


@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_python_block_runs_as_written(block: Block) -> None:
    result = subprocess.run(
        [sys.executable, "-c", block.text], cwd=ROOT, capture_output=True, text=True,
        timeout=BLOCK_TIMEOUT, check=False, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"{block.id} failed:\n{block.text}\n{result.stderr}"


@pytest.mark.parametrize("block", TOML, ids=[b.id for b in TOML])
def test_toml_block_passes_check_config(block: Block, tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(block.text, encoding="utf-8")
    result = subprocess.run([*CLI, "check-config", str(path)], capture_output=True, text=True,
                            timeout=BLOCK_TIMEOUT, check=False)
    assert result.returncode == 0, f"{block.id}:\n{result.stdout}{result.stderr}"


# -- README command lines ----------------------------------------------------------------


def command_lines(block: Block) -> list[str]:
    """The commands of a sh/console block: continuations joined, comments and prompts dropped."""
    out: list[str] = []
    pending = ""
    for raw in block.text.splitlines():
        line = raw.rstrip()
        if block.lang == "console":
            if not (line.startswith("$ ") or pending):
                continue  # output, not a command
            line = line.removeprefix("$ ")
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        command = (pending + line.strip()).split("  #", 1)[0].strip()
        pending = ""
        out.append(command)
    return out


README_BLOCKS = [b for b in ALL_BLOCKS if b.path.name == "README.md"]
README_CMDS = [c for b in README_BLOCKS if b.lang in ("sh", "console") for c in command_lines(b)]

#: README command (its start, as written) -> the test that runs it.
README_COMMANDS = {
    # The set-up line: venv + editable install + serve. The pip install is what .ci/run does
    # (with '.[test]', a superset of '.[service]'); the serve part runs here.
    "python3 -m venv .venv && .venv/bin/pip install -e '.[service]' && .venv/bin/ratekeeper serve":
        "tests/test_docs.py::test_readme_serve_and_curl",
    # .ci/run is CI itself; its last step is the suite this file is part of.
    "bash .ci/run": ".ci/run",
    "curl -s -X POST localhost:8080/v1/check": "tests/test_docs.py::test_readme_serve_and_curl",
    "ratekeeper simulate gcra --rate 5/s": "tests/test_docs.py::test_readme_simulate_summary",
    ".venv/bin/python -m pytest tests/unit -q": "tests/test_docs.py::test_readme_unit_test_command",
    ".venv/bin/python tests/conformance/check.py tests/conformance/cases":
        "tests/test_docs.py::test_readme_conformance_command",
    "python bench/bench_memory.py --quick": "tests/test_docs.py::test_readme_bench_command",
    ".venv/bin/pip install -e '.[examples]'":
        "tests/http/test_examples.py::test_examples_extra_provides_every_import",
    ".venv/bin/uvicorn examples.fastapi_app:app":
        "tests/http/test_examples.py::test_documented_uvicorn_command_ignores_spoofed_forwarding",
}


def readme_command(start: str) -> str:
    found = [c for c in README_CMDS if c.startswith(start)]
    assert len(found) == 1, f"README should have one command starting {start!r}: {found}"
    return found[0]


def test_every_readme_command_is_exercised() -> None:
    covered = {c: next((s for s in README_COMMANDS if c.startswith(s)), None)
               for c in README_CMDS}
    assert all(covered.values()), [c for c, s in covered.items() if s is None]
    assert set(covered.values()) == set(README_COMMANDS), "README_COMMANDS lists a gone command"
    for target in README_COMMANDS.values():
        if "::" in target:
            file, name = target.split("::")
            assert f"def {name}(" in (ROOT / file).read_text(encoding="utf-8"), target


def in_env(command: str) -> str:
    """`command` as the README writes it, run with this interpreter's environment."""
    return command.replace(".venv/bin/", f"{BIN}/")


def run_readme(command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(["bash", "-c", in_env(command)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL)


def test_readme_simulate_summary() -> None:
    cmd = readme_command("ratekeeper simulate gcra --rate 5/s")
    result = run_readme(cmd)
    assert result.returncode == 0, result.stderr
    trace = ROOT / shlex.split(cmd)[shlex.split(cmd).index("--trace") + 1]
    keys = {json.loads(line)["key"] for line in trace.read_text().splitlines() if line.strip()}
    for key in keys:  # one summary line per key of the trace
        assert key in result.stdout, (key, result.stdout)


def test_readme_unit_test_command() -> None:
    # Collected, not run: the suite that contains this test runs tests/unit already.
    result = run_readme(readme_command(".venv/bin/python -m pytest tests/unit") +
                        " --collect-only -p no:cacheprovider")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b\d{2,} tests collected\b", result.stdout), result.stdout[-500:]


def test_readme_bench_command() -> None:
    # The README's --quick, made smaller still: this proves the command runs, not a figure.
    result = run_readme(readme_command("python bench/bench_memory.py --quick") +
                        " --rounds 1 --calls 500 --keys-mem 500")
    assert result.returncode == 0, result.stderr
    assert "ratekeeper" in result.stdout


CASES = ROOT / "tests" / "conformance" / "cases"


def test_readme_conformance_command() -> None:
    result = run_readme(readme_command(".venv/bin/python tests/conformance/check.py"))
    events = sum(len(json.loads(p.read_text())["expected"]) for p in CASES.glob("*.json"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    assert result.stdout.splitlines()[-1] == f"{events} passed, 0 failed"


def test_conformance_command_fails_on_a_broken_case(tmp_path: Path) -> None:
    """The same command on a copy of two cases, one with a decision flipped: exit 1, and
    only the broken case is reported."""
    good, bad = sorted(CASES.glob("*.json"))[:2]
    shutil.copy(good, tmp_path / good.name)
    case = json.loads(bad.read_text())
    case["expected"][0]["allowed"] = not case["expected"][0]["allowed"]
    (tmp_path / bad.name).write_text(json.dumps(case))
    cmd = readme_command(".venv/bin/python tests/conformance/check.py")
    result = run_readme(cmd.replace("tests/conformance/cases", str(tmp_path)))
    assert result.returncode == 1, result.stdout + result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and case["name"] in failed[0], result.stdout
    assert result.stdout.splitlines()[-1].endswith(" passed, 1 failed")


def test_readme_serve_and_curl(tmp_path: Path) -> None:
    """The first set-up command's ``serve`` part and the README's curl, against each other."""
    setup = readme_command("python3 -m venv .venv")
    serve = shlex.split(setup.split("&&")[-1])
    assert serve[0].endswith("ratekeeper") and serve[1] == "serve", serve
    config = ROOT / serve[serve.index("--config") + 1]

    curl = shlex.split(readme_command("curl "))
    url = next(a for a in curl if "/v1/" in a)
    headers = dict(h.split(": ", 1) for h in (curl[i + 1] for i, a in enumerate(curl)
                                               if a == "-H"))
    body = curl[curl.index("-d") + 1]
    method = curl[curl.index("-X") + 1]
    # The README's ports are the defaults; the test lets the OS pick free ones.
    assert url.startswith("localhost:8080/"), url
    with ServiceProcess(config, tmp_path / "service.log") as svc:
        r = httpx.request(method, svc.http + url.removeprefix("localhost:8080"),
                          headers=headers, content=body, timeout=10)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["allowed"] is True and doc["code"] == "OK", doc  # alice's first request


# -- examples/ ---------------------------------------------------------------------------


def test_examples_parse() -> None:
    """Every example is valid Python (the apps themselves run in tests/http/test_examples.py)."""
    for path in (ROOT / "examples").rglob("*.py"):
        ast.parse(path.read_text(encoding="utf-8"), str(path))
