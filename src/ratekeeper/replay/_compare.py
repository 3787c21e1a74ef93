"""Candidate policies side by side over the same traffic, in one pass and bounded memory.

    from ratekeeper.replay import Candidate, compare, read_log
    with read_log("access.log.gz", "combined") as events:
        result = compare([Candidate("now", p1), Candidate("stricter", p2)], events)
    result.to_json()   # plain JSON values: the table, top keys, delay quantiles, series

Theory of operation. The events are read once and teed: each candidate gets its own
`replay` (its own `Engine` on its own `MemoryStore`, on the log's clock), fed one event at a
time, so every candidate sees the same requests in the same order, exactly as the middleware
would have decided them. A `_Tally` per candidate folds the answers into:

- **counts**: every request is exactly one of `admitted` (passed at once, including requests
  no limit applies to and shadow-mode verdicts), `delayed` (passed after queueing) or
  `rejected`; `not_limited` and `shadow_rejected` are counted again on their own;
- **clients**: a client is `client_of(event)` (the log's address by default; the CLI uses the
  policies' trusted-proxy and IPv6-prefix logic); `clients_affected` have at least one
  rejection;
- **page loads**: one client's requests no more than `gap` seconds apart form one page load
  (its HTML, scripts, images and API calls); `page_loads_rejected` saw at least one
  rejection -- the number the burst size is really about;
- **top rejected keys**: the clients and the counters (limit name and counter key) rejected
  most, with the Space-Saving algorithm (Metwally et al. 2005) in `top_capacity` slots:
  exact while there are no more distinct keys than slots, else each count is an
  overestimate by at most its `error`, and every key rejected more than
  ``rejected / top_capacity`` times is listed;
- **queueing delay**: p50/p99/max over admitted requests (no queueing counts as 0), in a
  `DelaySketch` with relative error `alpha` (a logarithmic histogram, as DDSketch);
- **series**: offered / admitted / delayed / rejected per bucket of wall-clock time, at most
  `max_buckets` buckets. With no `bucket` given the width starts at 1 s and steps up a
  ladder of clock units (1 s, 2 s, 10 s, 30 s, 1 min, 2 min, 10 min, 30 min, 1 h, 2 h,
  6 h, 12 h, 1 day, 7 days, then doubling), each a multiple of the last, so neighbours
  merge exactly and buckets stay aligned to the clock; a `bucket` given is kept as it is,
  or refused (with the smallest width that fits) when the log needs more buckets.

Memory is bounded by the number of clients (a few numbers each), `top_capacity`, the delay
sketch's buckets and `max_buckets`: never by the number of events. No I/O here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..policy._decide import HTTPDecision
from ..policy._keys import counter_key
from ..policy._model import Policies
from ..policy._request import ClientIP
from ..stores.memory import MemoryStore
from ._events import LogEvent, ReadStats
from ._replay import PeerName, log_policies, replay, request_of

__all__ = [
    "Candidate",
    "ClientResolver",
    "Comparison",
    "DelaySketch",
    "PolicyResult",
    "Series",
    "SpaceSaving",
    "TopKey",
    "client_resolver",
    "compare",
    "rejected_counter",
    "with_overrides",
]

ClientOf = Callable[[LogEvent], str]


def _log_client(ev: LogEvent) -> str:
    return ev.client or "-"


class SpaceSaving:
    """The most frequent keys of a stream in `capacity` counters (Space-Saving).

    `add(key)` counts one; when the counters are full, the smallest is given to the new key,
    which inherits its count as `error`. Guarantees: ``count - error <= true <= count`` for
    every listed key, and every key whose true count exceeds ``total / capacity`` is listed;
    exact (error 0) while there have been at most `capacity` distinct keys.
    """

    __slots__ = ("capacity", "counts", "errors", "total")

    def __init__(self, capacity: int = 100) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity!r}")
        self.capacity = capacity
        self.counts: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.total = 0

    def add(self, key: str, n: int = 1) -> None:
        self.total += n
        counts = self.counts
        c = counts.get(key)
        if c is not None:
            counts[key] = c + n
            return
        if len(counts) < self.capacity:
            counts[key] = n
            self.errors[key] = 0
            return
        # Full: evict the smallest (O(capacity), but only for a key not already counted).
        victim = min(counts, key=counts.__getitem__)
        floor = counts.pop(victim)
        del self.errors[victim]
        counts[key] = floor + n
        self.errors[key] = floor

    def top(self, k: int) -> list[TopKey]:
        """The `k` largest, count descending (ties by key)."""
        items = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [TopKey(key, c, self.errors[key]) for key, c in items]


@dataclass(frozen=True, slots=True)
class TopKey:
    """A rejected key and how often: `count` overestimates by at most `error`."""

    key: str
    count: int
    error: int = 0


class DelaySketch:
    """Quantiles of non-negative values in bounded memory, within relative error `alpha`.

    A value ``x > min_value`` falls in bucket ``ceil(log(x, gamma))`` with
    ``gamma = (1 + alpha) / (1 - alpha)``; a quantile answers the bucket's midpoint
    ``2 gamma^i / (gamma + 1)``, within ``alpha * x`` of every value in it (DDSketch,
    Masson et al. 2019). Values up to `min_value` (e.g. no queueing) are counted as 0 exactly.
    Buckets: at most ``log(max / min_value, gamma)``, about 1,400 for 1 us .. 10^6 s at 1 %.
    `quantile(q)` is the nearest-rank quantile (the ``ceil(q * n)``-th smallest value).
    """

    __slots__ = ("_log_gamma", "alpha", "buckets", "count", "max", "min_value", "zeros")

    def __init__(self, alpha: float = 0.01, min_value: float = 1e-6) -> None:
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")
        self.alpha = alpha
        self.min_value = min_value
        self._log_gamma = math.log((1 + alpha) / (1 - alpha))
        self.buckets: dict[int, int] = {}
        self.zeros = 0
        self.count = 0
        self.max = 0.0

    def add(self, x: float) -> None:
        self.count += 1
        if x <= self.min_value:
            self.zeros += 1
            return
        if x > self.max:
            self.max = x
        i = math.ceil(math.log(x) / self._log_gamma)
        self.buckets[i] = self.buckets.get(i, 0) + 1

    def quantile(self, q: float) -> float | None:
        """The `q` quantile (0 < q <= 1) within `alpha`, None when empty."""
        if not 0 < q <= 1:
            raise ValueError(f"q must be in (0, 1], got {q!r}")
        if not self.count:
            return None
        rank = max(1, math.ceil(q * self.count - 1e-9))
        if rank <= self.zeros:
            return 0.0
        seen = self.zeros
        gamma = math.exp(self._log_gamma)
        for i in sorted(self.buckets):
            seen += self.buckets[i]
            if seen >= rank:
                return min(2 * gamma ** i / (gamma + 1), self.max)
        return self.max  # pragma: no cover (the ranks add up to count)


#: The series' bucket widths in seconds, each a multiple of the one before (so buckets
#: merge exactly) and a unit a clock reads in: 1 s ... 12 h, 1 day, 7 days.
WIDTHS = (1.0, 2.0, 10.0, 30.0, 60.0, 120.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0,
          43200.0, 86400.0, 604800.0)


def _next_width(width: float) -> float:
    """The ladder's next width above `width` (doubling past 7 days, or off the ladder)."""
    for w in WIDTHS:
        if w > width and (w / width).is_integer():
            return w
    return width * 2


