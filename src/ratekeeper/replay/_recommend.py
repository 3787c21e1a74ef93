"""Recommend a rate and a burst per limit from real traffic, for a stated target.

    from ratekeeper.replay import recommend, read_log
    rec = recommend(lambda: read_log("access.log", "combined"), target=0.99)
    rec.limits[0].rate, rec.limits[0].burst     # e.g. 5.0 (per second), 10
    rec.to_json()                               # + the trade-off curve and the replay

The target: *admit every request of `target` of the keys* (clients, or whatever counter a
limit keeps: ``client_ip=...``, ``user=...``), and cap the rest. A limit is surveyed per
counter, exactly as the limiter keeps its counters: with a policies file, every limit of the
rules its ``[http]`` part reaches (a request's descriptor -> the matched rule -> each of its
limits, the counter key by the limit's ``by``, the cost the rule charges); with none, one
per-client limit (the client IP as the middleware resolves it, IPv6 grouped by /64).

Theory of operation, three passes over the log (the caller reopens it: `events()`):

1. **Rate**: each key's peak long-window rate, the most it sent in one `window`-second
   window (aligned tumbling windows; the log's span when shorter) divided by the window.
   The rate is the `target` quantile (nearest rank) of those, rounded up to two
   significant digits.
2. **Burst**: at that rate ``r``, a token bucket (or GCRA: the same decisions) of capacity
   ``b`` admits every request of a key iff ``b >= B(key)``, where ``B`` is the largest
   backlog of the key's unconstrained virtual schedule: ``tat = max(tat, t) + cost / r``
   after each request, ``B = max (tat - t) * r``. Exact and one float per key: as long as
   every request is admitted, the real bucket's state *is* that schedule, so the first
   request whose backlog exceeds ``b`` is the first one rejected. The burst is the
   `target` quantile of ``B`` (rounded up to a whole request); the trade-off curve gives,
   for bursts at quantiles of ``B``, how many keys would see a rejection, at ``r`` and at
   the `curve_rates` multiples of it.
Abusive keys are shown apart and do not drive the proposal. The rule: a key is *abusive*
when at least `abusive_min` (10) of its requests were logged and at least `abusive_share`
(50 %) of them were answered 4xx other than 429 -- what a scanner looks like (it probes
paths that are not there, logins it does not have: 404, 401, 403), and what a client of
the site, however heavy, does not (a 429 is a limiter's own answer, not the client's
doing). Such a key is left out of both quantiles, the counts of keys and the curve, and
listed in `abusive` with its backlog, so no scanner's burst becomes everyone's. With
``abusive_share=None`` every key counts.

3. **What it would have done**: the policies with each limit set to its recommendation,
   replayed with `compare` (beside the policies as they are, when given).

Memory: a few floats per key per limit, never per event. No I/O here.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..policy._keys import counter_key
from ..policy._loader import parse_policies
from ..policy._model import Policies
from ._compare import Candidate, Comparison, client_resolver, compare, fixed_width_error
from ._events import LogEvent
from ._replay import log_policies, request_of

__all__ = [
    "CurvePoint",
    "LimitRecommendation",
    "Recommendation",
    "Survey",
    "nice_ceil",
    "per_client_policies",
    "recommend",
    "required_burst",
]

#: The limit `recommend` proposes when given no policies file: one per client IP.
PER_CLIENT = "per-client"
#: A key with at least `ABUSIVE_MIN` requests, `ABUSIVE_SHARE` of them answered 4xx (not
#: 429), is abusive: shown apart, left out of the proposal (the module docstring).
ABUSIVE_SHARE = 0.5
ABUSIVE_MIN = 10
_DOMAIN = "recommend"
#: The series' bound in `compare` (its default `max_buckets`).
MAX_BUCKETS = 1000


def per_client_policies(rate: str = "1/s", burst: float = 1) -> dict[str, Any]:
    """A policies mapping (as parsed TOML) of one per-client-IP token bucket."""
    return {"http": {"domain": _DOMAIN, "descriptors": [["client_ip"]]},
            "domains": {_DOMAIN: {"descriptors": [{"key": "client_ip", "limits": [
                {"name": PER_CLIENT, "algorithm": "token-bucket", "rate": rate,
                 "burst": burst}]}]}}}


def nice_ceil(x: float) -> float:
    """`x` rounded up to two significant digits (4.03 -> 4.1, 5 -> 5, 123 -> 130)."""
    if x <= 0:
        return 0.0
    step = 10.0 ** (math.floor(math.log10(x)) - 1)
    return round(math.ceil(x / step - 1e-9) * step, 12)


def required_burst(times: Iterable[float], rate: float, cost: float = 1.0) -> float:
    """The smallest capacity of a token bucket refilled at `rate` per second that admits
    every request at `times` (in order), each of `cost`: the virtual schedule's largest
    backlog (see the module docstring). A reference for one key; `Survey` does the same
    for every key at once."""
    tat = -math.inf
    need = 0.0
    for t in times:
        tat = max(tat, t) + cost / rate
        need = max(need, (tat - t) * rate)
    return need


def _quantile(xs: Sequence[float], q: float) -> float:
    """Nearest rank: the ``ceil(q * n)``-th smallest of `xs` (sorted)."""
    return xs[max(1, math.ceil(q * len(xs) - 1e-9)) - 1]


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """At `rate` per second and capacity `burst`, `keys_affected` of the keys (a `share`)
    would have seen at least one rejection."""

    rate: float
    burst: int
    keys_affected: int
    share: float


@dataclass(frozen=True, slots=True)
class LimitRecommendation:
    """The proposal for one limit: `rate` per second and `burst` (capacity, requests) as
    `algorithm`; `keys` surveyed (abusive ones apart); `keys_affected` (``B > burst``) are
    capped; `heaviest` lists the most demanding keys with their ``B`` at `rate`. `rates`
    and `bursts` summarise the distributions (p50, p90, p99, max) the choice was made from.
    `abusive` lists the keys left out (see the module docstring), heaviest first, as
    (key, ``B`` at `rate`, requests, share answered 4xx)."""

    limit: str
    name: str
    algorithm: str
    rate: float
    burst: int
    keys: int
    keys_affected: int
    rates: dict[str, float]
    bursts: dict[str, float]
    heaviest: tuple[tuple[str, float], ...]
    curve: tuple[CurvePoint, ...]
    abusive: tuple[tuple[str, float, int, float], ...] = ()

    @property
    def rate_text(self) -> str:
        return f"{self.rate:g}/s"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["rate_text"] = self.rate_text
        out["heaviest"] = [{"key": k, "burst": b} for k, b in self.heaviest]
        out["abusive"] = [{"key": k, "burst": b, "requests": n, "share_4xx": e}
                          for k, b, n, e in self.abusive]
        out["share_affected"] = self.keys_affected / self.keys if self.keys else 0.0
        return out


@dataclass(frozen=True, slots=True)
class Recommendation:
    """Every limit's proposal, and what it would have done (`comparison`: the policies as
    given, if any, then ``recommended``)."""

    target: float
    window: float
    limits: tuple[LimitRecommendation, ...]
    comparison: Comparison | None
    overrides: tuple[str, ...]
    abusive_share: float | None = ABUSIVE_SHARE
    abusive_min: int = ABUSIVE_MIN

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "window": self.window,
                "abusive_share": self.abusive_share, "abusive_min": self.abusive_min,
                "overrides": list(self.overrides),
                "limits": [r.to_json() for r in self.limits],
                "comparison": None if self.comparison is None else self.comparison.to_json()}

    def text(self) -> str:
        lines = [f"target: every request of {self.target:.1%} of the keys admitted "
                 f"(rates over {self.window:g} s windows)",
                 "abusive keys (left out): none, every key counts"
                 if self.abusive_share is None else
                 f"abusive keys (left out): at least {self.abusive_min} requests, "
                 f"{self.abusive_share:.0%} or more answered 4xx other than 429"]
        for r in self.limits:
            lines.append(f"{r.name}: {r.algorithm} rate = \"{r.rate_text}\", burst = "
                         f"{r.burst}  ({r.keys_affected} of {r.keys} keys capped)")
            if r.heaviest:
                lines.append("  heaviest: " + ", ".join(
                    f"{k} (burst {b:.0f})" for k, b in r.heaviest[:5]))
            if r.abusive:
                lines.append(f"  abusive, left out ({len(r.abusive)}): " + ", ".join(
                    f"{k} (burst {b:.0f}, {n} requests, {e:.0%} 4xx)"
                    for k, b, n, e in r.abusive[:5]))
            lines.append("  burst -> keys affected: " + ", ".join(
                f"{p.burst}: {p.share:.1%}" for p in r.curve if p.rate == r.rate))
        if self.comparison is not None:
            lines.append("")
            lines.append(self.comparison.table())
        return "\n".join(lines)


class _Unit:
    """One limit under survey: its keys' window counts, then their virtual schedules."""

    __slots__ = ("algorithm", "by", "keys", "limit", "name", "rates", "sched")

    def __init__(self, limit: str, name: str, algorithm: str) -> None:
        self.limit, self.name, self.algorithm = limit, name, algorithm
        # key -> [window index, count in it, peak count, requests, 4xx answers (not 429)]
        self.keys: dict[str, list[float]] = {}
        self.rates: tuple[float, ...] = ()
        # key -> [tat, need] per rate
        self.sched: dict[str, list[float]] = {}


