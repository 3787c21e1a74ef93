"""bench/bench_envoy.py runs and prints its table (a smoke test: it never reads a timing).

Bounded by work, not time: ``--seconds 0 --requests N`` makes each scenario send exactly N
requests however slow the machine is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_envoy.py"
REQUESTS = 100

pytestmark = pytest.mark.timeout(300)


@pytest.mark.slow
def test_envoy_bench_runs_both_scenarios_and_every_request_asks_the_service(
        envoy_binary: str, tmp_path: Path) -> None:
    results = tmp_path / "envoy.json"
    out = subprocess.run(
        [sys.executable, str(BENCH), "--seconds", "0", "--requests", str(REQUESTS),
         "--warmup", "0", "--concurrency", "4", "--users", "20", "--json", str(results)],
        check=False, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    rows = {line.split("|")[1].strip() for line in out.stdout.splitlines()
            if line.startswith("| ") and "---" not in line}
    assert rows == {"scenario", "envoy-ratekeeper", "envoy-no-filter"}
    got = {r["scenario"]: r for r in json.loads(results.read_text())["results"]}
    for name, r in got.items():
        assert r["requests"] == REQUESTS, (name, r)
        assert r["statuses"] == {"200": REQUESTS}, (name, r["statuses"])  # all admitted
    # Envoy asked the service once per request on the filtered listener (its counters), and
    # never on the floor's.
    assert got["envoy-ratekeeper"]["service_ok_answers"] == REQUESTS
    assert got["envoy-no-filter"]["service_ok_answers"] == 0