@dataclass(slots=True)
class Series:
    """Requests per time bucket: `offered`, `admitted` (delayed included), `delayed`,
    `rejected`; bucket ``i`` covers ``[t0 + i * width, t0 + (i + 1) * width)``, `t0` a
    multiple of `width` (buckets start on the clock's minutes, hours, days). At most
    `max_buckets`: past that, unless the width is `fixed`, it steps up to `_next_width`
    and neighbours merge (times are in order, so only the last bucket ever grows); a
    `fixed` width that would need more buckets is refused with a `ValueError` naming the
    smallest width that fits."""

    width: float = 1.0
    max_buckets: int = 1000
    t0: float | None = None
    offered: list[int] = field(default_factory=list)
    admitted: list[int] = field(default_factory=list)
    delayed: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    fixed: bool = False

    def add(self, t: float, kind: int) -> int:
        """Count one request at `t`: `kind` 0 admitted, 1 delayed, 2 rejected. Returns its
        bucket's index (the same for the same `t` until the buckets are next widened, which
        only a `t` past the last bucket does)."""
        if self.t0 is None:
            self.t0 = math.floor(t / self.width) * self.width
        i = int((t - self.t0) // self.width)
        if i < 0:
            i = 0  # a clamped late line belongs to the first bucket
        while i >= self.max_buckets:
            if self.fixed:
                raise ValueError(fixed_width_error(self.width, t - self.t0,
                                                   self.max_buckets))
            self._widen()
            i = int((t - self.t0) // self.width)
        offered = self.offered
        while len(offered) <= i:
            offered.append(0)
            self.admitted.append(0)
            self.delayed.append(0)
            self.rejected.append(0)
        offered[i] += 1
        if kind == 2:
            self.rejected[i] += 1
        else:
            self.admitted[i] += 1
            if kind == 1:
                self.delayed[i] += 1
        return i

    def _widen(self) -> None:
        assert self.t0 is not None
        old_w, old_t0 = self.width, self.t0
        self.width = _next_width(old_w)
        self.t0 = math.floor(old_t0 / self.width) * self.width
        shift = round((old_t0 - self.t0) / old_w)  # whole old buckets before the old t0
        k = round(self.width / old_w)

        def merge(xs: list[int]) -> list[int]:
            out = [0] * ((shift + len(xs) + k - 1) // k)
            for j, x in enumerate(xs):
                out[(shift + j) // k] += x
            return out

        self.offered, self.admitted = merge(self.offered), merge(self.admitted)
        self.delayed, self.rejected = merge(self.delayed), merge(self.rejected)

    def to_json(self) -> dict[str, Any]:
        return {"t0": self.t0, "width": self.width, "offered": self.offered,
                "admitted": self.admitted, "delayed": self.delayed,
                "rejected": self.rejected}


def fixed_width_error(width: float, span: float, max_buckets: int) -> str:
    """Why a series of `width`-second buckets cannot hold `span` seconds, and what can."""
    fits = width
    while span >= fits * max_buckets:
        fits = _next_width(fits)
    return (f"bucket {width:g} s: the log spans {span:,.0f} s, more than {max_buckets} "
            f"buckets of {width:g} s; give a bucket of at least {span / max_buckets:.4g} s "
            f"(e.g. {fits:g}), or none to choose one of 1 s ... 7 days by itself")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One policy to compare: a `name` for the table and its `policies` (with ``[http]``)."""

    name: str
    policies: Policies

    def __post_init__(self) -> None:
        if self.policies.http is None:
            raise ValueError(f"{self.name}: {self.policies.source} has no [http] part, so a "
                             "request cannot be mapped to descriptors; add [http] "
                             "(docs/policies.md)")


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """What one candidate did to the traffic (see the module docstring for each figure).
    Delays are seconds; `page_load_share` is ``page_loads_rejected / page_loads``."""

    name: str
    source: str
    requests: int
    admitted: int
    delayed: int
    rejected: int
    not_limited: int
    shadow_rejected: int
    clients: int
    clients_affected: int
    page_loads: int
    page_loads_rejected: int
    top_clients: tuple[TopKey, ...]
    top_counters: tuple[TopKey, ...]
    delay_p50: float | None
    delay_p99: float | None
    delay_max: float
    series: Series

    @property
    def page_load_share(self) -> float:
        return self.page_loads_rejected / self.page_loads if self.page_loads else 0.0

    @property
    def clients_affected_share(self) -> float:
        return self.clients_affected / self.clients if self.clients else 0.0

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in (
            "name", "source", "requests", "admitted", "delayed", "rejected", "not_limited",
            "shadow_rejected", "clients", "clients_affected", "page_loads",
            "page_loads_rejected", "delay_p50", "delay_p99", "delay_max")}
        out["clients_affected_share"] = self.clients_affected_share
        out["page_load_share"] = self.page_load_share
        out["top_clients"] = [asdict(k) for k in self.top_clients]
        out["top_counters"] = [asdict(k) for k in self.top_counters]
        out["series"] = self.series.to_json()
        return out


@dataclass(frozen=True, slots=True)
class Comparison:
    """The candidates' results, in the order given, and the settings that made them.
    `named_clients`, `named_lines`: the clients the log names by something that is not an
    IP address (each a client of its own: `ClientResolver`) and their lines."""

    policies: tuple[PolicyResult, ...]
    gap: float
    bucket: float
    events: int
    first_t: float | None
    last_t: float | None
    named_clients: int = 0
    named_lines: int = 0

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values (``json.dumps`` takes it as is): the input of the report."""
        return {"gap": self.gap, "bucket": self.bucket, "events": self.events,
                "first_t": self.first_t, "last_t": self.last_t,
                "named_clients": self.named_clients, "named_lines": self.named_lines,
                "policies": [p.to_json() for p in self.policies]}

    def named_note(self) -> str:
        """The one sentence about clients that are not addresses ("" when there are none)."""
        if not self.named_clients:
            return ""
        return (f"{self.named_clients} clients ({self.named_lines} lines) are not IP "
                "addresses (host names, anonymised addresses): each is a client of its own")

    def table(self) -> str:
        """The side-by-side table a person reads (one column per candidate)."""
        rows: list[tuple[str, Callable[[PolicyResult], str]]] = [
            ("requests", lambda p: f"{p.requests}"),
            ("admitted", lambda p: f"{p.admitted}"),
            ("delayed", lambda p: f"{p.delayed}"),
            ("rejected", lambda p: f"{p.rejected}"),
            ("  not limited", lambda p: f"{p.not_limited}"),
            ("  shadow-rejected", lambda p: f"{p.shadow_rejected}"),
            ("clients affected", lambda p: f"{p.clients_affected}/{p.clients} "
                                           f"({p.clients_affected_share:.1%})"),
            ("page loads rejected", lambda p: f"{p.page_loads_rejected}/{p.page_loads} "
                                              f"({p.page_load_share:.1%})"),
            ("delay p50", lambda p: _seconds(p.delay_p50)),
            ("delay p99", lambda p: _seconds(p.delay_p99)),
            ("delay max", lambda p: _seconds(p.delay_max)),
        ]
        if self.named_clients:
            rows.append(("clients not IP addresses",
                         lambda p: f"{self.named_clients} ({self.named_lines} lines)"))
        cells = [[label] + [f(p) for p in self.policies] for label, f in rows]
        header = ["", *(p.name for p in self.policies)]
        widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
        lines = ["  ".join(h.ljust(widths[0]) if i == 0 else h.rjust(widths[i])
                           for i, h in enumerate(header))]
        for r in cells:
            lines.append("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i])
                                   for i, c in enumerate(r)))
        for p in self.policies:
            if p.top_counters:
                lines.append(f"top rejected ({p.name}): " + ", ".join(
                    f"{k.key} {k.count}" for k in p.top_counters[:5]))
        return "\n".join(lines)


def _seconds(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.0f} ms" if x < 10 else f"{x:.1f} s"


def rejected_counter(policies: Policies, d: HTTPDecision) -> str:
    """The counter that rejected a request: ``"<limit name> <counter key>"`` (the counter
    key as the store names it: ``client_ip=203.0.113.7``), or the limit's name alone when
    no descriptor of the request uses it (a decorator's limits)."""
    lim = d.decision.limit
    name = lim.name if lim is not None else "?"
    dom = policies.domains.get(d.check.domain)
    for desc in d.check.descriptors:
        rule = desc.rule if desc.rule is not None else (
            dom.match(desc.entries) if dom is not None else None)
        if rule is None:
            continue
        for pl in rule.limits:
            if pl.limit.name == name:
                return f"{name} {counter_key(desc.entries, pl.by)}"
    return name


class _Tally:
    """One candidate's running figures."""

    def __init__(self, cand: Candidate, *, gap: float, bucket: float | None, max_buckets: int,
                 top_capacity: int, alpha: float) -> None:
        self.cand = cand
        self.gap = gap
        self.counts = [0, 0, 0, 0, 0]  # admitted, delayed, rejected, not_limited, shadow-rej
        # client -> [last t, current page load rejected (0/1), rejections]
        self.clients: dict[str, list[float]] = {}
        self.page_loads = 0
        self.page_loads_rejected = 0
        self.top_clients = SpaceSaving(top_capacity)
        self.top_counters = SpaceSaving(top_capacity)
        self.delays = DelaySketch(alpha)
        self.series = Series(1.0 if bucket is None else bucket, max_buckets,
                             fixed=bucket is not None)
        # The series bucket of the last admitted request's time: the next request at the
        # same time (most of a log's, at one-second resolution) is counted in it without
        # the call (`Series.add` would find the same index: nothing changed the buckets).
        self._t = math.nan
        self._i = 0
        # `DelaySketch.add(0.0)`, inline, when 0.0 counts as a zero (min_value >= 0)
        self._zero_inline = self.delays.min_value >= 0.0

    def _admitted(self, t: float) -> None:
        """One request admitted at once at `t`: a zero delay and a series count."""
        delays = self.delays
        if self._zero_inline:
            delays.count += 1
            delays.zeros += 1
        else:
            delays.add(0.0)
        if t == self._t:
            series = self.series
            series.offered[self._i] += 1
            series.admitted[self._i] += 1
        else:
            self._i = self.series.add(t, 0)
            self._t = t

    def add(self, client: str, ev: LogEvent, d: HTTPDecision | None) -> None:
        counts = self.counts
        t = ev.t
        st = self.clients.get(client)
        if st is None:
            st = self.clients[client] = [t, 0.0, 0.0]
            self.page_loads += 1
        else:
            if t - st[0] > self.gap:
                self.page_loads += 1
                st[1] = 0.0
            st[0] = t
        if d is None:
            counts[0] += 1
            counts[3] += 1
            self._admitted(t)
            return
        verdict = d.verdict
        if verdict == "allowed":  # the most common verdict first
            counts[0] += 1
            self._admitted(t)
            return
        self._t = math.nan  # another kind of count: the next admitted one finds its bucket
        if verdict == "rejected":
            counts[2] += 1
            if not st[1]:
                st[1] = 1.0
                self.page_loads_rejected += 1
            st[2] += 1
            self.top_clients.add(client)
            self.top_counters.add(rejected_counter(self.cand.policies, d))
            self.series.add(ev.t, 2)
            return
        if verdict == "delayed":
            counts[1] += 1
            self.delays.add(d.decision.delay)
            self.series.add(ev.t, 1)
            return
        counts[0] += 1
        if verdict == "shadow-rejected":
            counts[4] += 1
        self._admitted(t)

    def result(self, top: int) -> PolicyResult:
        a, dl, r, nl, sr = self.counts
        return PolicyResult(
            name=self.cand.name, source=self.cand.policies.source, requests=a + dl + r,
            admitted=a, delayed=dl, rejected=r, not_limited=nl, shadow_rejected=sr,
            clients=len(self.clients),
            clients_affected=sum(1 for st in self.clients.values() if st[2]),
            page_loads=self.page_loads, page_loads_rejected=self.page_loads_rejected,
            top_clients=tuple(self.top_clients.top(top)),
            top_counters=tuple(self.top_counters.top(top)),
            delay_p50=self.delays.quantile(0.5), delay_p99=self.delays.quantile(0.99),
            delay_max=self.delays.max, series=self.series)


class _Slot(Iterator[LogEvent]):
    """The one event every candidate's replay takes next (the tee)."""

    __slots__ = ("ev",)

    def __init__(self) -> None:
        self.ev: LogEvent | None = None

    def __next__(self) -> LogEvent:
        ev, self.ev = self.ev, None
        if ev is None:
            raise StopIteration
        return ev


def compare(candidates: Sequence[Candidate], events: Iterable[LogEvent], *,
            client_of: ClientOf | ClientResolver | None = None, gap: float = 1.0,
            bucket: float | None = None,
            max_buckets: int = 1000, top: int = 10, top_capacity: int = 1000,
            alpha: float = 0.01, stores: Sequence[Any] | None = None,
            progress: Callable[[int], None] | None = None, every: int = 65536,
            stats: ReadStats | None = None) -> Comparison:
    """Replay `events` (in time order) through every candidate at once -> a `Comparison`.

    `gap`: seconds between one client's requests that end a page load (default 1 s).
    `bucket`: the series' bucket width in seconds, kept as given (refused if the log
    needs more than `max_buckets` of it), or None to choose it (see `Series`). `top`: how many
    top rejected keys to list, from `top_capacity` counters. `stores`: one store per
    candidate (default: a fresh `MemoryStore` each). `progress(n)` is called every `every`
    events. `stats`: the reader's, for the time span (else it is measured here).
    `client_of`: a `ClientResolver` (its named-client counts go into the `Comparison`) or
    any function of an event (default: the log's client text).
    """
    if not candidates:
        raise ValueError("nothing to compare: give at least one candidate policy")
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ValueError(f"candidate names must differ, got {names}")
    if not gap > 0 or (bucket is not None and not bucket > 0):
        raise ValueError(f"gap and bucket must be positive seconds, got {gap!r}, {bucket!r}")
    if stores is not None and len(stores) != len(candidates):
        raise ValueError("give one store per candidate")
    named: ClientResolver | None = None
    who: ClientOf = _log_client
    if isinstance(client_of, ClientResolver):
        named, who = client_of, client_of.of
    elif client_of is not None:
        who = client_of
    tallies = [_Tally(c, gap=gap, bucket=bucket, max_buckets=max_buckets,
                      top_capacity=top_capacity, alpha=alpha) for c in candidates]
    # The first candidate's replay reads `events` itself (each answer carries its event);
    # the others are fed the same event through a `_Slot`.
    slot = _Slot()
    runs = [replay(c.policies, events if i == 0 else slot,
                   store=MemoryStore() if stores is None else stores[i])
            for i, c in enumerate(candidates)]
    first, *rest = zip(runs, tallies, strict=True)
    lead, lead_tally = first
    n = 0
    first_t: float | None = None
    last_t: float | None = None
    for r in lead:
        ev = r.event
        if first_t is None:
            first_t = ev.t
        last_t = ev.t
        client = who(ev)
        lead_tally.add(client, ev, r.decision)
        for run, tally in rest:
            slot.ev = ev
            tally.add(client, ev, next(run).decision)
        n += 1
        if progress is not None and n % every == 0:
            progress(n)
    if progress is not None:
        progress(n)
    if stats is not None and stats.first_t is not None:
        first_t, last_t = stats.first_t, stats.last_t
    # The width the series ended with: the one given, or the one chosen for the log's span.
    width = tallies[0].series.width
    return Comparison(tuple(t.result(top) for t in tallies), gap, width, n, first_t, last_t,
                      0 if named is None else named.named_clients,
                      0 if named is None else named.named_lines)


class ClientResolver:
    """`of(ev)`: the client of an event as `policies`' ``[http]`` part resolves it (trusted
    proxies and ``X-Forwarded-For``, IPv6 grouped by its prefix: ``2001:db8:1:2::/64``), a
    client the log names by something that is not an address being one of its own
    (`log_policies`); with no ``[http]`` part, the log's client text.

    `named_lines` counts the events whose client is such a name, `named_clients` the
    distinct names (up to `MAX_NAMES`; past it, `named_clients_capped` is set and the count
    is a lower bound), for the one notice the CLI gives. `of` is a closure, not a method:
    it runs once per line."""

    #: The most distinct named clients counted (their texts are kept to count them once).
    MAX_NAMES = 1 << 20

    def __init__(self, policies: Policies) -> None:
        rules = log_policies(policies).http
        self._seen: set[str] = set()
        self._named_lines = [0]
        self.named_clients_capped = False
        self.of: ClientOf = _log_client if rules is None else self._resolver(rules.client_ip)

    @property
    def named_clients(self) -> int:
        return len(self._seen)

    @property
    def named_lines(self) -> int:
        return self._named_lines[0]

    def _resolver(self, cip: ClientIP) -> ClientOf:
        # (client, forwarding header) -> its key: addresses and names apart, so a line with
        # an address costs the one lookup it did before names were counted
        ips: dict[tuple[str, str | None], str] = {}
        names: dict[tuple[str, str | None], str] = {}
        seen, lines, header = self._seen, self._named_lines, cip.header

        def of(ev: LogEvent) -> str:
            k = (ev.client, ev.headers.get(header))
            c = ips.get(k)
            if c is not None:
                return c
            c = names.get(k)
            if c is None:
                addr = cip.resolve(request_of(ev))
                c = cip.key_of(addr)[3:]
                memo = names if type(addr) is PeerName else ips
                if len(memo) > 100_000:
                    memo.clear()
                memo[k] = c
                if memo is ips:
                    return c
                if c not in seen:
                    if len(seen) < self.MAX_NAMES:
                        seen.add(c)
                    else:
                        self.named_clients_capped = True
            lines[0] += 1
            return c

        return of


def client_resolver(policies: Policies) -> ClientResolver:
    """The `ClientResolver` of `policies`, for `compare`'s `client_of`."""
    return ClientResolver(policies)


def with_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of a parsed policies file with limits changed by name: each override is
    ``LIMIT.FIELD=VALUE`` (``per-client.rate=10/s``, ``per-client.burst=40``), FIELD one of
    ``rate``, ``burst``, ``algorithm``, ``nodelay``, ``delay``. A limit is named by its
    table (``[domains.D.limits.NAME]``) or its ``name`` (an inline limit); every limit of
    that name changes. Raises ValueError naming the bad override and the known limits."""
    import copy  # noqa: PLC0415

    out = copy.deepcopy(dict(data))
    found = _named_limits(out)
    for ov in overrides:
        target, sep, raw = ov.partition("=")
        limit, dot, fld = target.strip().rpartition(".")
        if not sep or not dot or not limit:
            raise ValueError(f"override {ov!r}: write LIMIT.FIELD=VALUE, e.g. "
                             "per-client.burst=40")
        if fld not in ("rate", "burst", "algorithm", "nodelay", "delay"):
            raise ValueError(f"override {ov!r}: {fld!r} is not a limit field you can set "
                             "(rate, burst, algorithm, nodelay, delay)")
        tables = found.get(limit)
        if not tables:
            known = ", ".join(sorted(found)) or "none"
            raise ValueError(f"override {ov!r}: no limit named {limit!r} (named limits: "
                             f"{known})")
        value: object = raw.strip()
        if fld in ("burst", "delay"):
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"override {ov!r}: {fld} must be a number") from None
            if value == int(value):
                value = int(value)
        elif fld == "nodelay":
            if raw.strip().lower() not in ("true", "false"):
                raise ValueError(f"override {ov!r}: nodelay must be true or false")
            value = raw.strip().lower() == "true"
        for t in tables:
            t[fld] = value
    return out


def _named_limits(data: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The limit tables of a parsed policies file by name (its ``[domains.D.limits.NAME]``
    table name, or an inline limit's ``name``), to be changed in place."""
    found: dict[str, list[dict[str, Any]]] = {}

    def walk(node: object, name: str | None) -> None:
        if isinstance(node, dict):
            if "algorithm" in node and (node.get("name") or name):
                found.setdefault(str(node.get("name") or name), []).append(node)
            for k, v in node.items():
                walk(v, k if isinstance(v, dict) else None)
        elif isinstance(node, list):
            for v in node:
                walk(v, None)

    walk(data.get("domains", {}), None)
    return found
