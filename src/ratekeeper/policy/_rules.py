"""The rules of a policies model: limits as policies apply them, descriptor rule trees,
matching, and the descriptors a request carries. Values only: no loading, no deciding.

The model is envoyproxy/ratelimit's, generalised to every ratekeeper algorithm (see
`_model` for the snapshot that holds these per domain). Matching (`Domain.match`): at each
level a descriptor entry's key and value are looked up *exactly* first, then against
*wildcard* values (each ``*`` matches any run of characters, as envoyproxy/ratelimit's
``wildcardMatch``), then against the key's *default* rule (no ``value``); there is no
backtracking, and a descriptor with more entries than the rules are deep matches nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from .._types import Limit
from ..core import FailurePolicy
from ._keys import By

__all__ = [
    "DescriptorRequest",
    "Domain",
    "Level",
    "Node",
    "Override",
    "PolicyLimit",
    "Rule",
    "drop_replaced",
    "make_level",
    "wildcard_match",
]


@dataclass(frozen=True, slots=True)
class PolicyLimit:
    """A `Limit` as a policy applies it: `by` says which entries key its counters.

    ``by=None``: every entry of the matched descriptor (one counter per distinct descriptor);
    ``by=()``: a single counter (``scope = "global"``); a tuple of keys: the entries with these
    keys; a `Shared`: envoyproxy/ratelimit's ``share_threshold`` (`ratekeeper.policy._keys`).
    `label` is the name the configuration gave the limit (a TOML named limit or ``name``,
    envoyproxy/ratelimit's ``rate_limit.name``), "" when it gave none: what Envoy's
    ``current_limit.name`` reports and what ``replaces`` refers to.
    """

    limit: Limit
    by: By = None
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
    #: envoyproxy/ratelimit's ``quota_mode``: charged and answered OVER_LIMIT in its own
    #: status, but the answer is OVER_LIMIT only when every quota-mode descriptor of the
    #: request is over (or an ordinary one is), as its service's shouldRateLimitWorker.
    quota_mode: bool = False
    cost: float = 1.0
    description: str = ""
    location: str = ""
    #: The name the configuration gave the rule's limit (YAML ``rate_limit.name``; ``""``:
    #: none), which other rules' `replaces` refer to.
    label: str = ""
    #: The labels of the rules this one replaces when both match one request (``replaces``).
    replaces: tuple[str, ...] = ()
    #: envoyproxy/ratelimit's ``detailed_metric`` (kept for describe(); ratekeeper's metrics
    #: stay one series per rule, so that no label value comes from a request).
    detailed_metric: bool = False
    #: This rule's store failure policy (None: the ``[service]`` one): a login limit fails
    #: closed while the rest fail open.
    failure: FailurePolicy | None = None
    #: The unit of a rule of 0 requests per unit (envoyproxy/ratelimit's always over the
    #: limit, keeping no counter: `limits` is empty): ``"minute"`` etc. The Envoy answer
    #: still names that limit, ``current_limit {0, unit}`` with the time to its window's end.
    zero_unit: str = ""
    #: The `Limit` of each of `limits` (for the engine, which reads them on every check).
    limit_objs: tuple[Limit, ...] = field(init=False, repr=False, default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "limit_objs", tuple(p.limit for p in self.limits))

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


def wildcard_match(parts: Sequence[str], value: str) -> bool:
    """Whether `value` matches a wildcard pattern split on ``*`` (``"a*b*c"`` -> a, b, c).

    Each ``*`` matches any run of characters, the empty one included: the value starts with
    the first part, ends with the last, and holds the middle ones in order between them, as
    envoyproxy/ratelimit's ``wildcardMatch`` (``src/config/config_impl.go``).
    """
    if len(parts) == 1:
        return parts[0] == value
    first, last = parts[0], parts[-1]
    if len(value) < sum(map(len, parts)) or not value.startswith(first) \
            or not value.endswith(last):
        return False
    pos, end = len(first), len(value) - len(last)
    for part in parts[1:-1]:
        i = value.find(part, pos, end)
        if i < 0:
            return False
        pos = i + len(part)
    return True


@dataclass(frozen=True, slots=True, eq=False)
class Level:
    """The rules at one depth: exact values, wildcard patterns, defaults (no value).

    `patterns` holds, per key, the wildcard values split on ``*`` and tried in order: the
    first that matches wins. The YAML loader keeps file order (as envoyproxy/ratelimit); the
    TOML loader puts the most literal characters first (so ``admin-*`` wins over ``adm*``),
    ties in file order.
    """

    nodes: tuple[Node, ...] = ()  # in file order, for documentation
    exact: Mapping[tuple[str, str], Node] = field(default_factory=lambda: MappingProxyType({}))
    patterns: Mapping[str, tuple[tuple[tuple[str, ...], Node], ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    default: Mapping[str, Node] = field(default_factory=lambda: MappingProxyType({}))
    #: envoyproxy/ratelimit's matching (a YAML level; None for TOML): its map of composite
    #: keys, ``key`` or ``key_value``, and its wildcard patterns on ``key_value`` in file
    #: order, split on ``*``.
    composite: Mapping[str, Node] | None = None
    composite_patterns: tuple[tuple[tuple[str, ...], Node], ...] = ()

    def find(self, key: str, value: str) -> Node | None:
        """The node for one entry: exact value, else the first matching wildcard, else
        default."""
        composite = self.composite
        if composite is not None:
            # As the Go service (GetLimit in src/config/config_impl.go): "key_value", else
            # the first wildcard matching "key_value", else "key".
            final = key + "_" + value
            node = composite.get(final)
            if node is not None:
                return node
            for parts, n in self.composite_patterns:
                if wildcard_match(parts, final):
                    return n
            return composite.get(key)
        node = self.exact.get((key, value))
        if node is not None:
            return node
        pats = self.patterns.get(key)
        if pats is not None:
            for parts, n in pats:
                if wildcard_match(parts, value):
                    return n
        return self.default.get(key)


_EMPTY_LEVEL = Level()


def composite_key(key: str, value: str | None) -> str:
    """envoyproxy/ratelimit's name of a configured descriptor at its level: ``key``, or
    ``key_value`` when it has a value (two descriptors of one name are an error there)."""
    return key if value is None else f"{key}_{value}"


def make_level(nodes: Sequence[Node],
               order: Callable[[tuple[str, ...]], int] | None = None, *,
               composite: bool = False) -> Level:
    """A `Level` of `nodes` (file order): a value with a ``*`` is a wildcard pattern, tried
    in file order, or sorted by `order` of its parts (stable: ties keep file order).
    `composite`: matched as envoyproxy/ratelimit matches (`Level.composite`); the names
    (`composite_key`) must then be distinct."""
    exact: dict[tuple[str, str], Node] = {}
    patterns: dict[str, list[tuple[tuple[str, ...], Node]]] = {}
    default: dict[str, Node] = {}
    for node in nodes:
        if node.value is None:
            default[node.key] = node
        elif "*" in node.value:
            patterns.setdefault(node.key, []).append((tuple(node.value.split("*")), node))
        else:
            exact[(node.key, node.value)] = node
    if order is not None:
        key = order
        patterns = {k: sorted(v, key=lambda p: key(p[0])) for k, v in patterns.items()}
    names: Mapping[str, Node] | None = None
    wildcards: tuple[tuple[tuple[str, ...], Node], ...] = ()
    if composite:
        names = MappingProxyType({composite_key(n.key, n.value): n for n in nodes})
        wildcards = tuple((tuple(composite_key(n.key, n.value).split("*")), n) for n in nodes
                          if n.value is not None and "*" in n.value)
    return Level(tuple(nodes), MappingProxyType(exact),
                 MappingProxyType({k: tuple(v) for k, v in patterns.items()}),
                 MappingProxyType(default), names, wildcards)


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


def drop_replaced(rules: Sequence[Rule | None]) -> list[Rule | None]:
    """The rules a request's descriptors matched, with the replaced ones set to None.

    envoyproxy/ratelimit (``constructLimitsToCheck`` in ``src/service/ratelimit.go``): every
    matched rule's ``replaces`` (unlimited ones' too) are collected first, then each matched
    rule with a limit labelled so is not applied -- its descriptor is answered as one that
    matched nothing. Rules that replace nothing cost one scan.
    """
    replacing = {name for r in rules if r is not None for name in r.replaces}
    if not replacing:
        return list(rules)
    return [None if r is not None and r.label and r.label in replacing else r for r in rules]


@dataclass(frozen=True, slots=True)
class Override:
    """Envoy's per-descriptor limit override: a fixed window of `requests_per_unit`."""

    requests_per_unit: int
    unit: str  # a key of UNIT_SECONDS


class DescriptorRequest(NamedTuple):
    """One validated descriptor of a request: its entries and, optionally, its own hits.
    (A NamedTuple: the middleware builds one per descriptor per request.)"""

    entries: tuple[tuple[str, str], ...]
    hits: float | None = None
    override: Override | None = None
    #: The rule to apply instead of matching the domain's (a route decorator's limits).
    rule: Rule | None = None
