"""examples/envoy/: the one-command stack works end to end, and Envoy accepts envoy.yaml."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "envoy"

pytestmark = pytest.mark.timeout(120)


def test_run_py_smoke_starts_the_stack_and_sees_the_sixth_login_rejected(
        envoy_binary: str) -> None:
    # Its own session, so that a hang is ended with everything run.py started.
    env = {**os.environ, "PATH": f"{Path(envoy_binary).parent}{os.pathsep}"
                                 f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen([sys.executable, str(EXAMPLE / "run.py"), "--smoke"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"run.py --smoke did not finish:\n{out}")
    assert proc.returncode == 0, out
    lines = out.splitlines()
    assert lines[-1] == "smoke: OK", out
    assert [line.split()[0] for line in lines[:-1]] == ["200"] * 5 + ["429"], out


def test_envoy_validates_the_example_config(envoy_binary: str) -> None:
    r = subprocess.run([envoy_binary, "--mode", "validate", "-c", str(EXAMPLE / "envoy.yaml"),
                        "--disable-hot-restart", "--log-level", "error"],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "configuration" in r.stdout and "OK" in r.stdout, r.stdout
