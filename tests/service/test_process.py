"""The service as a process: reload on SIGHUP and on file change, a bad file keeping the old
policies, graceful shutdown, refusing to start on bad policies, the bundled example."""

from __future__ import annotations

import importlib.util
import re
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.service._proc import ServiceProcess, run_cli

SERVICE_POLICIES = Path(__file__).parent / "policies" / "service.toml"

V1 = """
[[domains.r.descriptors]]
key = "user"
limits = [{ name = "per-user", algorithm = "fixed-window", rate = "1/hour" }]
"""
V2 = V1.replace('rate = "1/hour"', 'rate = "3/hour"')
BROKEN = V1.replace('algorithm = "fixed-window"', 'algorithm = "fixed_window"') + """
[[domains.r.descriptors]]
key = "ip"
"""


def allowed(svc: ServiceProcess, user: str) -> bool:
    r = httpx.post(f"{svc.http}/v1/check", json={"domain": "r", "descriptors": [{"user": user}]},
                   timeout=10)
    assert r.status_code == 200, r.text
    out: bool = r.json()["allowed"]
    return out


def generation(svc: ServiceProcess) -> int:
    doc = httpx.get(f"{svc.http}/v1/policies", timeout=10).json()
    out: int = doc["generation"]
    return out


def rewrite(path: Path, text: str) -> None:
    """Replace the file atomically, as deployment tools do (and change its mtime/inode)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def test_sighup_reloads_and_a_bad_file_keeps_the_old_policies(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(V1)
    with ServiceProcess(path, tmp_path / "log") as svc:
        assert allowed(svc, "a") and not allowed(svc, "a")

        rewrite(path, V2)
        n = len(svc.records())
        svc.send(signal.SIGHUP)
        rec = svc.wait_for(lambda r: r.get("event") == "reloaded", after=n)
        assert rec["generation"] == 2 and generation(svc) == 2
        # Same limit name, new rate: the counter carries over (1 used of 3 now).
        assert allowed(svc, "a") and allowed(svc, "a") and not allowed(svc, "a")

        rewrite(path, BROKEN)
        n = len(svc.records())
        svc.send(signal.SIGHUP)
        rec = svc.wait_for(lambda r: r.get("event") == "reload_failed", after=n)
        assert rec["level"] == "error" and rec["generation"] == 2
        assert [re.sub(r"^line \d+, ", "", e) for e in rec["errors"]] == [
            "domains.r.descriptors[0].limits[0].algorithm: unknown algorithm 'fixed_window' "
            "(did you mean 'fixed-window'?); choose one of: token-bucket, gcra, leaky-bucket, "
            "fixed-window, sliding-window-log, sliding-window-counter",
            "domains.r.descriptors[1] (ip): has no limits, is not unlimited and has no nested "
            "descriptors: add `limits = [...]`, `unlimited = true` or `descriptors`",
        ]
        doc = httpx.get(f"{svc.http}/v1/policies", timeout=10).json()
        assert doc["generation"] == 2 and "unknown algorithm" in doc["last_reload_error"]
        assert allowed(svc, "b") and allowed(svc, "b") and allowed(svc, "b")  # 3/hour still
        assert httpx.get(f"{svc.http}/readyz", timeout=10).status_code == 200
        metrics = httpx.get(f"{svc.http}/metrics", timeout=10).text
        assert 'ratekeeper_config_reloads_total{result="error"} 1.0' in metrics
        assert "ratekeeper_config_generation 2.0" in metrics
    assert svc.proc is not None and svc.proc.returncode == 0


def test_watch_reloads_when_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(V1)
    with ServiceProcess(path, tmp_path / "log", "--watch", "0.05",
                        "--log-level", "debug") as svc:
        assert allowed(svc, "a") and not allowed(svc, "a")
        n = len(svc.records())
        rewrite(path, V2)
        svc.wait_for(lambda r: r.get("event") == "reloaded", after=n)
        assert generation(svc) == 2 and allowed(svc, "a")
        n = len(svc.records())
        rewrite(path, BROKEN)
        failed = svc.wait_for(lambda r: r.get("event") == "reload_failed", after=n)
        # The poll that read the bad file, then one more: the loop lives on, and the
        # unchanged bad file is not reloaded again (poll by poll on a ManualClock:
        # test_the_watch_polls_once_per_period_of_its_clock_and_stamps_reloads).
        records = svc.records()
        after = records.index(failed) + 1
        poll = svc.wait_for(lambda r: r.get("event") == "watch_poll", after=after)
        assert poll["changed"] is True
        after = svc.records().index(poll) + 1
        poll = svc.wait_for(lambda r: r.get("event") == "watch_poll", after=after)
        assert poll["changed"] is False
        assert sum(r.get("event") == "reload_failed" for r in svc.records()) == 1
        assert generation(svc) == 2


def test_sigterm_shuts_down_gracefully(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(V1)
    svc = ServiceProcess(path, tmp_path / "log").start()
    assert allowed(svc, "a")
    assert svc.stop() == 0
    events = [r.get("event") for r in svc.records()]
    assert events[-2:] == ["stopping", "stopped"]
    assert all(r["level"] in ("info", "warning") for r in svc.records())


def test_refuses_to_start_on_bad_policies(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(BROKEN)
    out = run_cli(["serve", "--config", str(path), "--http-port", "0", "--grpc-port", "0"])
    assert out.returncode == 2
    assert "not starting" in out.stderr and "2 errors in the policies" in out.stderr
    assert "unknown algorithm 'fixed_window'" in out.stderr


@pytest.mark.parametrize("args", [["--store", "mongodb://x"], ["--no-http", "--no-grpc"],
                                  ["--store-timeout", "0"], ["--store-timeout", "-1"],
                                  ["--store-timeout", "soon"], ["--store-timeout", "inf"]])
def test_refuses_unusable_options(tmp_path: Path, args: list[str]) -> None:
    out = run_cli(["serve", "--example", *args])
    assert out.returncode in (1, 2) and "ratekeeper serve" in out.stderr
    assert "Traceback" not in out.stderr


def test_serves_the_bundled_example_without_config(tmp_path: Path) -> None:
    with ServiceProcess(None, tmp_path / "log") as svc:
        doc = httpx.get(f"{svc.http}/v1/policies", timeout=10).json()
        assert set(doc["domains"]) == {"api", "edge", "login", "web"}
        assert doc["source"].endswith("example_policies.toml")
        r = httpx.post(f"{svc.http}/v1/check", json={"domain": "login", "key": "alice"},
                       timeout=10)
        assert r.json()["headers"]["RateLimit-Policy"].startswith('"login.per-minute";q=5')
    assert any(r.get("event") == "example_policies" for r in svc.records())


def test_check_config_command(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(BROKEN)
    out = run_cli(["check-config", str(path)])
    assert out.returncode == 1
    assert out.stdout.splitlines()[0].startswith(  # file:line: location: message
        f"{path}:4: domains.r.descriptors[0].limits[0].algorithm: unknown algorithm")
    path.write_text(V2)
    out = run_cli(["check-config", str(path)])
    assert out.returncode == 0 and out.stdout == f"{path}: OK (1 domain, 1 rules, 1 limits)\n"


def test_a_rejected_reload_logs_every_error_in_text_format(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(V1)
    with ServiceProcess(path, tmp_path / "log", log_format="text") as svc:
        rewrite(path, BROKEN)
        n = len(svc.log_text())
        svc.send(signal.SIGHUP)
        svc.wait_for_line("NOT reloaded", after=n)
        svc.wait_for_line("has no limits", after=n)  # the last error of the two
        text = svc.log_text()[n:]
    assert "ERROR ratekeeper.policy: policies NOT reloaded: 2 error(s)" in text
    assert ("domains.r.descriptors[0].limits[0].algorithm: unknown algorithm 'fixed_window'"
            in text)
    assert "domains.r.descriptors[1] (ip): has no limits" in text


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound by no listener: connecting is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: the port stays ours and refuses
        yield s.getsockname()[1]


needs_redis_store = pytest.mark.skipif(
    importlib.util.find_spec("ratekeeper.stores.redis") is None
    or importlib.util.find_spec("redis") is None, reason="the Redis store is not available")


@needs_redis_store
def test_an_unreachable_store_starts_with_a_warning_and_is_not_ready(
        tmp_path: Path, closed_port: int) -> None:
    url = f"redis://127.0.0.1:{closed_port}/0"
    with ServiceProcess(SERVICE_POLICIES, tmp_path / "log", "--store", url) as svc:
        ready = httpx.get(f"{svc.http}/readyz", timeout=10)
        assert ready.status_code == 503 and ready.json()["status"] == "unavailable"
        r = httpx.post(f"{svc.http}/v1/check", json={"domain": "t", "key": "a"}, timeout=10)
        assert r.status_code == 200 and r.json()["degraded"] is True  # failure = "open"
    records = svc.records()
    (warn,) = [r for r in records if r.get("event") == "store_unreachable"]
    assert warn["level"] == "warning" and warn["store"] == url
    assert f"127.0.0.1:{closed_port}" in warn["msg"] and "'open'" in warn["msg"]
    assert records.index(warn) < next(i for i, r in enumerate(records)
                                      if r.get("event") == "listening")
    assert svc.proc is not None and svc.proc.returncode == 0


@needs_redis_store
def test_require_store_refuses_to_start_when_the_store_is_unreachable(closed_port: int) -> None:
    url = f"redis://127.0.0.1:{closed_port}/0"
    out = run_cli(["serve", "--config", str(SERVICE_POLICIES), "--store", url,
                   "--require-store", "--http-port", "0", "--grpc-port", "0"])
    assert out.returncode == 1, out.stderr
    assert "ratekeeper serve: not starting" in out.stderr
    assert f"127.0.0.1:{closed_port}" in out.stderr and "--require-store" in out.stderr
