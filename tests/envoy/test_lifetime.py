"""The processes the tests start die with the test run: a pytest that is SIGKILLed (a CI
job cancelled, a timeout's kill -9) leaves no Envoy and no ``ratekeeper serve`` behind.

A stand-in for pytest (a Python process that starts them through the same harness the
fixtures use) is killed with SIGKILL, which it cannot catch, so no teardown runs; what it
started must then go by itself (PR_SET_PDEATHSIG, set by the harness).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.envoy._stack import StackError, wait_for

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
POLICIES = Path(__file__).parent / "policies.toml"

#: The stand-in for pytest: starts a service and an Envoy asking it, prints their pids,
#: then waits to be killed.
RUNNER = """
import sys, time
from pathlib import Path
from tests.envoy._stack import EnvoyProcess, Listener, envoy_config
from tests.service._proc import ServiceProcess

workdir = Path(sys.argv[1])
svc = ServiceProcess(Path(sys.argv[2]), workdir / "service.log").start()
env = EnvoyProcess(sys.argv[3], envoy_config([Listener("main", "ratekeeper")],
                   {"ratekeeper": [svc.grpc_port]}, 9), workdir).start()
print(env.proc.pid, svc.pid, flush=True)
while True:
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie left for a parent that does not reap counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_envoy_and_the_service_die_when_the_test_process_is_killed(
        envoy_binary: str, tmp_path: Path) -> None:
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(tmp_path), str(POLICIES), envoy_binary],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'src'}"})
    pids: list[int] = []
    try:
        assert runner.stdout is not None
        line = runner.stdout.readline()
        assert line, runner.communicate(timeout=30)[1]
        pids = [int(x) for x in line.split()]
        envoy_pid, service_pid = pids
        assert _alive(envoy_pid) and _alive(service_pid)
        runner.send_signal(signal.SIGKILL)  # no teardown runs: nothing stops them but the OS
        runner.wait(30)
        # The deadline only decides when to give up; the kernel signals them at once.
        try:
            wait_for(lambda: not any(map(_alive, pids)), 30,
                     "envoy and the service to die with their parent")
        except StackError:
            pytest.fail(f"still running after their parent was killed: "
                        f"{[p for p in pids if _alive(p)]}")
    finally:
        if runner.poll() is None:
            runner.kill()
        runner.communicate(timeout=10)  # reaps it and closes its pipes
        for pid in pids:  # never leave one behind, even when the test fails
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(map(_alive, pids)) and time.monotonic() < deadline:
            time.sleep(0.05)
