"""envoyproxy/ratelimit's YAML configuration, read as it is, into a `Policies` snapshot.

A team on envoyproxy/ratelimit keeps one YAML file per domain in its runtime directory
(``RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml``)::

    domain: api
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 60, name: per-user}
      - key: path
        value: /api*v1               # a wildcard: each * matches any run of characters
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 10}

`load_envoy_config` reads such a directory (every ``*.yaml``/``*.yml`` file under it, in
path order, dot-files skipped) or one file, and builds the same `Domain`/`Rule`/`Limit`
values as the TOML loader, so the same engine decides. What each key becomes:

- ``rate_limit`` {``unit``, ``requests_per_unit``}: a ``fixed-window`` limit of
  requests_per_unit per unit (units in seconds as envoyproxy/ratelimit counts them: week
  7 days, month 30, year 365), one counter per distinct descriptor;
  ``requests_per_unit: 0``: always over the limit; ``unlimited: true``: OK, no counter;
  ``name``: the limit's label (Envoy's ``current_limit.name``); ``replaces: [{name}]``: when
  this rule and a rule whose limit is so named both match one request, the named one is not
  applied;
- ratekeeper's opt-in, under ``rate_limit``: ``algorithm`` (any of `ratekeeper.ALGORITHMS`)
  and its ``burst``, ``nodelay``, ``delay``. envoyproxy/ratelimit rejects these keys, so a
  file that uses them is clearly ratekeeper's;
- a descriptor without ``rate_limit``: matched, no limit (a whitelist, or a branch);
- ``shadow_mode``: decided and counted, always answered OK; ``detailed_metric``,
  ``value_to_metric``, ``metadata``: accepted (metrics and response metadata only);
  ``share_threshold`` (wildcard values only): every value the pattern matches shares one
  counter instead of one each; ``quota_mode``: charged, its own status OVER_LIMIT when over,
  but the answer is OVER_LIMIT only when every quota-mode descriptor of the request is (or
  an ordinary one is), as envoyproxy/ratelimit.

Every problem is reported with its file, line and key path (`ConfigIssue`), all of them at
once, as ``ratekeeper check-config`` prints them. PyYAML's C loader (libyaml) is used where
the wheel has it, the pure-Python one otherwise.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from .._errors import RateKeeperError
from .._rates import Rate
from .._types import ALGORITHMS, Limit
from ._keys import Shared
from ._loader import MAX_DEPTH, MAX_FILE_BYTES, read_bounded
from ._model import (
    ConfigIssue,
    Policies,
    PolicyError,
    Settings,
)
from ._names import _closest, _name_part, _name_problem
from ._rules import (
    Domain,
    Level,
    Node,
    PolicyLimit,
    Rule,
    composite_key,
    make_level,
)

try:
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - a PyYAML built without libyaml
    _Loader = yaml.SafeLoader

__all__ = ["UNIT_SECONDS", "YAML_SUFFIXES", "load_envoy_config", "parse_envoy_config"]

#: Seconds per envoyproxy/ratelimit unit (``utils.UnitToDivider``: month 30 days, year 365).
UNIT_SECONDS: dict[str, int] = {
    "second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400,
    "month": 30 * 86400, "year": 365 * 86400,
}
YAML_SUFFIXES = (".yaml", ".yml")
_MAX_RPU = 2**32 - 1  # requests_per_unit is a uint32

_ROOT_KEYS = ("domain", "descriptors")
_DESCRIPTOR_KEYS = ("key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
                    "detailed_metric", "value_to_metric", "share_threshold", "metadata")
_GO_LIMIT_KEYS = ("unit", "requests_per_unit", "unlimited", "name", "replaces")
_OPT_IN_KEYS = ("algorithm", "burst", "nodelay", "delay")
_LIMIT_KEYS = (*_GO_LIMIT_KEYS, *_OPT_IN_KEYS)

_STR = "tag:yaml.org,2002:str"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_NULL = "tag:yaml.org,2002:null"


def load_envoy_config(path: str | Path, *, merge_domains: bool = False) -> Policies:
    """Read a directory of envoyproxy/ratelimit YAML files, or one file, into `Policies`.

    A domain defined in two files is an error, unless `merge_domains` (envoyproxy/ratelimit's
    ``MERGE_DOMAIN_CONFIG``): then their descriptors join. Raises `PolicyError` listing every
    problem with its file, line and key path.
    """
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.suffix.lower() in YAML_SUFFIXES
                       and f.is_file()
                       and not any(part.startswith(".") for part in f.relative_to(p).parts))
        if not files:
            raise PolicyError([ConfigIssue("", f"no {' or '.join(YAML_SUFFIXES)} files in "
                                               "this directory (envoyproxy/ratelimit's runtime "
                                               "config/ directory holds one file per domain)")],
                              str(p))
    else:
        files = [p]
    texts: list[tuple[str, bytes]] = []
    issues: list[ConfigIssue] = []
    left = MAX_FILE_BYTES  # for the directory as a whole
    for f in files:
        try:
            raw = read_bounded(f, left)
        except OSError as e:
            issues.append(ConfigIssue("", f"cannot read the file: {e.strerror or e}",
                                      file=str(f)))
            continue
        if raw is None:
            issues.append(ConfigIssue("", f"the policies are larger than {MAX_FILE_BYTES} "
                                          "bytes (the files of a directory together), the "
                                          "most ratekeeper reads", file=str(f)))
            break
        left -= len(raw)
        texts.append((str(f), raw))
    if issues:
        raise PolicyError(issues, str(p))
    return parse_envoy_config(texts, source=str(p), merge_domains=merge_domains)


def parse_envoy_config(files: Sequence[tuple[str, bytes | str]], *, source: str = "<policies>",
                       merge_domains: bool = False) -> Policies:
    """Parse ``(name, text)`` YAML files (one domain each) into `Policies`."""
    digest = hashlib.sha256()
    b = _Builder(merge_domains)
    for name, raw in files:
        data = raw if isinstance(raw, bytes) else raw.encode()
        digest.update(name.encode() + b"\0" + data + b"\0")
        b.add_file(name, data)
    domains = b.build()
    if b.issues:
        raise PolicyError(b.issues, source)
    return Policies(MappingProxyType(domains), Settings(), source=source,
                    sha256=digest.hexdigest(), loaded_at=time.time())


#: The most nodes one file may expand to, its aliases followed (each use of an anchor
#: counts its nodes again): a file of some hundred thousand limits, not a "billion laughs".
MAX_NODES = 2_000_000
_TOO_DEEP = (f"the policies are nested too deeply; at most {MAX_DEPTH} levels of mappings "
             "and lists are accepted (an alias inside its own anchor nests without end): "
             "flatten the file")


def _shape_problem(root: yaml.Node | None) -> str | None:
    """Why a composed file is refused before it is walked (which recurses, and follows
    aliases): deeper than `MAX_DEPTH`, or more than `MAX_NODES` with aliases expanded.
    One iterative walk that stops at the first limit passed."""
    if root is None:
        return None
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if depth > MAX_DEPTH:
            return _TOO_DEEP
        if nodes > MAX_NODES:
            return (f"the policies expand to more than {MAX_NODES} nodes, their aliases "
                    "followed: use fewer aliases of large anchors")
        if isinstance(node, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
    return None


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return {_STR: "a string", _BOOL: "a boolean", _INT: "a number", _FLOAT: "a number",
            _NULL: "null"}.get(node.tag, node.tag)


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == _NULL


@dataclass(slots=True)
class _Descriptor:
    """One ``descriptors`` item, from the file it came from."""

    file: str
    loc: str
    node: yaml.MappingNode


@dataclass(slots=True)
class _DomainCtx:
    name: str
    file: str
    rules: list[Rule] = field(default_factory=list)
    items: list[_Descriptor] = field(default_factory=list)


class _Builder:
    """Walks the YAML node trees (which keep line numbers), collecting every issue."""

    def __init__(self, merge_domains: bool) -> None:
        self.merge = merge_domains
        self.issues: list[ConfigIssue] = []
        self.domains: dict[str, _DomainCtx] = {}
        self.file = ""

    def err(self, loc: str, node: yaml.Node | None, msg: str) -> None:
        self.issues.append(ConfigIssue(loc, msg, None if node is None else _line(node),
                                       self.file))

    # nodes -------------------------------------------------------------------------------

    def items(self, loc: str, node: yaml.MappingNode,
              known: Sequence[str]) -> Iterator[tuple[str, yaml.Node]]:
        """A mapping's (key, value node) pairs; unknown, duplicate and non-string keys are
        reported and skipped."""
        seen: dict[str, int] = {}
        for knode, vnode in node.value:
            if not isinstance(knode, yaml.ScalarNode) or knode.tag != _STR:
                self.err(loc, knode, f"a key must be a string, got {_kind(knode)} "
                                     f"{getattr(knode, 'value', '')!r}")
                continue
            k = str(knode.value)
            here = _join(loc, k)
            if k in seen:
                self.err(here, knode, f"key {k!r} given twice (first on line {seen[k]})")
                continue
            seen[k] = _line(knode)
            if k not in known:
                hint = _closest(k, known)
                self.err(here, knode, f"unknown key {k!r}"
                         + (f" (did you mean {hint!r}?)" if hint else "")
                         + f"; expected one of: {', '.join(known)}")
                continue
            yield k, vnode

    def text(self, loc: str, node: yaml.Node) -> str | None:
        """A scalar as envoyproxy/ratelimit reads it into a string field: its text as
        written (``value: 200`` is "200"); null is ""."""
        if not isinstance(node, yaml.ScalarNode):
            self.err(loc, node, f"must be a string, got {_kind(node)}")
            return None
        return "" if node.tag == _NULL else str(node.value)

    def flag(self, loc: str, node: yaml.Node) -> bool:
        if isinstance(node, yaml.ScalarNode) and node.tag == _BOOL:
            return bool(yaml.constructor.SafeConstructor.bool_values[str(node.value).lower()])
        if _is_null(node):
            return False
        self.err(loc, node, f"must be true or false, got {_kind(node)} "
                            f"{getattr(node, 'value', '')!r}")
        return False

    def number(self, loc: str, node: yaml.Node) -> float | None:
        if isinstance(node, yaml.ScalarNode) and node.tag in (_INT, _FLOAT):
            v = yaml.safe_load(f"{node.value}\n")
            if isinstance(v, (int, float)):
                return float(v)
        self.err(loc, node, f"must be a number, got {_kind(node)} "
                            f"{getattr(node, 'value', '')!r}")
        return None

    # files -------------------------------------------------------------------------------

    def add_file(self, name: str, raw: bytes) -> None:
        self.file = name
        try:
            root = yaml.compose(raw.decode("utf-8"), Loader=_Loader)
        except UnicodeDecodeError as e:
            self.issues.append(ConfigIssue("", f"the file is not UTF-8 text ({e.reason} at "
                                               f"byte {e.start})", file=name))
            return
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            what = " ".join(x for x in (e.context, e.problem) if x)
            self.issues.append(ConfigIssue("", f"not valid YAML: {what}",
                                           None if mark is None else mark.line + 1, name))
            return
        except yaml.YAMLError as e:
            self.issues.append(ConfigIssue("", f"not valid YAML: {e}", file=name))
            return
        except RecursionError:  # the pure-Python composer recurses per level
            self.issues.append(ConfigIssue("", _TOO_DEEP, file=name))
            return
        problem = _shape_problem(root)
        if problem is not None:
            self.issues.append(ConfigIssue("", problem, file=name))
            return
        if root is None or not isinstance(root, yaml.MappingNode):
            self.issues.append(ConfigIssue(
                "", "must be a mapping with `domain` and `descriptors` (one domain per file)",
                None if root is None else _line(root), name))
            return
        domain: str | None = None
        dnode: yaml.Node | None = None
        descriptors: yaml.Node | None = None
        for k, v in self.items("", root, _ROOT_KEYS):
            if k == "domain":
                domain, dnode = self.text("domain", v), v
            else:
                descriptors = v
        if not domain:
            if domain is not None or dnode is None:
                self.err("domain", dnode or root,
                         "the file needs a non-empty `domain` (config file cannot have empty "
                         "domain)")
            return
        ctx = self.domains.get(domain)
        if ctx is None:
            ctx = self.domains[domain] = _DomainCtx(domain, name)
        elif not self.merge:
            self.err("domain", dnode, f"duplicate domain {domain!r}: already defined in "
                                      f"{ctx.file} (one file per domain, or merge them as "
                                      "envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does)")
            return
        if descriptors is None or _is_null(descriptors):
            return  # a domain without descriptors limits nothing (as envoyproxy/ratelimit)
        for loc, item in self.list_of_maps("descriptors", descriptors):
            ctx.items.append(_Descriptor(name, loc, item))

    def list_of_maps(self, loc: str,
                     node: yaml.Node) -> Iterator[tuple[str, yaml.MappingNode]]:
        if not isinstance(node, yaml.SequenceNode):
            self.err(loc, node, f"must be a list of descriptors (`- key: ...`), got "
                                f"{_kind(node)}")
            return
        for i, item in enumerate(node.value):
            iloc = f"{loc}[{i}]"
            if not isinstance(item, yaml.MappingNode):
                self.err(iloc, item, f"must be a mapping (`key: ...`), got {_kind(item)} "
                                     f"{getattr(item, 'value', '')!r}")
                continue
            yield iloc, item

    # domains and descriptors -------------------------------------------------------------

    def build(self) -> dict[str, Domain]:
        out: dict[str, Domain] = {}
        for name, ctx in self.domains.items():
            root = self.level(ctx, [(d.file, d.loc, d.node) for d in ctx.items], (), ())
            out[name] = Domain(name, root, tuple(ctx.rules), MappingProxyType({}))
        return out

    def level(self, ctx: _DomainCtx, items: Sequence[tuple[str, str, yaml.MappingNode]],
              path: tuple[tuple[str, str | None], ...],
              shared: tuple[bool, ...]) -> Level:
        nodes: list[Node] = []
        # composite key -> (key, value), where
        seen: dict[str, tuple[tuple[str, str | None], str]] = {}
        for file, loc, item in items:
            self.file = file
            node = self.descriptor(ctx, loc, item, path, parent_shared=shared, seen=seen)
            if node is not None:
                nodes.append(node)
        # matched on composite keys, wildcards in file order, as envoyproxy/ratelimit
        return make_level(nodes, composite=True)

    def descriptor(self, ctx: _DomainCtx, loc: str, item: yaml.MappingNode,
                   parent: tuple[tuple[str, str | None], ...], *, parent_shared: tuple[bool, ...],
                   seen: dict[str, tuple[tuple[str, str | None], str]]) -> Node | None:
        fields = dict(self.items(loc, item, _DESCRIPTOR_KEYS))
        knode = fields.get("key")
        key = None if knode is None else self.text(_join(loc, "key"), knode)
        if not key:
            if knode is None or key is not None:
                self.err(_join(loc, "key") if knode is not None else loc, knode or item,
                         "a descriptor needs a non-empty `key` (descriptor has empty key)")
            return None
        if "*" in key:
            self.err(_join(loc, "key"), knode, f"key {key!r} contains '*': only a value can "
                                               "be a wildcard pattern")
            return None
        vnode = fields.get("value")
        value = None if vnode is None else self.text(_join(loc, "value"), vnode)
        value = value or None  # an empty value is no value (a default rule), as Go reads it
        ident = composite_key(key, value)  # the Go service's name for it at this level
        if ident in seen:
            first, where = seen[ident]
            self.err(loc, item, f"duplicate descriptor key {key!r}"
                     + (f" value {value!r}" if value is not None else " (no value)")
                     + f": already defined at {where}"
                     + ("" if first == (key, value) else
                        f" as key {first[0]!r}" + (f" value {first[1]!r}" if first[1] else "")
                        + f": both are {ident!r} to envoyproxy/ratelimit, which names a "
                        "descriptor key_value"))
            return None
        seen[ident] = ((key, value), loc if self.file == ctx.file else f"{self.file}: {loc}")
        path = (*parent, (key, value))
        flags = {k: self.flag(_join(loc, k), fields[k])
                 for k in ("shadow_mode", "quota_mode", "detailed_metric", "value_to_metric",
                           "share_threshold") if k in fields}
        share = flags.get("share_threshold", False)
        if share and (value is None or "*" not in value):
            self.err(_join(loc, "share_threshold"), fields["share_threshold"],
                     "share_threshold applies to wildcard values only (a value with '*'), "
                     f"and this descriptor's value is {value!r}")
            share = False
        if "metadata" in fields and not isinstance(fields["metadata"], yaml.MappingNode) \
                and not _is_null(fields["metadata"]):
            self.err(_join(loc, "metadata"), fields["metadata"],
                     f"must be a mapping, got {_kind(fields['metadata'])}")
        shared = (*parent_shared, share)
        rule = None
        if "rate_limit" in fields and not _is_null(fields["rate_limit"]):
            rule = self.rule(ctx, _join(loc, "rate_limit"), fields["rate_limit"], path, shared,
                             shadow=flags.get("shadow_mode", False),
                             quota=flags.get("quota_mode", False),
                             detailed=flags.get("detailed_metric", False))
        children = Level()
        if "descriptors" in fields and not _is_null(fields["descriptors"]):
            subs = [(self.file, sloc, s) for sloc, s in
                    self.list_of_maps(_join(loc, "descriptors"), fields["descriptors"])]
            children = self.level(ctx, subs, path, shared)
        return Node(key, value, rule, children)

    def rule(self, ctx: _DomainCtx, loc: str, node: yaml.Node,
             path: tuple[tuple[str, str | None], ...], shared: tuple[bool, ...], *,
             shadow: bool, quota: bool, detailed: bool) -> Rule | None:
        file = self.file
        if not isinstance(node, yaml.MappingNode):
            self.err(loc, node, f"must be a mapping (unit, requests_per_unit, ...), got "
                                f"{_kind(node)}")
            return None
        f = dict(self.items(loc, node, _LIMIT_KEYS))
        ok = True
        unlimited = self.flag(_join(loc, "unlimited"), f["unlimited"]) \
            if "unlimited" in f else False
        unit = None if "unit" not in f else self.text(_join(loc, "unit"), f["unit"])
        unit_ok = unit is not None and unit.lower() in UNIT_SECONDS
        if unlimited:
            if unit_ok:
                self.err(_join(loc, "unit"), f["unit"], "an unlimited rate_limit takes no "
                         "unit (should not specify rate limit unit when unlimited): remove it")
                ok = False
            for k in _OPT_IN_KEYS:
                if k in f:
                    self.err(_join(loc, k), f[k], f"an unlimited rate_limit takes no {k!r}")
                    ok = False
        elif not unit_ok:
            self.err(_join(loc, "unit") if "unit" in f else loc, f.get("unit", node),
                     (f"invalid rate limit unit {unit!r}" if unit else "missing `unit`")
                     + f": one of {', '.join(UNIT_SECONDS)}")
            ok = False
        rpu = 0
        if "requests_per_unit" in f:
            n = self.number(_join(loc, "requests_per_unit"), f["requests_per_unit"])
            if n is None:
                ok = False
            elif not (n.is_integer() and 0 <= n <= _MAX_RPU):
                self.err(_join(loc, "requests_per_unit"), f["requests_per_unit"],
                         f"must be a whole number from 0 to {_MAX_RPU}, got "
                         f"{f['requests_per_unit'].value}")
                ok = False
            else:
                rpu = int(n)
        label = "" if "name" not in f else (self.text(_join(loc, "name"), f["name"]) or "")
        replaces: list[str] = []
        if "replaces" in f and not _is_null(f["replaces"]):
            for rloc, r in self.list_of_maps(_join(loc, "replaces"), f["replaces"]):
                rf = dict(self.items(rloc, r, ("name",)))
                rname = "" if "name" not in rf else self.text(_join(rloc, "name"), rf["name"])
                if not rname:
                    self.err(_join(rloc, "name"), rf.get("name", r),
                             "a replaces entry needs the `name` of the limit it replaces "
                             "(should not have an empty replaces entry)")
                    ok = False
                elif rname == label:
                    self.err(_join(rloc, "name"), rf["name"],
                             f"a limit cannot replace itself ({rname!r}: replaces should "
                             "not contain name of same descriptor)")
                    ok = False
                else:
                    replaces.append(rname)
        rname = ".".join(_name_part(k) + ("" if v is None else "_" + _name_part(v))
                         for k, v in path)
        state = f"{ctx.name}.{rname}"
        problem = _name_problem(state)
        if problem:
            self.err(loc, node, f"limit name {state!r} {problem}")
            ok = False
        by = self.counter_by(path, shared)
        limits: tuple[PolicyLimit, ...] = ()
        if ok and not unlimited and rpu > 0:
            assert unit is not None
            lim = self.limit(loc, node, f, state,
                             rate=Rate(rpu, float(UNIT_SECONDS[unit.lower()])), by=by)
            if lim is None:
                return None
            limits = (PolicyLimit(lim, by, "", label),)
        elif ok and not unlimited:  # requests_per_unit 0: always over the limit, no counter
            for k in _OPT_IN_KEYS:
                if k in f:
                    self.err(_join(loc, k), f[k], "requests_per_unit 0 is always over the "
                             f"limit and keeps no counter: {k!r} has nothing to apply to")
                    ok = False
        if not ok:
            return None
        zero_unit = unit.lower() if not (limits or unlimited) and unit else ""
        rule = Rule(ctx.name, rname, path, limits, unlimited=unlimited, shadow_mode=shadow,
                    quota_mode=quota, location=f"{file}: {loc}", label=label,
                    replaces=tuple(replaces),
                    detailed_metric=detailed, zero_unit=zero_unit)
        ctx.rules.append(rule)
        return rule

    def counter_by(self, path: tuple[tuple[str, str | None], ...],
                   shared: tuple[bool, ...]) -> Shared | None:
        """The entries that key the counter: all (None), or all with the values matched
        through a share_threshold wildcard replaced by its pattern (`Shared`)."""
        if not any(shared):
            return None
        return Shared(tuple((i, composite_key(k, v)) for i, ((k, v), s)
                            in enumerate(zip(path, shared, strict=True)) if s))

    def limit(self, loc: str, node: yaml.Node, f: dict[str, yaml.Node], state: str, *,
              rate: Rate, by: Shared | None) -> Limit | None:
        algorithm = "fixed-window"
        if "algorithm" in f:
            a = self.text(_join(loc, "algorithm"), f["algorithm"])
            if a not in ALGORITHMS:
                hint = _closest(str(a), list(ALGORITHMS))
                self.err(_join(loc, "algorithm"), f["algorithm"], f"unknown algorithm {a!r}"
                         + (f" (did you mean {hint!r}?)" if hint else "")
                         + f"; choose one of: {', '.join(ALGORITHMS)}")
                return None
            algorithm = a
        burst = None
        if "burst" in f:
            burst = self.number(_join(loc, "burst"), f["burst"])
            if burst is None:
                return None
        nodelay = self.flag(_join(loc, "nodelay"), f["nodelay"]) if "nodelay" in f else False
        delay = 0
        if "delay" in f:
            d = self.number(_join(loc, "delay"), f["delay"])
            if d is None:
                return None
            if not d.is_integer():
                self.err(_join(loc, "delay"), f["delay"], f"must be a whole number, got {d:g}")
                return None
            delay = int(d)
        try:
            return Limit(algorithm, rate, burst=burst, nodelay=nodelay, delay=delay,
                         name=state, scope="key")
        except (RateKeeperError, TypeError) as e:
            self.err(loc, node, str(e))
            return None


def _join(loc: str, key: str) -> str:
    return f"{loc}.{key}" if loc else key
