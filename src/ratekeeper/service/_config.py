"""Policies: the decision service's configuration, from a TOML file to an immutable snapshot.

The names of three modules, gathered under the one name the rest of the service (and its
tests) import:

- `_model`: the snapshot values (`Policies`, `Domain`, `Rule`, `PolicyLimit`, `Settings`)
  and matching a descriptor to its rule (`Domain.match`), as envoyproxy/ratelimit;
- `_loader`: the TOML loader, `load_policies` / `check_file`, which report *every* problem
  with its location (``ratekeeper check-config``);
- `_keys`: `counter_key`, the store key of a limit's counter for a descriptor.
"""

from __future__ import annotations

from ._keys import MAX_COUNTER_KEY, counter_key
from ._loader import (
    DEFAULT_ALGORITHM,
    check_file,
    load_policies,
    parse_policies,
    parse_policies_text,
)
from ._model import (
    DEFAULT_MAX_COST,
    SERVICE_FAILURES,
    ConfigIssue,
    Domain,
    Level,
    Node,
    Policies,
    PolicyError,
    PolicyLimit,
    Rule,
    Settings,
    describe_limit,
    iter_rules,
)

__all__ = [
    "DEFAULT_ALGORITHM",
    "DEFAULT_MAX_COST",
    "MAX_COUNTER_KEY",
    "SERVICE_FAILURES",
    "ConfigIssue",
    "Domain",
    "Level",
    "Node",
    "Policies",
    "PolicyError",
    "PolicyLimit",
    "Rule",
    "Settings",
    "check_file",
    "counter_key",
    "describe_limit",
    "iter_rules",
    "load_policies",
    "parse_policies",
    "parse_policies_text",
]
