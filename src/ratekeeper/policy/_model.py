"""The policies model: an immutable snapshot of domains, rule trees and limits, and matching.

The model is envoyproxy/ratelimit's, generalised to every ratekeeper algorithm:

- a **domain** is a namespace of rules (Envoy's ``domain``: one per application or gateway);
- a request carries **descriptors**, each an ordered list of ``(key, value)`` entries such as
  ``[("user", "alice"), ("op", "export")]``;
- the policies hold a tree of **descriptor rules** per domain. A request descriptor matches the
  rule reached by walking its entries one level at a time (`Domain.match`): at each level the
  entry's key and value are looked up *exactly* first, then against *wildcard* values
  (``value = "admin-*"``, ``"/api*v1"``, ``"foo*bar*baz"``: each ``*`` matches any run of
  characters, the empty one included, as envoyproxy/ratelimit's ``wildcardMatch``; the
  loader orders a level's patterns, see `Level`), then against the key's *default* rule (a
  rule with no ``value`` matches every value). There is no backtracking, and a descriptor
  with more entries than the rules are deep matches nothing -- both exactly as
  envoyproxy/ratelimit;
- a matched rule applies one or more **limits** (any algorithm; all are decided together,
  all-or-nothing), or is ``unlimited``, and may be in ``shadow_mode`` (decided and counted,
  but always answered OK) and charge a ``cost`` per hit;
- a matched rule may **replace** others (envoyproxy/ratelimit's ``replaces``): when both
  match descriptors of one request, the replaced rule is not applied (`drop_replaced`).

`_loader` builds these values from a TOML file, `_envoy_config` from envoyproxy/ratelimit's
YAML files (both with located errors), `_keys` names a limit's counters. Nothing here does
I/O.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._errors import ConfigError
from ..core import FailurePolicy
from ._http import HTTPRules

# The rules are `_rules`'; named here too, as the model's parts (`ratekeeper.policy` and
# `ratekeeper.service` export them from here).
from ._keys import Shared
from ._rules import Domain, Level, Node, PolicyLimit, Rule, drop_replaced, make_level

__all__ = [
    "DEFAULT_MAX_COST",
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
    "describe_limit",
    "drop_replaced",
    "iter_rules",
    "make_level",
]

#: The failure policies a service may use: the core's `FailurePolicy` but ``"raise"`` (a
#: check must get an answer; Envoy's own ``failure_mode_deny`` decides what an error means).
SERVICE_FAILURES: tuple[FailurePolicy, ...] = ("open", "closed", "local")

#: The default `Settings.max_cost`.
DEFAULT_MAX_COST = 1_000_000.0


class PolicyError(ConfigError):
    """A policies file (or mapping) has errors; `issues` lists every one with its location."""

    def __init__(self, issues: Sequence[ConfigIssue], source: str = "<policies>") -> None:
        self.issues: tuple[ConfigIssue, ...] = tuple(issues)
        self.source = source
        n = len(self.issues)
        lines = "\n".join(f"  {i}" for i in self.issues)
        super().__init__(f"{source}: {n} error{'s' if n != 1 else ''} in the policies:\n{lines}")


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One problem in a policies file: where (a key path) and what.

    `line` is the 1-based line the problem is on, when the parser tells (YAML does, TOML's
    parser does not); `file` the file it is in, when a directory of files was loaded.
    """

    location: str
    message: str
    line: int | None = None
    file: str = ""

    def __str__(self) -> str:
        where = self.location
        if self.line is not None:
            where = f"line {self.line}" + (f", {where}" if where else "")
        return f"{where}: {self.message}" if where else self.message


@dataclass(frozen=True, slots=True)
class Settings:
    """Service-wide settings (the ``[service]`` table).

    - `failure`: what to answer when the store cannot be reached (the library's
      `FailurePolicy`, decided by `ratekeeper.core.Failure`): ``"open"`` admits (Envoy's
      ``failure_mode_deny = false`` and envoyproxy/ratelimit's behaviour), ``"closed"``
      rejects, ``"local"`` decides on an in-process memory store holding `fallback_share` of
      each limit (one replica of N: ``1/N``). ``"raise"`` is refused: a check needs an answer.
    - `shadow_mode`: every rule in shadow mode (envoyproxy/ratelimit's global ``SHADOW_MODE``).
    - `legacy_headers`: also send ``X-RateLimit-Limit/Remaining/Reset``.
    - `max_cost`: the largest cost (hits x rule cost) one descriptor may charge; above it a
      request is refused as invalid (HTTP 400, gRPC ``INVALID_ARGUMENT``).
    - `allow_overrides`: honour the ``limit`` override Envoy may put in a descriptor (a fixed
      window of ``requests_per_unit`` per ``unit``), as envoyproxy/ratelimit does.
    - `unknown_domain`: ``"ok"`` answers a check on a domain the policies do not define as
      one matching no rule (OK, nothing limited), as envoyproxy/ratelimit; ``"error"``
      refuses it (HTTP 404, gRPC ``INVALID_ARGUMENT``), so that a misspelt domain shows.
    """

    failure: FailurePolicy = "open"
    fallback_share: float = 1.0
    shadow_mode: bool = False
    legacy_headers: bool = False
    max_cost: float = DEFAULT_MAX_COST
    allow_overrides: bool = True
    unknown_domain: Literal["ok", "error"] = "ok"