class Survey:
    """The per-limit, per-key figures of `recommend`'s first two passes.

    `policies` decides how a request maps to limits and counters; `window` is the rate
    window in seconds. Feed pass 1 with `add_rates(ev)` for every event, call
    `choose_rates`, feed pass 2 with `add_bursts(ev)`, then `recommendations`.
    """

    def __init__(self, policies: Policies, *, target: float = 0.99, window: float = 60.0,
                 curve_rates: Sequence[float] = (0.5, 2.0),
                 abusive_share: float | None = ABUSIVE_SHARE,
                 abusive_min: int = ABUSIVE_MIN) -> None:
        if policies.http is None:
            raise ValueError(f"{policies.source} has no [http] part: nothing says how a "
                             "request becomes descriptors (docs/policies.md)")
        check_target(target)
        if not window > 0:
            raise ValueError(f"window must be positive seconds, got {window!r}")
        # a client the log names by something that is not an address is one of its own
        self.policies = log_policies(policies)
        self.target = target
        self.window = window
        self.curve_rates = tuple(curve_rates)
        if abusive_share is not None and not 0 < abusive_share <= 1:
            raise ValueError(f"abusive_share is the share of a key's requests answered 4xx "
                             f"that makes it abusive, above 0 and at most 1 (0.5 for 50 %), "
                             f"or None to count every key; got {abusive_share!r}")
        self.abusive_share, self.abusive_min = abusive_share, abusive_min
        self.units: dict[str, _Unit] = {}
        self.first_t: float | None = None
        self.last_t: float | None = None

    def _charges(self, ev: LogEvent) -> dict[tuple[str, str], float]:
        """(limit name, counter key) -> cost, for one request, as the engine charges it."""
        rules = self.policies.http
        assert rules is not None
        check = rules.map(request_of(ev), ev.t)
        out: dict[tuple[str, str], float] = {}
        if check is None:
            return out
        dom = self.policies.domains.get(check.domain)
        for d in check.descriptors:
            rule = d.rule if d.rule is not None else (
                dom.match(d.entries) if dom is not None else None)
            if rule is None or rule.unlimited or rule.shadow_mode:
                continue
            cost = check.cost * rule.cost * (1.0 if d.hits is None else d.hits)
            for pl in rule.limits:
                lim = pl.limit
                if lim.name not in self.units:
                    self.units[lim.name] = _Unit(lim.name, lim.name.partition(".")[2]
                                                 or lim.name, lim.algorithm)
                k = (lim.name, counter_key(d.entries, pl.by))
                out[k] = out.get(k, 0.0) + cost
        return out

    def add_rates(self, ev: LogEvent) -> None:
        """Pass 1: count `ev` in its keys' current windows."""
        if self.first_t is None:
            self.first_t = ev.t
        self.last_t = ev.t
        w = math.floor(ev.t / self.window)
        units = self.units
        status = ev.status
        err = 1 if status is not None and 400 <= status < 500 and status != 429 else 0
        for (lim, key), cost in self._charges(ev).items():
            st = units[lim].keys.get(key)
            if st is None:
                units[lim].keys[key] = [w, cost, cost, 1, err]
                continue
            st[3] += 1
            st[4] += err
            if st[0] == w:
                st[1] += cost
                if st[1] > st[2]:
                    st[2] = st[1]
            else:
                st[0], st[1] = w, cost
                if cost > st[2]:
                    st[2] = cost

    def is_abusive(self, unit: _Unit, key: str) -> bool:
        """The module docstring's rule, on `key`'s pass-1 counts."""
        if self.abusive_share is None:
            return False
        st = unit.keys[key]
        return st[3] >= self.abusive_min and st[4] >= self.abusive_share * st[3] - 1e-9

    def key_rates(self, unit: _Unit) -> list[float]:
        """Each non-abusive key's peak rate per second, sorted."""
        span = (self.last_t or 0.0) - (self.first_t or 0.0)
        w = max(min(self.window, span), 1.0)
        return sorted(st[2] / w for k, st in unit.keys.items()
                      if not self.is_abusive(unit, k))

    def choose_rates(self) -> None:
        """Between the passes: each limit's rate, and the rates its curve is drawn at."""
        for u in self.units.values():
            rates = self.key_rates(u)
            r = nice_ceil(_quantile(rates, self.target)) if rates else 1.0
            u.rates = (r, *(nice_ceil(r * m) for m in self.curve_rates))

    def add_bursts(self, ev: LogEvent) -> None:
        """Pass 2: advance `ev`'s keys' virtual schedules at every rate of their limit."""
        # On the log's own clock from its start: at Unix-epoch magnitudes a float's ulp
        # (~2e-7 s) would add up over a schedule and round an exact burst up by one.
        t = ev.t - (self.first_t or 0.0)
        units = self.units
        for (lim, key), cost in self._charges(ev).items():
            u = units[lim]
            st = u.sched.get(key)
            if st is None:
                st = u.sched[key] = [-math.inf, 0.0] * len(u.rates)
            for i, r in enumerate(u.rates):
                tat = st[2 * i]
                tat = (tat if tat > t else t) + cost / r
                st[2 * i] = tat
                need = (tat - t) * r
                if need > st[2 * i + 1]:
                    st[2 * i + 1] = need

    def recommendations(self, heaviest: int = 10, points: int = 40
                        ) -> list[LimitRecommendation]:
        out = []
        for u in self.units.values():
            counted = {k: st for k, st in u.sched.items() if not self.is_abusive(u, k)}
            if not counted:
                continue
            n = len(counted)
            curve: list[CurvePoint] = []
            chosen = 0
            for i, r in enumerate(u.rates):
                needs = sorted(st[2 * i + 1] for st in counted.values())
                b_target = _burst_of(_quantile(needs, self.target))
                if i == 0:
                    chosen = b_target
                curve.extend(_curve(r, needs, points, b_target))
            r = u.rates[0]
            needs0 = sorted(((st[1], k) for k, st in counted.items()), reverse=True)
            abusive = sorted(((st[1], k) for k, st in u.sched.items() if k not in counted),
                             reverse=True)
            affected = sum(1 for b, _ in needs0 if b > chosen + 1e-9)
            rates = self.key_rates(u)
            b_sorted = [b for b, _ in reversed(needs0)]
            out.append(LimitRecommendation(
                limit=u.limit, name=u.name,
                algorithm="gcra" if u.algorithm == "gcra" else "token-bucket",
                rate=r, burst=chosen, keys=n, keys_affected=affected,
                rates=_summary(rates), bursts=_summary(b_sorted),
                heaviest=tuple((k, b) for b, k in needs0[:heaviest]),
                curve=tuple(sorted(set(curve), key=lambda p: (p.rate, p.burst))),
                abusive=tuple((k, b, int(u.keys[k][3]), u.keys[k][4] / u.keys[k][3])
                              for b, k in abusive[:heaviest])))
        return out


