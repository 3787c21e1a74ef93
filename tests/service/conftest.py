"""Fixtures of the service tests: the real service in a subprocess, on free loopback ports."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service._proc import ServiceProcess

HERE = Path(__file__).parent
POLICIES = HERE / "policies" / "service.toml"


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """One ``ratekeeper serve`` (in-memory store) shared by the HTTP and gRPC tests.

    Tests share its counters, so each one uses keys of its own (`uid`)."""
    log = tmp_path_factory.mktemp("service") / "service.log"
    svc = ServiceProcess(POLICIES, log).start()
    try:
        yield svc
    finally:
        status = svc.stop()
        assert status == 0, f"service exited with {status}:\n{svc.log_tail()}"


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:12]
