"""The decision service: ``ratekeeper serve`` (HTTP JSON API and Envoy's rate limit gRPC).

    ratekeeper serve --config policies.toml [--store redis://127.0.0.1:6379/0]
    ratekeeper check-config policies.toml

Layout (see docs/service.md):

- the policies file -> an immutable `Policies` snapshot (no I/O beyond reading it):
  `_model` (the snapshot, matching), `_loader` (TOML, located errors), `_envoy_config`
  (envoyproxy/ratelimit's YAML, a file or its config directory), `_keys` (counter keys);
- `_engine`: `Engine.check`, descriptors -> rules -> one atomic store call -> statuses;
- `_service`: `PolicyHolder` (reload = swap a snapshot), `Watcher` (``--watch``, on an injected
  clock) and `Service` (what transports share);
- `_http` (Starlette), `_grpc` (grpc.aio, generated from Envoy's rls.proto in ``proto/``),
  `_server` (uvicorn + grpc on one loop, signals, graceful shutdown), `_stats` (Prometheus),
  `_logging` (JSON logs), `_cli` (the subcommands).

Importing this package needs only the standard library; `create_app`, `RateLimitServicer`,
`ServeOptions` and `serve` load Starlette, grpcio and uvicorn when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..policy._engine import (
    CheckResult,
    DescriptorRequest,
    DescriptorStatus,
    Engine,
    InvalidRequest,
    Override,
    UnknownDomain,
    make_descriptor,
)
from ..policy._holder import PolicyHolder, Watcher
from ..policy._loader import check_file, load_policies, parse_policies
from ..policy._model import ConfigIssue, Domain, Policies, PolicyError, PolicyLimit, Rule, Settings
from ..policy._stats import NullStats, Stats
from ._service import Service
from ._stats import PrometheusStats

if TYPE_CHECKING:
    from ._grpc import RateLimitServicer
    from ._http import create_app
    from ._server import ServeOptions, serve

__all__ = [
    "CheckResult",
    "ConfigIssue",
    "DescriptorRequest",
    "DescriptorStatus",
    "Domain",
    "Engine",
    "InvalidRequest",
    "NullStats",
    "Override",
    "Policies",
    "PolicyError",
    "PolicyHolder",
    "PolicyLimit",
    "PrometheusStats",
    "RateLimitServicer",
    "Rule",
    "ServeOptions",
    "Service",
    "Settings",
    "Stats",
    "UnknownDomain",
    "Watcher",
    "check_file",
    "create_app",
    "load_policies",
    "make_descriptor",
    "parse_policies",
    "serve",
]

_LAZY = {
    "create_app": "._http",
    "RateLimitServicer": "._grpc",
    "ServeOptions": "._server",
    "serve": "._server",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
