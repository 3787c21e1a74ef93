"""The benchmarks in ``bench/`` still run: each one, at a size of a second or so.

A smoke run checks that a benchmark starts, measures every contender it names and prints
its report; never a timing (the figures of a busy CI machine mean nothing). The service's
and Envoy's benchmarks have their own smoke tests (``tests/service/test_bench.py``,
``tests/envoy/test_bench_envoy.py``), bounded by requests sent.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def bench(*argv: str) -> str:
    out = subprocess.run([sys.executable, str(BENCH / argv[0]), *argv[1:]],
                         capture_output=True, text=True, timeout=180, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_middleware_bench_reports_every_app() -> None:
    out = bench("bench_middleware.py", "--requests", "200", "--rounds", "1")
    rows = [line.split("|")[1].strip() for line in out.splitlines()
            if line.startswith("| ") and "---" not in line][1:]
    assert rows == ["asgi bare", "asgi python-policy", "asgi file-policy", "wsgi bare",
                    "wsgi python-policy", "wsgi file-policy"]


def test_memory_bench_runs_ratekeeper_beside_the_bare_loop() -> None:
    out = bench("bench_memory.py", "--rounds", "1", "--calls", "2000", "--keys-mem", "2000",
                "--only", "ratekeeper gcra,ratekeeper token-bucket")
    assert "ratekeeper gcra" in out and "ratekeeper token-bucket" in out and "bare" in out


def test_log_reader_bench_reads_every_line() -> None:
    out = bench("bench_logs.py", "--lines", "2000")
    assert "2000 lines" in out and "-> 2000 events" in out


def test_replay_bench_replays_every_line() -> None:
    out = bench("bench_replay.py", "--lines", "2000")
    assert "2,000 lines" in out


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_redis_bench_runs_ratekeeper_beside_bare_evalsha() -> None:
    out = bench("bench_redis.py", "--rounds", "1", "--batch-s", "0.02", "--keys", "64",
                "--skip-faults", "--only", "ratekeeper gcra",
                "--server", str(shutil.which("redis-server")))
    assert "ratekeeper gcra" in out and "bare" in out
