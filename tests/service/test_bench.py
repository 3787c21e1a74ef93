"""bench/bench_service.py runs and prints its table (a smoke test: it never reads a timing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_service.py"


@pytest.mark.slow
def test_service_bench_prints_each_scenario_next_to_its_transport_floor() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--seconds", "0.2", "--warmup", "0", "--redis", "none",
         "--concurrency", "2", "--users", "50"],
        check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line}
    assert rows.pop("scenario") == ["decisions/s", "p50 ms", "p99 ms", "p99.9 ms",
                                    "server CPU us/decision", "x floor", "errors"]
    assert set(rows) == {"http-memory", "grpc-memory", "http-floor", "grpc-floor",
                         "grpc-sync-floor"}
    for name, cells in rows.items():
        assert int(cells[0].replace(",", "")) > 0, (name, cells)  # it answered some
        assert cells[-1] == "0", (name, out.stderr)  # and never failed
    # Each floor is its transport's unit; the ratio is printed for every scenario.
    assert rows["http-floor"][5] == rows["grpc-floor"][5] == "1.00"
    assert all(c[5] != "nan" for c in rows.values())
