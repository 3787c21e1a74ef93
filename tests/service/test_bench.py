"""bench/bench_service.py runs and prints its table (a smoke test: it never reads a timing).

The smoke run is bounded by work done, not by time: ``--seconds 0 --requests N`` makes each
scenario send at least N requests however slow the machine is, so a busy CI machine gives
the same verdict as an idle one.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_service.py"
SCENARIOS = {"http-memory", "grpc-memory", "http-floor", "grpc-floor", "grpc-sync-floor"}
#: Per scenario: enough that each server's CPU shows in /proc's clock ticks (10 ms).
REQUESTS = 500


@pytest.mark.slow
def test_service_bench_prints_each_scenario_next_to_its_transport_floor(tmp_path: Path) -> None:
    results = tmp_path / "service.json"
    out = subprocess.run(
        [sys.executable, str(BENCH), "--seconds", "0", "--requests", str(REQUESTS),
         "--warmup", "0", "--redis", "none", "--concurrency", "2", "--users", "50",
         "--rounds", "2", "--json", str(results)],
        check=False, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line}
    assert rows.pop("scenario") == ["decisions/s", "p50 ms", "p99 ms", "p99.9 ms",
                                    "server CPU us/decision", "x floor", "fastest floor",
                                    "x own floor", "errors"]
    assert set(rows) == SCENARIOS
    for name, cells in rows.items():
        assert cells[-1] == "0", (name, out.stderr)  # never failed
    # The work done, not the time taken: with the deadline already past, every scenario's
    # connections together send exactly the requests asked for, one latency per answer.
    got = {r["scenario"]: r for r in json.loads(results.read_text())["results"]}
    assert set(got) == SCENARIOS
    for name, r in got.items():
        # two interleaved rounds: each scenario's requests twice, its CPU their median
        assert r["decisions"] == 2 * REQUESTS, (name, r["decisions"])
        assert r["errors"] == 0, (name, r["error_samples"])
        assert r["per_second"] > 0 and r["wall_s"] > 0, name
        by_round = r["cpu_us_per_decision_by_round"]
        assert len(by_round) == 2 and r["service_cpu_us_per_decision"] == sum(by_round) / 2
    # Each floor is its transport's unit and the ratio is printed for every scenario of it,
    # once the floor's CPU was measurable at all (/proc counts in clock ticks: a few hundred
    # requests of a bare transport can round to 0 ticks, which is no ratio, not an error).
    # Each scenario is held to the cheapest floor of its transport in the run (for gRPC,
    # grpc.aio or the sync grpc.server, whichever measured less), named in its row.
    for kind, floor_names in (("http", ["http-floor"]), ("grpc", ["grpc-floor",
                                                                 "grpc-sync-floor"])):
        measured = {n: got[n]["service_cpu_us_per_decision"] for n in floor_names}
        measured = {n: c for n, c in measured.items() if c > 0}
        if measured:
            fastest = min(measured, key=measured.__getitem__)
            assert rows[fastest][5] == "1.00"
            for n in (n for n in rows if n.startswith(f"{kind}-")):
                assert rows[n][6] == got[n]["floor"] == fastest, (n, rows[n])
                assert got[n]["x_floor"] == (got[n]["service_cpu_us_per_decision"]
                                             / measured[fastest]), n
        else:  # measured, and measured nothing
            assert all(got[n]["service_cpu_us_per_decision"] == 0 for n in floor_names)


def test_service_bench_holds_each_scenario_to_the_cheapest_floor_of_its_transport() -> None:
    # The table's arithmetic on figures of a run where the sync grpc.server was the cheaper
    # gRPC floor and the store's own connections the cheaper Redis one: each row is held to
    # the cheapest floor of its transport (with Redis for the Redis rows) and names it.
    spec = importlib.util.spec_from_file_location("bench_service", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cost = {"http-memory": 110.0, "grpc-memory": 150.0, "grpc-redis": 300.0,
            "http-floor": 100.0, "grpc-floor": 120.0, "grpc-sync-floor": 100.0,
            "grpc-redis-floor": 280.0, "grpc-redis-own-floor": 250.0}
    results = [{"scenario": name, "transport": name.split("-")[0], "cost": c}
               for name, c in cost.items()]
    bench.hold_to_fastest_floor(results, "cost")
    got = {r["scenario"]: (r["floor"], r["x_floor"]) for r in results}
    assert got["grpc-memory"] == ("grpc-sync-floor", 1.5)
    assert got["grpc-floor"] == ("grpc-sync-floor", 1.2)
    assert got["http-memory"] == ("http-floor", 1.1)
    assert got["grpc-redis"] == ("grpc-redis-own-floor", 1.2)
    assert got["grpc-redis-floor"] == ("grpc-redis-own-floor", 280 / 250)
    # a floor that measured nothing (0 clock ticks) is no floor
    results = [{"scenario": "grpc-memory", "transport": "grpc", "cost": 5.0},
               {"scenario": "grpc-floor", "transport": "grpc", "cost": 0.0}]
    bench.hold_to_fastest_floor(results, "cost")
    assert results[0]["floor"] == "" and math.isnan(results[0]["x_floor"])


@pytest.mark.slow
def test_service_bench_holds_the_redis_scenarios_to_a_floor_with_a_redis_round_trip(
        tmp_path: Path) -> None:
    # --redis auto starts a throw-away redis-server (tests/servers.py); --workers 2 adds the
    # two-process scenarios, held to the same Redis floors.
    pytest.importorskip("redis")
    from tests.servers import find_server_binary  # noqa: PLC0415

    if find_server_binary("redis") is None:
        pytest.skip("no redis-server")
    results = tmp_path / "service.json"
    only = "http-redis,grpc-redis,http-redis-2w,grpc-redis-2w"
    out = subprocess.run(
        [sys.executable, str(BENCH), "--seconds", "0", "--requests", "300", "--warmup", "0",
         "--redis", "auto", "--workers", "2", "--only", only, "--concurrency", "2",
         "--users", "50", "--json", str(results)],
        check=False, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = {r["scenario"]: r for r in json.loads(results.read_text())["results"]}
    assert set(got) == {*only.split(","), "http-redis-floor", "grpc-redis-floor",
                        "http-redis-own-floor", "grpc-redis-own-floor"}
    for name, r in got.items():
        assert r["decisions"] == 300 and r["errors"] == 0, (name, r["error_samples"])
    for kind in ("http", "grpc"):
        # `x floor`: over the cheaper of redis-py's command API and the store's own
        # connections; `x own floor`: over the store's own connections
        cost = {f: got[f"{kind}-redis-{f}"]["service_cpu_us_per_decision"]
                for f in ("floor", "own-floor")}
        measured = {f: c for f, c in cost.items() if c > 0}  # (see above)
        for name in (f"{kind}-redis", f"{kind}-redis-2w"):
            r = got[name]
            if measured:
                fastest = min(measured, key=measured.__getitem__)
                assert r["floor"] == f"{kind}-redis-{fastest}", name
                assert r["x_floor"] == r["service_cpu_us_per_decision"] / measured[fastest]
            if cost["own-floor"] > 0:
                assert r["x_own_floor"] == (r["service_cpu_us_per_decision"]
                                            / cost["own-floor"]), name


@pytest.mark.slow
def test_service_bench_counts_instructions_per_decision_under_callgrind(tmp_path: Path) -> None:
    # `--instructions`: the servers under callgrind, counting only the measured requests.
    # The counts are not held to any figure (they are the benchmark's answer); what is
    # checked is that every server's count is there, per decision, and the ratio is theirs.
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs valgrind (.ci/run): --instructions is a documented command")
        pytest.skip("valgrind is not installed")
    results = tmp_path / "instructions.json"
    out = subprocess.run(
        [sys.executable, str(BENCH), "--instructions", "--only", "http-memory", "--redis",
         "none", "--requests", "40", "--users", "10", "--warmup", "0.1", "--json",
         str(results)],
        check=False, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| server instructions/decision |" in out.stdout
    data = json.loads(results.read_text())
    assert data["env"]["measure"] == "callgrind instructions"
    got = {r["scenario"]: r for r in data["results"]}
    assert set(got) == {"http-memory", "http-floor"}
    for name, r in got.items():
        assert r["decisions"] == 40 and r["errors"] == 0, (name, r)
        # a served request is far more than the 10k instructions of a bare syscall loop
        assert r["instructions_per_decision"] > 10_000, (name, r)
    assert got["http-memory"]["x_floor"] == (got["http-memory"]["instructions_per_decision"]
                                             / got["http-floor"]["instructions_per_decision"])
