"""Replay decides a log's requests exactly as the middleware decides them live.

One test drives both: every request of the real nginx sample log is replayed through a
policies file (`ratekeeper.replay.replay`, on the log's clock), and sent through the ASGI
middleware with the same policies and a `ManualClock` set to the line's time. Their verdicts,
limits and remaining counts must be equal, request by request.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx

from ratekeeper.http import RateLimitMiddleware
from ratekeeper.policy import load_policies
from ratekeeper.replay import read_log
from ratekeeper.replay._replay import replay
from ratekeeper.testing import ManualClock
from tests.replay.make_sample import REPLAY_FORMAT

DATA = Path(__file__).parent / "data"
CLI = [sys.executable, "-c", "import sys; from ratekeeper.cli import main; sys.exit(main())"]

#: Tight limits, so that the sample's ~300 requests over a few seconds meet every verdict;
#: trusted loopback proxy, so X-Forwarded-For (logged by nginx) names the client.
POLICIES = '''
[http]
domain = "web"
descriptors = [["client_ip"], ["route", "client_ip"]]
exempt = { paths = ["/moved"] }

[http.client_ip]
trusted_proxies = ["127.0.0.1", "::1"]

[[http.routes]]
name = "static"
path = "/static/**"
mode = "replace"
descriptors = [["route"]]

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-client", algorithm = "gcra", rate = "5/s", burst = 8 }]

[[domains.web.descriptors]]
key = "route"
value = "static"
limits = [{ name = "static", algorithm = "sliding-window-counter", rate = "40/s" }]
'''


async def test_replayed_decisions_equal_the_asgi_middlewares_for_the_same_requests(
        tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(textwrap.dedent(POLICIES))
    policies = load_policies(path)
    with read_log(DATA / "nginx-replay.log", REPLAY_FORMAT) as events:
        replayed = list(replay(policies, events))
    assert len(replayed) >= 250

    clock = ManualClock()

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        await send({"type": "http.response.start", "status": 200,  # type: ignore[operator]
                    "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]

    mw = RateLimitMiddleware(app, path, clock=clock, sleep=clock.advance)
    live = []
    for r in replayed:
        ev = r.event
        clock.set(ev.t)
        transport = httpx.ASGITransport(app=mw, client=(ev.client, 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as c:
            resp = await c.request(ev.method, ev.path, headers={
                k: v.encode() for k, v in ev.headers.items()})
        live.append((resp.status_code, resp.headers.get("RateLimit")))

    def expected(r: object) -> tuple[int, str | None]:
        hd = r.decision  # type: ignore[attr-defined]
        if hd is None:
            return 200, None
        d = hd.decision
        return (429 if hd.verdict == "rejected" else 200,
                f'"{d.limit.name}";r={d.remaining};t={max(1, -int(-d.reset_after // 1))}')

    want = [expected(r) for r in replayed]
    mismatches = [(i, a, b) for i, (a, b) in enumerate(zip(live, want, strict=True)) if a != b]
    assert not mismatches, mismatches[:5]
    verdicts = {r.verdict for r in replayed}
    assert {"allowed", "rejected", "not_limited"} <= verdicts, verdicts


def test_simulate_policies_reads_an_access_log_and_counts_its_verdicts(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(textwrap.dedent(POLICIES))
    out = subprocess.run([*CLI, "simulate", "--policies", str(path), "--format", "combined",
                          "--trace", str(DATA / "nginx-combined.log"), "--summary"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    counts = {line.split()[0]: int(line.split()[1]) for line in out.stdout.splitlines()[1:]}
    lines = sum(1 for line in (DATA / "nginx-combined.log").read_text().splitlines()
                if line.strip() and '"-"' not in line.split(" ", 6)[-1][:5])
    assert sum(counts.values()) >= lines - 2  # nginx's odd lines are counted malformed
    assert counts["rejected"] > 0 and counts["allowed"] > 0


def test_simulate_policies_refuses_a_file_without_http_and_an_algorithm_beside_it(
        tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(textwrap.dedent(POLICIES).split("[[domains.web.descriptors]]", 1)[0]
                    .replace("[http]", "[http_]") + "\n[[domains.web.descriptors]]\n"
                    'key = "a"\nlimits = [{ rate = "1/s" }]\n')
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"t": 0, "path": "/"}) + "\n")
    bad = subprocess.run([*CLI, "simulate", "--policies", str(path), "--trace", str(trace)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "unknown key 'http_'" in bad.stderr
    good = tmp_path / "good.toml"
    good.write_text(textwrap.dedent(POLICIES))
    both = subprocess.run([*CLI, "simulate", "gcra", "--policies", str(good), "--trace",
                           str(trace)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert both.returncode == 2 and "drop the ALGORITHM" in both.stderr
    ok = subprocess.run([*CLI, "simulate", "--policies", str(good), "--trace", str(trace)],
                        capture_output=True, text=True, timeout=60, check=False)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["verdict"] == "allowed"
