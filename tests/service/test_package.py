"""The package's public surface, its light import, and the bundled Envoy example."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import ratekeeper.service as service
from ratekeeper.service import load_policies, make_descriptor

REPO = Path(__file__).resolve().parent.parent.parent


def test_every_public_name_resolves() -> None:
    for name in service.__all__:
        assert getattr(service, name) is not None, name
    with pytest.raises(AttributeError):
        _ = service.no_such_name  # type: ignore[attr-defined]


def test_importing_the_package_loads_no_server_framework() -> None:
    code = ("import sys, ratekeeper.service, ratekeeper.cli; ratekeeper.cli.build_parser(); "
            "print(sorted(m for m in ('starlette', 'uvicorn', 'grpc', 'prometheus_client') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_the_envoy_example_matches_the_example_policies() -> None:
    yaml = (REPO / "examples" / "envoy" / "envoy.yaml").read_text()
    assert re.search(r"^\s+domain: edge$", yaml, re.M)
    assert "port_value: 8081" in yaml  # ratekeeper serve's default gRPC port
    assert "envoy.filters.http.ratelimit" in yaml and "transport_api_version: V3" in yaml
    edge = load_policies(REPO / "examples" / "policies.toml").domains["edge"]
    # What the routes' rate_limits actions send: remote_address, and on /login also
    # generic_key (descriptor_key path, value /login) + remote_address.
    assert "descriptor_key: path" in yaml and "descriptor_value: /login" in yaml
    rule = edge.match([("remote_address", "203.0.113.7")])
    assert rule is not None and rule.name == "remote_address"
    rule = edge.match([("path", "/login"), ("remote_address", "203.0.113.7")])
    assert rule is not None and rule.name == "path=/login.remote_address"
    rule = edge.match(make_descriptor([("remote_address", "10.0.0.1")]).entries)
    assert rule is not None and rule.unlimited
