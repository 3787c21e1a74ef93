"""The policies model: an immutable snapshot of domains, rule trees and limits, and matching.

The model is envoyproxy/ratelimit's, generalised to every ratekeeper algorithm:

- a **domain** is a namespace of rules (Envoy's ``domain``: one per application or gateway);
- a request carries **descriptors**, each an ordered list of ``(key, value)`` entries such as
  ``[("user", "alice"), ("op", "export")]``;
- the policies hold a tree of **descriptor rules** per domain. A request descriptor matches the
  rule reached by walking its entries one level at a time (`Domain.match`): at each level the
  entry's key and value are looked up *exactly* first, then against *wildcard* values
  (``value = "admin-*"``, a prefix match; the longest prefix wins), then against the key's
  *default* rule (a rule with no ``value`` matches every value). There is no backtracking,
  and a descriptor with more entries than the rules are deep matches nothing -- both exactly
  as envoyproxy/ratelimit;
- a matched rule applies one or more **limits** (any algorithm; all are decided together,
  all-or-nothing), or is ``unlimited``, and may be in ``shadow_mode`` (decided and counted,
  but always answered OK) and charge a ``cost`` per hit.

`_loader` builds these values from a TOML file (with located errors), `_keys` names a
limit's counters. Nothing here does I/O.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from .._errors import ConfigError
from .._types import Limit
from ..core import FailurePolicy

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
    "iter_rules",
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
    """One problem in a policies file: where (a TOML table path) and what."""

    location: str
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}" if self.location else self.message


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


@dataclass(frozen=True, slots=True)
class PolicyLimit:
    """A `Limit` as a policy applies it: `by` says which entries key its counters.

    ``by=None``: every entry of the matched descriptor (one counter per distinct descriptor);
    ``by=()``: a single counter (``scope = "global"``); otherwise the entries with these keys.
    `label` is the name the configuration gave the limit (a TOML named limit or ``name``,
    envoyproxy/ratelimit's ``rate_limit.name``), "" when it gave none: what Envoy's
    ``current_limit.name`` reports.
    """

    limit: Limit
    by: tuple[str, ...] | None = None
    description: str = ""
    label: str = ""


@dataclass(frozen=True, slots=True, eq=False)
class Rule:
    """What a matched descriptor gets: limits, or unlimited; shadow mode; a cost per hit."""

    domain: str
    name: str  # unique in the domain; the `rule` label of metrics
    path: tuple[tuple[str, str | None], ...]  # (key, value or pattern or None=default)
    limits: tuple[PolicyLimit, ...]
    unlimited: bool = False
    shadow_mode: bool = False
    cost: float = 1.0
    description: str = ""
    location: str = ""

    def __repr__(self) -> str:
        what = "unlimited" if self.unlimited else ", ".join(p.limit.name for p in self.limits)
        return f"Rule({self.domain}:{self.name} -> {what})"


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    """One descriptor entry of the rule tree: its rule (None for a pure branch) and children."""

    key: str
    value: str | None
    rule: Rule | None
    children: Level


@dataclass(frozen=True, slots=True, eq=False)
class Level:
    """The rules at one depth: exact values, wildcard prefixes, defaults (no value)."""

    nodes: tuple[Node, ...] = ()  # in file order, for documentation
    exact: Mapping[tuple[str, str], Node] = field(default_factory=lambda: MappingProxyType({}))
    prefixes: Mapping[str, tuple[tuple[str, Node], ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    default: Mapping[str, Node] = field(default_factory=lambda: MappingProxyType({}))

    def find(self, key: str, value: str) -> Node | None:
        """The node for one entry: exact value, else longest wildcard prefix, else default."""
        node = self.exact.get((key, value))
        if node is not None:
            return node
        pre = self.prefixes.get(key)
        if pre is not None:
            for prefix, n in pre:
                if value.startswith(prefix):
                    return n
        return self.default.get(key)


_EMPTY_LEVEL = Level()


@dataclass(frozen=True, slots=True, eq=False)
class Domain:
    """A domain's rule tree and its named limits."""

    name: str
    root: Level
    rules: tuple[Rule, ...]
    limits: Mapping[str, PolicyLimit]
    description: str = ""
    shadow_mode: bool = False

    def match(self, entries: Sequence[tuple[str, str]]) -> Rule | None:
        """The rule a descriptor matches, or None (no rule: the descriptor is not limited)."""
        level = self.root
        node: Node | None = None
        for key, value in entries:
            node = level.find(key, value)
            if node is None:
                return None
            level = node.children
        return None if node is None else node.rule


@dataclass(frozen=True, slots=True, eq=False)
class Policies:
    """An immutable snapshot of the policies. The service swaps whole snapshots on reload."""

    domains: Mapping[str, Domain]
    settings: Settings = Settings()
    source: str = "<policies>"
    sha256: str = ""
    loaded_at: float = 0.0  # wall-clock seconds
    generation: int = 0  # set by the holder: 1 for the first load, +1 per successful reload

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
                      else "by " + ", ".join(p.by))
    if p.description:
        out["description"] = p.description
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