def _burst_of(need: float) -> int:
    """A whole capacity of at least one request that admits a backlog of `need`."""
    return max(1, math.ceil(need - 1e-6))


def _curve(rate: float, needs: Sequence[float], points: int, chosen: int
           ) -> list[CurvePoint]:
    """Bursts at `points` quantiles of `needs` (and `chosen`) -> keys affected at each."""
    import bisect  # noqa: PLC0415

    n = len(needs)
    bursts = {_burst_of(_quantile(needs, (j + 1) / points)) for j in range(points)}
    bursts.add(chosen)
    bursts.add(1)
    out = []
    for b in sorted(bursts):
        ok = bisect.bisect_right(needs, b + 1e-9)
        out.append(CurvePoint(rate, b, n - ok, (n - ok) / n))
    return out


def _summary(xs: Sequence[float]) -> dict[str, float]:
    if not xs:
        return {}
    return {"p50": _quantile(xs, 0.5), "p90": _quantile(xs, 0.9),
            "p99": _quantile(xs, 0.99), "max": xs[-1]}


def check_target(target: float) -> None:
    if isinstance(target, bool) or not isinstance(target, (int, float)) \
            or not 0 < target <= 1:
        raise ValueError(f"the target is the share of keys to admit in full, between 0 and "
                         f"1 (0.99 for 99 %), got {target!r}")