@dataclass(frozen=True, slots=True, eq=False)
class Policies:
    """An immutable snapshot of the policies. The service swaps whole snapshots on reload."""

    domains: Mapping[str, Domain]
    settings: Settings = Settings()
    source: str = "<policies>"
    sha256: str = ""
    loaded_at: float = 0.0  # wall-clock seconds
    generation: int = 0  # set by the holder: 1 for the first load, +1 per successful reload
    #: The ``[http]`` part: how an HTTP request becomes descriptors (None: none given; the
    #: middleware then needs one).
    http: HTTPRules | None = None
    #: The hooks the ``[http]`` part names that were not imported (loaded with
    #: ``import_hooks=False``, as ``check-config`` does): their references, unchecked.
    unchecked_hooks: tuple[str, ...] = ()

    @property
    def rule_count(self) -> int:
        return sum(len(d.rules) for d in self.domains.values())

    @property
    def limit_count(self) -> int:
        names = {p.limit.name for d in self.domains.values() for r in d.rules for p in r.limits}
        return len(names)

    def summary(self) -> str:
        n = len(self.domains)
        return (f"{n} domain{'s' if n != 1 else ''}, {self.rule_count} rules, "
                f"{self.limit_count} limits")

    def describe(self) -> dict[str, Any]:
        """A JSON-ready document of every domain, rule and limit (``GET /v1/policies``)."""
        return {
            "generation": self.generation,
            "source": self.source,
            "sha256": self.sha256,
            "loaded_at": _iso(self.loaded_at),
            "service": {
                "failure": self.settings.failure,
                "fallback_share": _num(self.settings.fallback_share),
                "shadow_mode": self.settings.shadow_mode,
                "legacy_headers": self.settings.legacy_headers,
                "max_cost": _num(self.settings.max_cost),
                "allow_overrides": self.settings.allow_overrides,
                "unknown_domain": self.settings.unknown_domain,
            },
            "domains": {
                name: {
                    "description": d.description,
                    "shadow_mode": d.shadow_mode,
                    "descriptors": [_describe_node(n) for n in d.root.nodes],
                }
                for name, d in self.domains.items()
            },
        }


def describe_limit(p: PolicyLimit) -> dict[str, Any]:
    """The JSON form of one limit, as ``GET /v1/policies`` documents it."""
    lim = p.limit
    out: dict[str, Any] = {
        "name": lim.name,
        "algorithm": lim.algorithm,
        "rate": str(lim.rate),
        "per_second": _num(lim.per_second),
        "quota": lim.quota,
        "window_seconds": _num(lim.window),
    }
    if lim.burst is not None:
        out["burst"] = _num(lim.burst)
    if lim.nodelay:
        out["nodelay"] = True
    if lim.delay:
        out["delay"] = lim.delay
    out["counter"] = ("per descriptor" if p.by is None else "global" if p.by == ()
                      else "shared by " + ", ".join(pat for _, pat in p.by.patterns)
                      if isinstance(p.by, Shared) else "by " + ", ".join(p.by))
    if p.description:
        out["description"] = p.description
    if p.label:
        out["label"] = p.label
    return out


def _describe_node(n: Node) -> dict[str, Any]:
    out: dict[str, Any] = {"key": n.key}
    if n.value is not None:
        out["value"] = n.value
    r = n.rule
    if r is not None:
        out["rule"] = r.name
        if r.description:
            out["description"] = r.description
        if r.unlimited:
            out["unlimited"] = True
        else:
            out["limits"] = [describe_limit(p) for p in r.limits]
        if r.shadow_mode:
            out["shadow_mode"] = True
        if r.cost != 1:
            out["cost"] = _num(r.cost)
        if r.replaces:
            out["replaces"] = list(r.replaces)
        if r.detailed_metric:
            out["detailed_metric"] = True
        if r.failure is not None:
            out["failure"] = r.failure
    if n.children.nodes:
        out["descriptors"] = [_describe_node(c) for c in n.children.nodes]
    return out


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else round(x, 9)


def _iso(t: float) -> str | None:
    if not t:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def iter_rules(policies: Policies) -> Iterator[Rule]:
    """Every rule of every domain, in file order."""
    for d in policies.domains.values():
        yield from d.rules
