"""Policies as data: one model, loaded from one file, decided by one engine.

The middleware (`ratekeeper.http`), the decision service (`ratekeeper.service`) and replay
(`ratekeeper.replay`) all drive this package; none of them has limits, rules or matching of
its own.

- `_request`: who the client is (`RequestInfo`, `ClientIP`, key functions);
- `_rules`: limits as rules apply them, descriptor rule trees and matching, a request's
  descriptors; `_http`: `HTTPRules`, how an HTTP request becomes descriptors;
- `_model`: the immutable `Policies` snapshot (domains, settings, the ``[http]`` part);
- `_loader` (+ `_http_loader`, `_build`, `_toml_lines`): the TOML file (or a mapping) to a
  snapshot, every error located; `_envoy_config`: envoyproxy/ratelimit's YAML files to the
  same snapshot;
- `_engine`: `Engine.plan`: descriptors -> rules -> one atomic store call -> a status per
  descriptor, as a core plan (sync and asyncio drivers run the same plan);
- `_decide`: `decide_request`, an HTTP request's whole decision (map, decide, verdict);
- `_holder`: `PolicyHolder` (reload = swap a snapshot) and `Watcher` (poll on a clock);
- `_keys`, `_names`: counter keys and the names the loaders check; `_stats`: the events
  the engine reports.
"""

from __future__ import annotations

from ._engine import (
    CheckResult,
    DescriptorRequest,
    DescriptorStatus,
    Engine,
    InvalidRequest,
    Override,
    UnknownDomain,
    make_descriptor,
)
from ._holder import PolicyHolder, Watcher
from ._loader import check_file, load_policies, parse_policies
from ._model import ConfigIssue, Domain, Policies, PolicyError, PolicyLimit, Rule, Settings
from ._stats import NullStats, Stats

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
    "Rule",
    "Settings",
    "Stats",
    "UnknownDomain",
    "Watcher",
    "check_file",
    "load_policies",
    "make_descriptor",
    "parse_policies",
]
