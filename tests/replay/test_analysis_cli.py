"""``ratekeeper replay`` and ``ratekeeper recommend`` as a user runs them (a subprocess,
output piped): tables, --json equal to the API's figures, errors, malformed lines, stdin and
gzip, no progress bar when piped."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from ratekeeper.policy import load_policies
from ratekeeper.replay import Candidate, compare, read_log
from ratekeeper.replay._cli import Progress
from ratekeeper.replay._compare import client_resolver
from tests.replay.make_sample import REPLAY_FORMAT
from tests.replay.test_replay import POLICIES

DATA = Path(__file__).parent / "data"
CLI = [sys.executable, "-c", "import sys; from ratekeeper.cli import main; sys.exit(main())"]
LOG = str(DATA / "nginx-replay.log")


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([*CLI, *args], input=stdin, capture_output=True, timeout=120,
                       check=False)
    return subprocess.CompletedProcess(p.args, p.returncode, p.stdout.decode(),
                                       p.stderr.decode())


def test_replay_prints_the_table_and_writes_the_same_figures_as_json(tmp_path: Path) -> None:
    pol = tmp_path / "p.toml"
    pol.write_text(textwrap.dedent(POLICIES))
    out = tmp_path / "out.json"
    r = run("replay", "--policies", str(pol), "--policy", "per-client.burst=2",
            "--log", LOG, "--format", REPLAY_FORMAT, "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "clients affected" in r.stdout and "per-client.burst=2" in r.stdout
    js = json.loads(out.read_text())
    policies = load_policies(pol)
    with read_log(LOG, REPLAY_FORMAT) as events:
        api = compare([Candidate("x", policies)], events,
                      client_of=client_resolver(policies)).policies[0]
    first = js["policies"][0]
    assert (first["rejected"], first["clients_affected"], first["page_loads"]) == (
        api.rejected, api.clients_affected, api.page_loads)
    assert f"{api.rejected}" in r.stdout.splitlines()[4]
    assert js["policies"][1]["rejected"] > first["rejected"]
    # the sample's bad request line is reported, with an example, and is not fatal
    assert js["log"]["malformed"] == {"request": 1}
    assert "1 malformed (request 1)" in r.stderr and "HELLO" in r.stderr
    assert "\r" not in r.stderr and "events (" not in r.stderr  # no progress bar when piped


def test_recommend_reads_gzip_from_stdin_and_prints_the_proposal() -> None:
    raw = gzip.compress(Path(LOG).read_bytes())
    r = run("recommend", "--log", "-", "--format", REPLAY_FORMAT, "--target", "99%",
            "--json", "-", stdin=raw)
    assert r.returncode == 0, r.stderr
    js = json.loads(r.stdout)
    (lim,) = js["limits"]
    assert lim["name"] == "per-client" and lim["rate"] > 0 and lim["burst"] >= 1
    assert js["comparison"]["policies"][0]["name"] == "recommended"
    assert js["log"]["events"] == 301
    assert "\r" not in r.stderr


def test_recommend_surveys_a_policies_files_limits(tmp_path: Path) -> None:
    pol = tmp_path / "p.toml"
    pol.write_text(textwrap.dedent(POLICIES))
    r = run("recommend", "--policies", str(pol), "--log", LOG, "--format", REPLAY_FORMAT,
            "--target", "90")
    assert r.returncode == 0, r.stderr
    assert "per-client: gcra rate = " in r.stdout and "static: token-bucket" in r.stdout
    assert "as given" in r.stdout and "recommended" in r.stdout


def test_bad_inputs_get_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[http]\ndomain = "web"\ndescriptors = [["nope"]]\n')
    r = run("replay", "--policies", str(bad), "--log", LOG)
    assert r.returncode == 2 and "bad.toml" in r.stderr and "Traceback" not in r.stderr
    r = run("replay", "--policies", str(tmp_path / "missing.toml"), "--log", LOG)
    assert r.returncode == 2 and "cannot read" in r.stderr
    for target in ("abc", "0", "101"):
        r = run("recommend", "--log", LOG, "--target", target)
        assert r.returncode == 2 and "--target" in r.stderr, target
        assert "e.g. 99" in r.stderr
    pol = tmp_path / "p.toml"
    pol.write_text(textwrap.dedent(POLICIES))
    r = run("replay", "--policies", str(pol), "--policy", "nope.rate=1/s", "--log", LOG)
    assert r.returncode == 2 and "no limit named 'nope'" in r.stderr
    r = run("replay", "--policies", str(pol), "--log", str(tmp_path / "none.log"))
    assert r.returncode == 2 and "--log" in r.stderr


def test_the_progress_bar_draws_only_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        p = Progress(stream, interval=0.0)
        p("replay", 65536)
        p.done()
    assert "\rreplay: 65,536 events" in tty.getvalue()
    assert pipe.getvalue() == ""
