"""Loading policies: a TOML file (or a parsed mapping) to a `Policies` snapshot.

`load_policies` reads a file and returns `Policies` or raises `PolicyError` listing *every*
problem with its location (the table path, e.g. ``domains.api.descriptors[1].limits[0].rate``),
which is what ``ratekeeper check-config`` prints. A directory, or a ``.yaml``/``.yml`` file,
is envoyproxy/ratelimit's YAML format instead, read by `_envoy_config` into the same
snapshot. Nothing here does network I/O; the only clock read is the wall-clock ``loaded_at``
stamp (a `PolicyHolder` stamps with its own clock).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

from .._errors import RateKeeperError
from .._rates import parse_rate
from .._types import ALGORITHMS, Limit
from ._build import Issues, _join, _key_path, _typename
from ._http import HTTPRules
from ._http_loader import build_http
from ._keys import Shared
from ._model import (
    DEFAULT_MAX_COST,
    ConfigIssue,
    Policies,
    PolicyError,
    Settings,
)
from ._names import _closest, _name_part, _name_problem
from ._rules import (
    _EMPTY_LEVEL,
    Domain,
    Level,
    Node,
    PolicyLimit,
    Rule,
    make_level,
)
from ._toml_lines import line_of, outline

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "check_file", "load_policies", "parse_policies",
           "parse_policies_text", "read_bounded"]

#: The algorithm of a limit that names none: envoyproxy/ratelimit's only one.
DEFAULT_ALGORITHM = "fixed-window"
_MAX_DOMAIN = 100
_DOMAIN_RE = re.compile(r"^[A-Za-z0-9_.:@/+-]+$")

#: The largest policies file read (bytes; for a directory of YAML files, all of them
#: together): some hundred thousand limits. Refused before it is parsed.
MAX_FILE_BYTES = 8 * 1024 * 1024
#: The deepest nesting a policies file may have, refused before it is parsed: the parts of
#: the deepest key path (``domains.api.descriptors[0].limits[1].rate`` is 6), tables, arrays
#: and dotted-key parts counted alike; for YAML, mappings and lists. Real files need a dozen;
#: a file nested 2,000 deep would overflow the parsers' recursion, and a deeply dotted TOML
#: key costs `tomllib` memory quadratic in its parts.
MAX_DEPTH = 100

def is_envoy_config(path: str | Path) -> bool:
    """Whether `path` is in envoyproxy/ratelimit's YAML format: a directory of YAML files
    (its runtime ``config/`` directory) or a ``.yaml``/``.yml`` file; else it is TOML."""
    p = Path(path)
    return p.is_dir() or p.suffix.lower() in (".yaml", ".yml")


def load_policies(path: str | Path, *, import_hooks: bool = True) -> Policies:
    """Read and validate a policies file (TOML), or envoyproxy/ratelimit's YAML (a directory
    or a ``.yaml`` file, see `is_envoy_config`); raise `PolicyError` listing every problem.

    A file over `MAX_FILE_BYTES`, or nested deeper than `MAX_DEPTH`, is refused before it
    is parsed. `import_hooks`: import the Python hooks the ``[http]`` part names (which runs
    their modules' code); False checks only how each is written, and lists them in
    `Policies.unchecked_hooks` (such policies cannot decide requests: calling an unimported
    hook raises)."""
    p = Path(path)
    if is_envoy_config(p):
        try:
            from ._envoy_config import load_envoy_config  # noqa: PLC0415 (needs PyYAML)
        except ImportError as e:
            raise PolicyError([ConfigIssue("", f"reading envoyproxy/ratelimit's YAML needs "
                                               f"PyYAML: pip install 'ratekeeper[service]' "
                                               f"({e})")], str(p)) from None
        return load_envoy_config(p)
    try:
        raw = read_bounded(p, MAX_FILE_BYTES)
    except OSError as e:
        raise PolicyError([ConfigIssue("", f"cannot read the file: {e.strerror or e}")],
                          str(p)) from None
    if raw is None:
        raise PolicyError([_too_large()], str(p))
    return parse_policies_text(raw, source=str(p), import_hooks=import_hooks)


def read_bounded(path: Path, limit: int) -> bytes | None:
    """The bytes of `path`, or None if it holds more than `limit` (never read further)."""
    with path.open("rb") as f:
        raw = f.read(limit + 1)
    return None if len(raw) > limit else raw


def _too_large() -> ConfigIssue:
    return ConfigIssue("", f"the policies are larger than {MAX_FILE_BYTES} bytes, the most "
                           "ratekeeper reads (split the domains over several services, or "
                           "share limits by name instead of repeating them)")


def too_deep(depth: int | None) -> ConfigIssue:
    """The issue of a file nested `depth` levels deep (None: too deep to tell), past
    `MAX_DEPTH`."""
    how = "too deeply" if depth is None else f"{depth} levels deep"
    return ConfigIssue("", f"the policies are nested {how}; at most "
                           f"{MAX_DEPTH} levels are accepted (tables, arrays and the parts of "
                           "dotted keys counted together): flatten the file")


def parse_policies_text(raw: bytes | str, *, source: str = "<policies>",
                        import_hooks: bool = True) -> Policies:
    """Parse TOML text (bytes must be UTF-8) into `Policies`; text larger than
    `MAX_FILE_BYTES` or nested deeper than `MAX_DEPTH` is refused before it is parsed.
    `import_hooks`: see `load_policies`."""
    data_bytes = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")
    if len(data_bytes) > MAX_FILE_BYTES:
        raise PolicyError([_too_large()], source)
    digest = hashlib.sha256(data_bytes).hexdigest()
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        # One linear scan, no recursion: the line of each key path (for the errors), and
        # the depth, refused before tomllib recurses (or spends memory quadratic in it).
        lines, depth = outline(text)
        if depth > MAX_DEPTH:
            raise PolicyError([too_deep(depth)], source)
        data = tomllib.loads(text)
    except UnicodeDecodeError as e:
        raise PolicyError([ConfigIssue("", f"the file is not UTF-8 text ({e.reason} at byte "
                                           f"{e.start})")], source) from None
    except tomllib.TOMLDecodeError as e:
        raise PolicyError([ConfigIssue("", f"not valid TOML: {e}")], source) from None
    except RecursionError:  # nesting the scan could not read (malformed text)
        raise PolicyError([too_deep(None)], source) from None
    try:
        return parse_policies(data, source=source, sha256=digest, import_hooks=import_hooks)
    except PolicyError as e:  # tomllib gives no lines: find each location's in the text
        raise PolicyError([i if i.line is not None else dataclasses.replace(
            i, line=line_of(lines, i.location)) for i in e.issues], source) from None


def check_file(path: str | Path, *, import_hooks: bool = False
               ) -> tuple[Policies | None, list[ConfigIssue]]:
    """Validate a policies file: ``(policies, [])`` or ``(None, every issue)``.

    Checking a file runs none of its code unless `import_hooks` (see `load_policies`): the
    hooks it names are then in `Policies.unchecked_hooks`."""
    try:
        return load_policies(path, import_hooks=import_hooks), []
    except PolicyError as e:
        return None, list(e.issues)


def parse_policies(data: Mapping[str, Any], *, source: str = "<policies>",
                   sha256: str = "", import_hooks: bool = True) -> Policies:
    """Validate a mapping (parsed TOML) into `Policies`; raise `PolicyError` on any problem.
    `import_hooks`: see `load_policies`."""
    b = _Builder(import_hooks)
    policies = b.build(data)
    if b.issues or policies is None:
        raise PolicyError(b.issues or [ConfigIssue("", "no policies")], source)
    return Policies(policies[0], policies[1], source=source, sha256=sha256,
                    loaded_at=time.time(), http=policies[2],
                    unchecked_hooks=tuple(b.unchecked_hooks))


_TOP_KEYS = ("version", "service", "domains", "http")
_SERVICE_KEYS = ("failure", "fallback_share", "shadow_mode", "legacy_headers", "max_cost",
                 "allow_overrides", "unknown_domain")
_DOMAIN_KEYS = ("description", "shadow_mode", "limits", "descriptors")
_DESCRIPTOR_KEYS = ("key", "value", "name", "description", "limits", "unlimited",
                    "shadow_mode", "cost", "failure", "descriptors")
_LIMIT_KEYS = ("algorithm", "rate", "burst", "nodelay", "delay", "by", "scope", "description")


class _Builder(Issues):
    """Walks the parsed TOML, collecting every issue instead of stopping at the first."""

    def __init__(self, import_hooks: bool = True) -> None:
        super().__init__()
        self.import_hooks = import_hooks
        #: The hooks named but not imported (``import_hooks=False``), in file order.
        self.unchecked_hooks: list[str] = []

    # the file --------------------------------------------------------------------------

    def build(self, data: Mapping[str, Any]
              ) -> tuple[Mapping[str, Domain], Settings, HTTPRules | None] | None:
        self._unknown("", data, _TOP_KEYS)
        if "version" in data and (isinstance(data["version"], bool) or data["version"] != 1):
            self.err("version", f"only version 1 is known, got {data['version']!r}")
        settings = self._settings(data.get("service", {}))
        domains_raw = data.get("domains")
        if domains_raw is None:
            self.err("", "missing the [domains] table: define at least one domain, e.g. "
                         "[[domains.api.descriptors]]")
            return None
        tbl = self._table("domains", domains_raw)
        if tbl is None:
            return None
        if not tbl:
            self.err("domains", "no domains defined")
        domains: dict[str, Domain] = {}
        for name, raw in tbl.items():
            d = self._domain(name, raw, settings)
            if d is not None:
                domains[name] = d
        http = None
        if "http" in data:
            http = build_http(self, data["http"], domains, set(tbl),
                              import_hooks=self.import_hooks, unchecked=self.unchecked_hooks)
        return MappingProxyType(domains), settings, http

    def _settings(self, raw: object) -> Settings:
        tbl = self._table("service", raw)
        if tbl is None:
            return Settings()
        self._unknown("service", tbl, _SERVICE_KEYS)
        failure = self._failure("service.failure", tbl.get("failure", "open")) or "open"
        share = 1.0
        if "fallback_share" in tbl:
            raw_share = tbl["fallback_share"]
            got = self._positive("service.fallback_share", raw_share, "fallback_share")
            if got is not None and got > 1:
                self.err("service.fallback_share",
                         f"must be at most 1 (the whole limit), got {raw_share!r}; one "
                         "replica of N gets 1/N")
            elif got is not None and failure != "local":
                self.err("service.fallback_share",
                         f"applies to failure = \"local\" only, and failure is {failure!r}: "
                         "remove it or set failure = \"local\"")
            elif got is not None:
                share = got
        max_cost = DEFAULT_MAX_COST
        if "max_cost" in tbl:
            max_cost = self._positive("service.max_cost", tbl["max_cost"], "max_cost") or max_cost
        unknown_domain = tbl.get("unknown_domain", "ok")
        if unknown_domain not in ("ok", "error"):
            self.err("service.unknown_domain",
                     f"must be 'ok' (answer OK with no limit, as envoyproxy/ratelimit) or "
                     f"'error' (refuse the check), got {unknown_domain!r}")
            unknown_domain = "ok"
        return Settings(
            failure=failure,
            fallback_share=share,
            shadow_mode=self._bool("service", tbl, "shadow_mode"),
            legacy_headers=self._bool("service", tbl, "legacy_headers"),
            max_cost=max_cost,
            allow_overrides=self._bool("service", tbl, "allow_overrides", True),
            unknown_domain=unknown_domain,
        )

    # a domain --------------------------------------------------------------------------

    def _domain(self, name: str, raw: object, settings: Settings) -> Domain | None:
        loc = f"domains.{_key_path(name)}"
        if not name or len(name) > _MAX_DOMAIN or not _DOMAIN_RE.match(name):
            self.err(loc, f"domain name {name!r} must be 1 to {_MAX_DOMAIN} characters of "
                          "letters, digits and _ . : @ / + -")
            return None
        tbl = self._table(loc, raw)
        if tbl is None:
            return None
        self._unknown(loc, tbl, _DOMAIN_KEYS)
        description = self._str(loc, tbl, "description", default="") or ""
        shadow = self._bool(loc, tbl, "shadow_mode")
        ctx = _DomainCtx(name, settings)
        named = tbl.get("limits", {})
        named_tbl = self._table(_join(loc, "limits"), named)
        if named_tbl is not None:
            for lname, lraw in named_tbl.items():
                lloc = f"{loc}.limits.{_key_path(lname)}"
                ltbl = self._table(lloc, lraw)
                pl = None
                if ltbl is not None:
                    self._unknown(lloc, ltbl, _LIMIT_KEYS)
                    pl = self._limit(lloc, ltbl, f"{name}.{lname}", ctx, label=lname)
                if pl is None:
                    ctx.broken.add(lname)  # reported here; rules listing it say nothing more
                else:
                    ctx.named[lname] = pl
        descriptors = tbl.get("descriptors")
        if descriptors is None:
            self.err(loc, "a domain needs descriptors: add [[" + loc + ".descriptors]] tables")
            return None
        root = self._level(f"{loc}.descriptors", descriptors, (), ctx)
        if root is None:
            return None
        return Domain(name, root, tuple(ctx.rules), MappingProxyType(dict(ctx.named)),
                      description=description, shadow_mode=shadow)

    # descriptors -----------------------------------------------------------------------

    def _level(self, loc: str, raw: object, path: tuple[tuple[str, str | None], ...],
               ctx: _DomainCtx) -> Level | None:
        if not isinstance(raw, list) or not all(isinstance(x, dict) for x in raw):
            self.err(loc, "must be an array of tables: write each as [[...descriptors]] or "
                          "{ key = ..., ... } inside [ ]")
            return None
        if not raw:
            self.err(loc, "is empty: give at least one descriptor")
            return None
        nodes: list[Node] = []
        seen: dict[tuple[str, str | None], str] = {}
        for i, d in enumerate(raw):
            dloc = f"{loc}[{i}]"
            key, value = d.get("key"), d.get("value")
            if isinstance(key, str) and isinstance(value, (str, type(None))):
                ident = (key, value)
                if ident in seen:
                    what = f"key {key!r}" + (f" value {value!r}" if value is not None
                                             else " (no value)")
                    self.err(dloc, f"duplicate descriptor {what}: already defined at "
                                   f"{seen[ident]}")
                    continue
                seen[ident] = dloc
            node = self._descriptor(dloc, d, path, ctx)
            if node is not None:
                nodes.append(node)
        # The most literal characters first: ``admin-*`` before ``adm*`` (ties: file order).
        return make_level(nodes, lambda parts: -sum(map(len, parts)))

    def _descriptor(self, loc: str, d: Mapping[str, Any],
                    parent: tuple[tuple[str, str | None], ...], ctx: _DomainCtx) -> Node | None:
        self._unknown(loc, d, _DESCRIPTOR_KEYS)
        key = self._str(loc, d, "key", required=True)
        value = self._str(loc, d, "value")
        if key is not None and not key:
            self.err(_join(loc, "key"), "must not be empty")
            key = None
        elif key is not None and "*" in key:
            self.err(_join(loc, "key"), f"key {key!r} contains '*': only a value can be a "
                                        "wildcard pattern")
            key = None
        if value is not None and not value:
            self.err(_join(loc, "value"), "must not be empty; leave `value` out to match "
                                          "every value of the key (a default rule)")
            value = None
        if key is None:
            return None
        where = f"{loc} ({key}" + (f"={value}" if value is not None else "") + ")"
        path = (*parent, (key, value))
        unlimited = self._bool(loc, d, "unlimited")
        shadow = self._bool(loc, d, "shadow_mode")
        failure = self._failure(_join(loc, "failure"), d["failure"]) if "failure" in d \
            else None
        description = self._str(loc, d, "description", default="") or ""
        cost = 1.0
        if "cost" in d:
            cost = self._positive(_join(loc, "cost"), d["cost"], "cost") or 1.0
            if cost > ctx.settings.max_cost:
                self.err(_join(loc, "cost"), f"cost {cost:g} is above service.max_cost "
                                             f"({ctx.settings.max_cost:g})")
        has_limits = "limits" in d
        if unlimited and has_limits:
            self.err(where, "`unlimited = true` cannot be combined with `limits`: remove one")
        rule: Rule | None = None
        if has_limits or unlimited:
            rname = self._rule_name(loc, d, path, ctx)
            limits: tuple[PolicyLimit, ...] = ()
            if has_limits and not unlimited:
                limits = self._rule_limits(_join(loc, "limits"), d["limits"], rname, path, ctx)
                for p in limits:
                    try:
                        p.limit.check_cost(cost)
                    except RateKeeperError as e:
                        self.err(_join(loc, "cost"), f"{e} (limit {p.limit.name!r})")
                        continue
                    if cost > p.limit.capacity:
                        self.err(_join(loc, "cost"),
                                 f"cost {cost:g} exceeds the capacity of limit {p.limit.name!r} "
                                 f"({p.limit.capacity:g}): no request could ever be admitted; "
                                 "raise its burst (or amount) or lower the cost")
            if rname is not None:
                rule = Rule(ctx.name, rname, path, limits, unlimited=unlimited,
                            shadow_mode=shadow, cost=cost, description=description,
                            location=loc, failure=failure)
                ctx.rules.append(rule)
        else:
            if "descriptors" not in d:
                self.err(where, "has no limits, is not unlimited and has no nested descriptors: "
                                "add `limits = [...]`, `unlimited = true` or `descriptors`")
            if shadow:
                self.err(_join(loc, "shadow_mode"),
                         "applies to the limits of a descriptor, and this one has none")
            for what in ("cost", "failure"):
                if what in d:
                    self.err(_join(loc, what),
                             "applies to the limits of a descriptor, and this one has none")
        children = _EMPTY_LEVEL
        if "descriptors" in d:
            lvl = self._level(_join(loc, "descriptors"), d["descriptors"], path, ctx)
            children = lvl if lvl is not None else _EMPTY_LEVEL
        return Node(key, value, rule, children)

    def _rule_name(self, loc: str, d: Mapping[str, Any],
                   path: tuple[tuple[str, str | None], ...], ctx: _DomainCtx) -> str | None:
        explicit = self._str(loc, d, "name")
        if explicit is not None:
            if not explicit:
                self.err(_join(loc, "name"), "must not be empty")
                return None
            name = explicit
        else:
            name = ".".join(_name_part(k) + ("" if v is None else "=" + _name_part(v))
                            for k, v in path)
        state = f"{ctx.name}.{name}"
        problem = _name_problem(state)
        if problem:
            self.err(_join(loc, "name") if explicit is not None else loc,
                     f"rule name {_shown(name)} {problem}"
                     + ("" if explicit is not None else "; set a shorter `name`"))
            return None
        if name in ctx.rule_names:
            self.err(loc, f"rule name {name!r} is already used by {ctx.rule_names[name]}; "
                          "give one of them a distinct `name`")
            return None
        ctx.rule_names[name] = loc
        return name

    def _rule_limits(self, loc: str, raw: object, rname: str | None,
                     path: tuple[tuple[str, str | None], ...],
                     ctx: _DomainCtx) -> tuple[PolicyLimit, ...]:
        if not isinstance(raw, list):
            self.err(loc, "must be an array of limit names and/or inline limit tables, e.g. "
                          '["per-user", { algorithm = "gcra", rate = "10/s" }]')
            return ()
        if not raw:
            self.err(loc, "is empty: give at least one limit, or write `unlimited = true`")
            return ()
        out: list[PolicyLimit] = []
        listed: set[str] = set()  # the names in `out`: a set, so a long list stays linear
        for i, item in enumerate(raw):
            iloc = f"{loc}[{i}]"
            if isinstance(item, str):
                pl = ctx.named.get(item)
                if pl is None and item in ctx.broken:
                    continue
                if pl is None:
                    names = [*ctx.named, *sorted(ctx.broken)]
                    known = ", ".join(names) or "none defined"
                    hint = _closest(item, names)
                    self.err(iloc, f"no limit named {item!r} in [domains.{ctx.name}.limits]"
                                   + (f" (did you mean {hint!r}?)" if hint else "")
                                   + f"; known: {known}")
                    continue
            elif isinstance(item, dict):
                self._unknown(iloc, item, (*_LIMIT_KEYS, "name"))
                lname = self._str(iloc, item, "name")
                if lname:
                    state = f"{ctx.name}.{lname}"
                elif rname is None:  # already reported; still check the limit itself
                    state = f"{ctx.name}.?"
                elif len(raw) == 1:
                    state = f"{ctx.name}.{rname}"
                else:
                    algo = item.get("algorithm", DEFAULT_ALGORITHM)
                    state = f"{ctx.name}.{rname}#{algo}-{_rate_text(item.get('rate'))}"
                maybe = self._limit(iloc, item, state, ctx, register=rname is not None,
                                    label=lname or "")
                if maybe is None:
                    continue
                pl = maybe
            else:
                self.err(iloc, f"must be a limit name or an inline table, got {_typename(item)}")
                continue
            if pl.by and not isinstance(pl.by, Shared):  # (only YAML makes a Shared)
                keys = [k for k, _ in path]
                missing = [k for k in pl.by if k not in keys]
                if missing:
                    self.err(iloc, f"limit {pl.limit.name!r} counts by {list(pl.by)}, but "
                                   f"{missing} {'is' if len(missing) == 1 else 'are'} not a key "
                                   f"of this descriptor ({' > '.join(keys)})")
            if pl.limit.name in listed:
                self.err(iloc, f"limit {pl.limit.name!r} is listed twice in this descriptor")
                continue
            listed.add(pl.limit.name)
            out.append(pl)
        return tuple(out)

    def _limit(self, loc: str, tbl: Mapping[str, Any], state: str,
               ctx: _DomainCtx, *, register: bool = True,
               label: str = "") -> PolicyLimit | None:
        ok = True
        algorithm = tbl.get("algorithm", DEFAULT_ALGORITHM)
        if algorithm not in ALGORITHMS:
            hint = _closest(str(algorithm), list(ALGORITHMS))
            self.err(_join(loc, "algorithm"), f"unknown algorithm {algorithm!r}"
                     + (f" (did you mean {hint!r}?)" if hint else "")
                     + f"; choose one of: {', '.join(ALGORITHMS)}")
            ok = False
        rate = tbl.get("rate")
        if rate is None:
            self.err(loc, 'missing "rate", e.g. rate = "10/s" or "100/minute"')
            ok = False
        else:
            try:
                parse_rate(rate)
            except RateKeeperError as e:
                self.err(_join(loc, "rate"), str(e))
                ok = False
        burst = tbl.get("burst")
        nodelay = self._bool(loc, tbl, "nodelay")
        delay = tbl.get("delay", 0)
        description = self._str(loc, tbl, "description", default="") or ""
        by: tuple[str, ...] | None = None
        if "by" in tbl:
            raw_by = tbl["by"]
            if (not isinstance(raw_by, list) or not all(isinstance(x, str) and x for x in raw_by)
                    or len(set(raw_by)) != len(raw_by)):
                self.err(_join(loc, "by"), "must be an array of distinct descriptor keys, e.g. "
                                           f'by = ["user"], got {raw_by!r}')
                ok = False
            else:
                by = tuple(raw_by)
        if "scope" in tbl:
            scope = tbl["scope"]
            if scope not in ("descriptor", "global"):
                self.err(_join(loc, "scope"), f"must be 'descriptor' (one counter per distinct "
                                              f"descriptor) or 'global' (one counter), got "
                                              f"{scope!r}")
                ok = False
            elif scope == "global":
                if by is not None:
                    self.err(loc, "use either scope = \"global\" or by = [...], not both")
                    ok = False
                by = ()
        problem = _name_problem(state)
        if problem:
            self.err(loc, f"limit name {_shown(state)} {problem}")
            ok = False
        if not ok:
            return None
        try:
            lim = Limit(cast(str, algorithm), cast(str, rate), burst=burst, nodelay=nodelay,
                        delay=delay, name=state, scope="global" if by == () else "key")
        except RateKeeperError as e:
            self.err(loc, str(e))
            return None
        except TypeError as e:  # e.g. a table where a number belongs
            self.err(loc, f"invalid limit parameters: {e}")
            return None
        pl = PolicyLimit(lim, by, description, label)
        if not register:
            return pl
        prev = ctx.states.get(state)
        if prev is not None:
            if (prev[0].limit, prev[0].by) != (pl.limit, pl.by):
                self.err(loc, f"limit name {state!r} is already defined at {prev[1]} with "
                              "different parameters; limits with one name share their "
                              "counters, so they must be identical (or rename one)")
                return None
            return prev[0]
        ctx.states[state] = (pl, loc)
        return pl


@dataclass(slots=True)
class _DomainCtx:
    name: str
    settings: Settings
    named: dict[str, PolicyLimit] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)  # named limits with reported errors
    rules: list[Rule] = field(default_factory=list)
    rule_names: dict[str, str] = field(default_factory=dict)
    states: dict[str, tuple[PolicyLimit, str]] = field(default_factory=dict)


def _shown(name: str) -> str:
    """A name quoted for an error message, cut to its first 80 characters."""
    return repr(name) if len(name) <= 80 else f"{name[:80]!r}... ({len(name)} characters)"


def _rate_text(rate: object) -> str:
    if not isinstance(rate, str):
        return "?"
    try:
        return str(parse_rate(rate))
    except RateKeeperError:
        return "?"
