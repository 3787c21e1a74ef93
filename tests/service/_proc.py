"""Run the real service (`ratekeeper serve`) in a subprocess on free loopback ports.

The service is started with ``--http-port 0 --grpc-port 0`` (the OS picks free ports) and
``--log-format json`` with its stderr going to a file; the ``listening`` log record says
which ports it bound. Every wait is bounded and fails with the tail of the service's log.
The process is stopped by pid (SIGTERM, then SIGKILL), and dies with the test process if that
is killed first (`dying_with_parent`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tests.servers import dying_with_parent

START_TIMEOUT = 20.0

#: The CLI as the console script runs it (``main()`` of ``ratekeeper.cli``).
CLI = [sys.executable, "-c", "import sys; from ratekeeper.cli import main; sys.exit(main())"]

T = TypeVar("T")

class ServiceError(RuntimeError):
    pass


class ServiceProcess:
    """One ``ratekeeper serve`` process. Use as a context manager or call start()/stop()."""

    def __init__(self, config: Path | None, log_path: Path, *args: str,
                 log_format: str = "json") -> None:
        cfg = ["--config", str(config)] if config is not None else []
        self.argv = [*CLI, "serve", *cfg, "--host", "127.0.0.1", "--http-port", "0",
                     "--grpc-port", "0", "--log-format", log_format, "--grace", "2", *args]
        self.log_format = log_format
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.http_port = 0
        self.grpc_port = 0

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = START_TIMEOUT) -> ServiceProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONWARNINGS")}
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(dying_with_parent(self.argv), stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env)
        if self.log_format == "text":
            line = self.wait_for_line("listening: ", timeout)
            m = re.search(r"http://127\.0\.0\.1:(\d+), grpc 127\.0\.0\.1:(\d+)", line)
            assert m is not None, line
            self.http_port, self.grpc_port = int(m[1]), int(m[2])
            return self
        rec = self.wait_for(lambda r: r.get("event") == "listening", timeout)
        # (0: that listener is off, e.g. only a unix socket serves it.)
        self.http_port = int(rec.get("http_port", 0))
        self.grpc_port = int(rec.get("grpc_port", 0))
        return self

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_line(self, needle: str, timeout: float = 10.0, after: int = 0) -> str:
        """The first log line (from character `after`) containing `needle` (any log format)."""
        return self._wait(lambda: next((line for line in self.log_text()[after:].splitlines()
                                        if needle in line), None),
                          f"log line with {needle!r}", timeout)

    def _wait(self, find: Callable[[], T | None], what: str, timeout: float) -> T:
        """`find()`'s first non-None answer; the deadline only decides when to give up."""
        deadline = time.monotonic() + timeout
        while True:
            found = find()
            if found is not None:
                return found
            if self.proc is not None and self.proc.poll() is not None:
                raise ServiceError(f"service exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ServiceError(f"no {what} within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.02)

    def records(self) -> list[dict[str, Any]]:
        """Every JSON log record so far (other lines are skipped)."""
        out = []
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        for line in text.splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def log_tail(self, n: int = 30) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 10.0,
                 after: int = 0) -> dict[str, Any]:
        """The first log record (from index `after`) matching `pred`, waiting up to `timeout`."""
        return self._wait(lambda: next((rec for rec in self.records()[after:] if pred(rec)),
                                       None), "matching log record", timeout)

    def send(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM and wait (SIGKILL after `timeout`); returns the exit status."""
        proc = self.proc
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
                raise ServiceError(f"service did not stop within {timeout}s:\n"
                                   f"{self.log_tail()}") from None
        return proc.returncode

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_cli(args: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run ``ratekeeper ARGS`` in a subprocess and capture its output."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)