def recommended_data(data: Mapping[str, Any], recs: Sequence[LimitRecommendation]
                     ) -> tuple[dict[str, Any], list[str]]:
    """`data` (a parsed policies file) with each recommended limit set to its proposal,
    and the overrides made, as ``LIMIT.FIELD=VALUE`` texts."""
    from ._compare import _named_limits  # noqa: PLC0415

    out = copy.deepcopy(dict(data))
    tables = _named_limits(out)
    done: list[str] = []
    for r in recs:
        for t in tables.get(r.name, ()):
            for k in ("nodelay", "delay"):
                t.pop(k, None)
            t.update(algorithm=r.algorithm, rate=r.rate_text, burst=r.burst)
        done.append(f"{r.name}.algorithm={r.algorithm}")
        done.append(f"{r.name}.rate={r.rate_text}")
        done.append(f"{r.name}.burst={r.burst}")
    return out, done


def recommend(events: Callable[[], Iterable[LogEvent]], data: Mapping[str, Any] | None = None,
              *, target: float = 0.99, window: float = 60.0, gap: float = 1.0,
              bucket: float | None = None, curve_rates: Sequence[float] = (0.5, 2.0),
              source: str = "<policies>", replay: bool = True,
              abusive_share: float | None = ABUSIVE_SHARE, abusive_min: int = ABUSIVE_MIN,
              progress: Callable[[str, int], None] | None = None) -> Recommendation:
    """Survey the traffic `events()` yields (called once per pass: three times, or two
    without `replay`) -> a `Recommendation` for `target` (see the module docstring).

    `data`: a parsed policies file (its limits are surveyed and set), or None for one
    per-client-IP limit. `window`: seconds of the long-window rate. `gap`, `bucket`: as
    `compare` (a `bucket` given that the log's span needs more than 1000 of is refused
    after the first pass). `abusive_share`, `abusive_min`: the rule for keys left out
    (module docstring; None counts every key). `progress(pass name, events)` is called
    every 65,536 events.
    """
    check_target(target)
    given = data is not None
    base = dict(data) if data is not None else per_client_policies()
    policies = parse_policies(base, source=source if given else "<per-client>")
    survey = Survey(policies, target=target, window=window, curve_rates=curve_rates,
                    abusive_share=abusive_share, abusive_min=abusive_min)
    for name, step in (("rates", survey.add_rates), ("bursts", survey.add_bursts)):
        for n, ev in enumerate(events(), 1):
            step(ev)
            if progress is not None and n % 65536 == 0:
                progress(name, n)
        if name == "rates":
            span = (survey.last_t or 0.0) - (survey.first_t or 0.0)
            if replay and bucket is not None and span >= bucket * MAX_BUCKETS:
                raise ValueError(fixed_width_error(bucket, span, MAX_BUCKETS))
            survey.choose_rates()
    recs = survey.recommendations()
    new_data, overrides = recommended_data(base, recs)
    comparison = None
    if replay and recs:
        cands = [Candidate("as given", policies)] if given else []
        cands.append(Candidate("recommended",
                               parse_policies(new_data, source=f"{source} (recommended)")))
        comparison = compare(cands, events(), client_of=client_resolver(policies), gap=gap,
                             bucket=bucket,
                             progress=None if progress is None else
                             (lambda n: progress("replay", n)))
    return Recommendation(target, window, tuple(recs), comparison, tuple(overrides),
                          abusive_share, abusive_min)
