"""The decision engine: descriptors in, one atomic store call, a status per descriptor out.

Both transports (the HTTP JSON API and Envoy's gRPC protocol) turn their requests into
`DescriptorRequest` values with `make_descriptor` and call `Engine.check`; the answer is a
`CheckResult` they render in their own format. So the two APIs validate, match, charge and
count identically.

One check, step by step:

1. Read the live `Policies` snapshot once (a reload swaps it atomically; a check in flight
   keeps the snapshot it started with).
2. Match every descriptor to its rule (`Domain.match`); an unmatched descriptor (one with no
   entries too) is OK and charges nothing, an ``unlimited`` one is OK without touching the
   store, and a domain the policies do not define matches nothing (all as
   envoyproxy/ratelimit; ``[service] unknown_domain = "error"`` refuses it instead).
3. For every limit of every matched rule, build a store check ``(limit, counter key, cost)``,
   cost = hits (the descriptor's, else the request's) x the rule's ``cost``. Checks of the same
   limit and key (two descriptors sharing a budget) are merged by adding their costs. A
   descriptor whose own hits are 0 only looks (Envoy's ``hits_addend: 0``).
4. Decide all enforced checks in **one** store call, all-or-nothing: if any limit rejects,
   nothing is charged (unlike envoyproxy/ratelimit, whose fixed-window counters are bumped
   even for a rejected request). Shadow-mode checks are decided in a second call and can
   never reject. Looks (cost 0, never charged) are a third call, made only when needed: for
   the hits-0 descriptors, and, when the enforced call rejected, for the descriptors it would
   have admitted, so that they report what they really have left (the store's answers for
   them are "as if charged", and nothing was).
5. These calls are the decision core's plans (`ratekeeper.core.decide`, run with
   `core.arun`): if the store fails (a `StoreError`), the core's failure policy decides, as
   for a `Limiter` with that policy (``open``, ``closed``, or ``local`` with the snapshot's
   ``fallback_share``), and the result says ``degraded``. Shadow-mode checks fail ``open``.
   Any other exception is a bug, not a store failure: it propagates (HTTP 500, gRPC
   INTERNAL, logged once with its traceback by the transport).

Time comes from the injected `clock` (the store's default: monotonic for memory, wall clock
or server time for Redis); tests pass a `ManualClock`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple

from .. import core
from .._errors import InvalidCost, RateKeeperError, StoreError
from .._memo import Memo
from .._rates import Rate
from .._types import Decision, Limit
from ..core import FailurePolicy, merge_decisions
from ..stores._base import AsyncStore, Check, Store
from ..stores.memory import MemoryStore
from ._keys import By, counter_key
from ._model import Policies
from ._rules import DescriptorRequest, Override, PolicyLimit, Rule, drop_replaced
from ._stats import NullStats, Stats

_new = tuple.__new__  # a NamedTuple from its fields in order, without keyword parsing

__all__ = [
    "MAX_DESCRIPTORS",
    "MAX_ENTRIES",
    "CheckResult",
    "DescriptorRequest",
    "DescriptorStatus",
    "Engine",
    "InvalidRequest",
    "Override",
    "UnknownDomain",
    "check_text",
    "make_descriptor",
]

log = logging.getLogger("ratekeeper.policy")

#: Bounds on one request, so that no request can make the service do unbounded work.
MAX_DESCRIPTORS = 64
MAX_ENTRIES = 32
MAX_KEY_CHARS = 256
MAX_VALUE_CHARS = 1024
#: Envoy `limit` overrides remembered (least recently used go first): one rule and limit per
#: distinct (domain, requests_per_unit, unit), so that any number of distinct overrides keeps
#: memory bounded, as `--max-keys` bounds the key tables.
OVERRIDE_CACHE_SIZE = 1024
#: Plain requests whose store checks (and plans) an engine remembers (`Memo`s: cheaper per
#: hit than an LRU), at most this many and at most PLAN_MEMO_BYTES of them.
SIMPLE_CACHE_SIZE = 10_000
#: The bytes the entries of each of those memos hold at most, as `_entries_bytes` estimates
#: them: 10,000 plain requests of a few short descriptors fit (~1-2 KB each); requests as
#: large as the limits allow (a 53 KB /v1/check) are a few hundred, or not remembered, instead
#: of 10,000 of them holding a gigabyte.
PLAN_MEMO_BYTES = 32 << 20


def _entries_bytes(descriptors: Sequence[DescriptorRequest], checks: int) -> int:
    """The bytes a memo entry for `descriptors` holds, roughly (over rather than under): its
    key's entries, the counter keys built from them (`checks` of them over all, each as long
    as its descriptor's entries at most), and each object's own size."""
    chars = 0
    for d in descriptors:
        chars += sum(len(k) + len(v) + 120 for k, v in d.entries)
    per_descriptor = checks / max(1, len(descriptors))
    return int(chars * (2 + per_descriptor)) + 400 * (len(descriptors) + checks) + 500
#: The name of every override's rule (and its `rule` metric label).
OVERRIDE_RULE = "{override}"

#: Seconds per unit of Envoy's RateLimitUnit / RateLimitResponse.RateLimit.Unit (month and
#: year as envoyproxy/ratelimit counts them: 30 and 365 days).
UNIT_SECONDS: dict[str, int] = {
    "second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400,
    "month": 30 * 86400, "year": 365 * 86400,
}

Outcome = Literal["allowed", "rejected", "shadow_rejected", "unlimited", "unmatched"]

_PROBE = Limit("fixed-window", "1/s", name="_ratekeeper.readyz")


class InvalidRequest(RateKeeperError, ValueError):
    """The request is malformed or asks for something impossible (HTTP 400, gRPC
    INVALID_ARGUMENT). The message says what and where."""


class UnknownDomain(InvalidRequest):
    """The request names a domain the policies do not define (HTTP 404)."""

    def __init__(self, domain: str, known: Sequence[str]) -> None:
        self.domain = domain
        self.known = tuple(known)
        shown = ", ".join(repr(k) for k in known[:20]) + (", ..." if len(known) > 20 else "")
        super().__init__(f"unknown domain {domain[:100]!r}; the policies define: "
                         f"{shown or 'no domains'}")


class DescriptorStatus(NamedTuple):
    """What happened to one descriptor.

    `outcome`: ``allowed``; ``rejected``; ``shadow_rejected`` (a shadow-mode rule would have
    rejected; the answer is OK); ``unlimited``; ``unmatched`` (no rule: OK, nothing charged).
    `decision` is the most restrictive decision of the rule's limits (None when no limit
    was consulted). (A NamedTuple, like `Decision`: one is built per descriptor per check.)
    """

    outcome: Outcome
    rule: Rule | None = None
    decision: Decision | None = None
    limits: tuple[Limit, ...] = ()

    @property
    def ok(self) -> bool:
        return self.outcome != "rejected"

    @property
    def over_limit(self) -> bool:
        """Envoy's per-descriptor code: over its limit, unless its own rule is in shadow mode
        (global or domain shadow mode answers OK overall but keeps each descriptor's code,
        as envoyproxy/ratelimit's ``SHADOW_MODE``)."""
        if self.outcome == "shadow_rejected":
            return self.rule is not None and not self.rule.shadow_mode
        return self.outcome == "rejected"


class CheckResult(NamedTuple):
    """The answer to one check: overall verdict, the deciding decision, per-descriptor statuses.

    `decision` is the most restrictive enforced decision (the rejecting one with the longest
    wait, else the admitting one with the fewest remaining), None when no enforced limit
    applied. `policies` lists every enforced limit consulted, for ``RateLimit-Policy``.
    """

    domain: str
    allowed: bool
    decision: Decision | None
    statuses: tuple[DescriptorStatus, ...]
    policies: tuple[Limit, ...]
    degraded: bool = False
    legacy_headers: bool = False
    generation: int = 0
    #: False when the domain is not in the policies (every descriptor is then unmatched).
    known_domain: bool = True
    #: The store failure policy of the rule that decided (``[service] failure`` unless that
    #: rule has its own): what a degraded answer says decided it.
    failure: str = "open"
    #: Where the enforced checks were charged, when they were admitted (for a refund: the
    #: middleware's queued request that would wait past ``max_delay``).
    ticket: core.Ticket | None = None


def check_hits(value: object, what: str, *, allow_zero: bool = False) -> float:
    """A request's hits (cost): a finite number above 0 (or 0, where `allow_zero`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"{what} must be a number, got {_short(value)}")
    try:
        f = float(value)
    except OverflowError:
        f = math.inf
    if not ((f > 0 or (allow_zero and f == 0)) and f < math.inf):  # also NaN
        lowest = "0 or more" if allow_zero else "above 0"
        raise InvalidRequest(f"{what} must be a finite number {lowest}, got {_short(value)}")
    return f


def check_text(s: str, what: str) -> None:
    """Raise `InvalidRequest` if `s` is not valid Unicode text (a lone UTF-16 surrogate, which
    a JSON escape such as ``"\\ud800"`` can produce): it could be neither encoded as a counter
    key nor sent to a store."""
    if s.isascii():
        return
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidRequest(
            f"{what} contains a lone UTF-16 surrogate ({s[e.start]!r} at character {e.start}), "
            "which is not valid Unicode text; escape characters outside the BMP as a "
            "surrogate pair (\\ud83d\\ude00) or send them as UTF-8") from None


def make_descriptor(entries: Sequence[tuple[object, object]], *, hits: object = None,
                    override: Override | None = None,
                    where: str = "descriptor") -> DescriptorRequest:
    """Validate one descriptor's entries (and hits); raise `InvalidRequest` saying where.

    No entries is valid: such a descriptor matches no rule (as envoyproxy/ratelimit). Its own
    `hits` may be 0: a check that charges nothing (Envoy's per-descriptor ``hits_addend``)."""
    if len(entries) > MAX_ENTRIES:
        raise InvalidRequest(f"{where} has {len(entries)} entries; at most {MAX_ENTRIES}")
    out: list[tuple[str, str]] = []
    for j, (k, v) in enumerate(entries):
        if not isinstance(k, str) or not k:
            raise InvalidRequest(f"{where}.entries[{j}].key must be a non-empty string, "
                                 f"got {_short(k)}")
        if not isinstance(v, str):
            raise InvalidRequest(f"{where}.entries[{j}].value must be a string, got {_short(v)}")
        if len(k) > MAX_KEY_CHARS:
            raise InvalidRequest(f"{where}.entries[{j}].key is {len(k)} characters; "
                                 f"at most {MAX_KEY_CHARS}")
        if len(v) > MAX_VALUE_CHARS:
            raise InvalidRequest(f"{where}.entries[{j}].value is {len(v)} characters; "
                                 f"at most {MAX_VALUE_CHARS}")
        check_text(k, f"{where}.entries[{j}].key")
        check_text(v, f"{where}.entries[{j}].value")
        out.append((k, v))
    h = None if hits is None else check_hits(hits, f"{where} cost", allow_zero=True)
    return DescriptorRequest(tuple(out), h, override)


def _short(v: object) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


#: One descriptor's part of a plan: its rule, its checks' keys, shadow, look-only.
_RulePlan = tuple[Rule | None, list[tuple[str, str]], bool, bool]
#: What `plan` works out before its store calls: per descriptor its `_RulePlan`, the
#: enforced checks, the rules' own failure policies, the shadow checks and the looks.
_Prepared = tuple[
    list[_RulePlan],
    dict[tuple[str, str], Check],
    dict[tuple[str, str], FailurePolicy],
    dict[tuple[str, str], Check],
    dict[tuple[str, str], Check],
]


class Engine:
    """Decides checks against the live policies and a store. Safe to share between tasks.

    `policies` returns the current snapshot (a `PolicyHolder` or ``lambda: policies``);
    `store` is any `AsyncStore`; `clock` defaults to the store's; `stats` receives events.
    """

    def __init__(
        self,
        policies: Callable[[], Policies],
        store: AsyncStore | Store,
        *,
        clock: Callable[[], float] | None = None,
        stats: Stats | None = None,
        fallback_max_keys: int = 100_000,
    ) -> None:
        self._policies = policies
        self.store = store
        self.clock: Callable[[], float] = clock or store.default_clock
        self.stats: Stats = NullStats() if stats is None else stats
        self.fallback_max_keys = fallback_max_keys
        #: The one failure policy of this engine (the core's): its fallback store, its
        #: degraded marking and its logging; each call passes the snapshot's policy.
        self.failure = core.Failure("open", max_keys=fallback_max_keys,
                                    on_error=self._on_store_error)
        self._last_error = ""
        self._overrides: OrderedDict[tuple[str, int, str], Rule] = OrderedDict()
        #: `simple_checks` answers by (snapshot, domain, hits, descriptors).
        self._simple: Memo[tuple[object, ...],
                           tuple[Policies, tuple[list[Check], tuple[Limit, ...]]]] = \
            Memo(SIMPLE_CACHE_SIZE, PLAN_MEMO_BYTES)
        #: `plan`'s checks before the store calls, by (snapshot, domain, hits, descriptors).
        self._plans: Memo[tuple[object, ...], tuple[Policies, _Prepared]] = \
            Memo(SIMPLE_CACHE_SIZE, PLAN_MEMO_BYTES)
        self._plans_of: Policies | None = None  # the snapshot `_plans` holds plans of
        # The exact MemoryStore (not a subclass, which may override its async methods alone)
        # is driven with plain calls: the same answers, without a coroutine per store call.
        self._awaits_nothing = type(store) is MemoryStore
        # id(rule) -> (rule, the limits a check of it consults, by name: RateLimit-Policy)
        self._consulted: dict[int, tuple[Rule, tuple[Limit, ...]]] = {}

    def __repr__(self) -> str:
        return f"Engine(store={self.store!r}, policies={self._policies().summary()})"

    @property
    def policies(self) -> Policies:
        return self._policies()

    async def check(self, domain: str, descriptors: Sequence[DescriptorRequest],
                    hits: float = 1.0) -> CheckResult:
        """Decide one request on an asyncio store. Raises `UnknownDomain` /
        `InvalidRequest` on bad input."""
        snap = self._policies()
        if self._awaits_nothing:  # MemoryStore's async methods only call its sync ones
            return self._one_rule_now(snap, domain, descriptors, hits) \
                or core.run(self.plan(snap, domain, descriptors, hits))
        one = self._remembered_one_rule(snap, domain, descriptors, hits)
        if one is None:
            return await core.arun(self.plan(snap, domain, descriptors, hits))
        # `plan`'s answer for a remembered one-rule request, with its one store call
        # awaited here rather than through the plan's generators (`_one_rule_now`'s twin).
        checks, now, t0 = list(one[1].values()), self.clock(), time.perf_counter()
        try:
            answer = await self.store.adecide(checks, now, True)  # type: ignore[union-attr]
        except StoreError as e:
            answer = e
        got = self._one_rule_answered(snap, domain, one, checks=checks, now=now, t0=t0,
                                      answer=answer)
        return got if isinstance(got, CheckResult) else await core.arun(got, answer)

    def _memo_key(self, snap: Policies, domain: str, descriptors: Sequence[DescriptorRequest],
                  hits: float) -> tuple[object, ...] | None:
        """The key `plan` remembers its work before the store calls by (None: not
        remembered). Only requests whose plan depends on nothing but the snapshot, the
        domain and the hits (no rule given, no Envoy override) are."""
        if hits.__class__ is not float:
            return None
        if len(descriptors) == 1:  # the common case, without a generator
            d0 = descriptors[0]
            if d0.rule is None and d0.override is None and (
                    d0.hits is None or d0.hits.__class__ is float):
                return (id(snap), domain, hits, d0.entries, d0.hits)
            return None
        if all(d.rule is None and d.override is None
               and (d.hits is None or d.hits.__class__ is float) for d in descriptors):
            return (id(snap), domain, hits, *[(d.entries, d.hits) for d in descriptors])
        return None

    def _remembered_one_rule(self, snap: Policies, domain: str,
                             descriptors: Sequence[DescriptorRequest], hits: float
                             ) -> tuple[_RulePlan, dict[tuple[str, str], Check]] | None:
        """The plan and checks `plan` remembered for this request when they are one
        descriptor of one enforced rule (what `_one_rule` decides), else None."""
        if len(descriptors) != 1:  # (`plan` has one part per descriptor: not looked up twice)
            return None
        memo = self._memo_key(snap, domain, descriptors, hits)
        got = None if memo is None else self._plans.get(memo)
        if got is None or got[0] is not snap:
            return None
        plans, enforced, failures, shadow, looks = got[1]
        if len(plans) != 1 or not enforced or shadow or looks or failures:
            return None
        settings = snap.settings
        if settings.fallback_share != self.failure.share:  # a reload changed it
            self.failure.set_share(settings.fallback_share)
        return plans[0], enforced

    def _one_rule_now(self, snap: Policies, domain: str,
                      descriptors: Sequence[DescriptorRequest], hits: float
                      ) -> CheckResult | None:
        """`plan`'s answer with plain calls, on a store that awaits nothing, for a request
        `plan` remembered as one descriptor of one enforced rule (`_one_rule`), else None
        (`plan` answers). The same answer: tests/service/test_plan_memo.py holds it equal
        to the general path."""
        one = self._remembered_one_rule(snap, domain, descriptors, hits)
        if one is None:
            return None
        checks, now, t0 = list(one[1].values()), self.clock(), time.perf_counter()
        try:
            answer = self.store.decide(checks, now, True)  # type: ignore[union-attr]
        except StoreError as e:
            answer = e
        got = self._one_rule_answered(snap, domain, one, checks=checks, now=now, t0=t0,
                                      answer=answer)
        return got if isinstance(got, CheckResult) else core.run(got, answer)

    def _one_rule_answered(self, snap: Policies, domain: str,
                           one: tuple[_RulePlan, dict[tuple[str, str], Check]], *,
                           checks: list[Check], now: float, t0: float,
                           answer: tuple[list[Decision], float] | StoreError
                           ) -> CheckResult | core.Plan[CheckResult]:
        """`_one_rule`'s answer once the direct paths' store call (started at `t0`) gave
        `answer`; or, for a failure or a store that answered with a fallback of its own
        (degraded), `_one_rule` itself, for the caller to run on from that call."""
        plan, enforced = one
        if isinstance(answer, StoreError) or answer[0][0].degraded:
            return self._one_rule(snap, domain, plan, enforced, now, t0=t0)
        decisions, at = answer
        self.stats.store_call(time.perf_counter() - t0, None)
        ticket = core.charged(self.store, checks, decisions, at, failure=self.failure)
        return self._one_rule_result(snap, domain, plan, enforced, decisions,
                                     degraded=False, ticket=ticket)

    def plan(self, snap: Policies, domain: str, descriptors: Sequence[DescriptorRequest],
             hits: float = 1.0, *, from_app: bool = False) -> core.Plan[CheckResult]:
        """Plan: decide one request on the snapshot `snap`; either driver runs it.

        `from_app`: the cost is the application's (an HTTP request's: the file's rules, held
        to ``max_cost`` when loaded, or the app's cost function), not a remote caller's, so
        ``max_cost`` does not bound it and a fraction is rounded up for a limit that counts
        whole requests (narrower, never wider), instead of refusing the request."""
        if not descriptors:
            # As envoyproxy/ratelimit ("rate limit descriptor list must not be empty").
            raise InvalidRequest("a check needs at least one descriptor")
        if len(descriptors) > MAX_DESCRIPTORS:
            raise InvalidRequest(f"{len(descriptors)} descriptors in one check; at most "
                                 f"{MAX_DESCRIPTORS}")
        settings = snap.settings
        dom = snap.domains.get(domain)
        if dom is None:
            if settings.unknown_domain == "error":
                raise UnknownDomain(domain, list(snap.domains))
            # No rules, so nothing is limited (envoyproxy/ratelimit answers OK). No decision
            # metric: its domain label would come from the request, unbounded.
            return CheckResult(domain, True, None,
                               tuple(DescriptorStatus("unmatched") for _ in descriptors), (),
                               legacy_headers=settings.legacy_headers,
                               generation=snap.generation, known_domain=False)
        # The same descriptors on the same snapshot plan the same checks (a returning client):
        # the work before the store calls is remembered per request shape, at most
        # SIMPLE_CACHE_SIZE of them. Only requests whose plan depends on nothing but the
        # snapshot, the domain and the hits (no rule given, no Envoy override) are.
        memo = self._memo_key(snap, domain, descriptors, hits)
        prepared = None
        if memo is not None:
            got = self._plans.get(memo)
            if got is not None and got[0] is snap:
                prepared = got[1]
        # Per descriptor: its rule, its checks' keys, shadow, look-only (hits 0).
        plans: list[_RulePlan]
        enforced: dict[tuple[str, str], Check]
        failures: dict[tuple[str, str], FailurePolicy]  # rules with their own policy
        shadow: dict[tuple[str, str], Check]
        looks: dict[tuple[str, str], Check]  # cost 0: the same answer for any group
        if prepared is not None:
            plans, enforced, failures, shadow, looks = prepared
            looks = looks.copy()  # a relook below adds to it
        else:
            global_shadow = settings.shadow_mode or dom.shadow_mode
            plans, enforced, failures, shadow, looks = [], {}, {}, {}, {}
            # Rules first, for envoyproxy/ratelimit's `replaces` (it needs every match).
            matched = drop_replaced([
                d.rule if d.rule is not None
                else self._override_rule(dom.name, d) if d.override is not None
                and settings.allow_overrides else dom.match(d.entries) for d in descriptors])
            for i, d in enumerate(descriptors):
                rule = matched[i]
                look = d.hits == 0
                if rule is None or rule.unlimited or not rule.limits:
                    # (a rule of 0 requests per unit is shadowed as any: answered OK)
                    plans.append((rule, [], rule is not None and not rule.unlimited
                                  and (global_shadow or rule.shadow_mode), look))
                    continue
                # A quota-mode rule is checked apart, as a shadow one: its being over does
                # not stop the others being charged, and the verdict weighs it below.
                is_shadow = global_shadow or rule.shadow_mode or rule.quota_mode
                if look:
                    looked: list[tuple[str, str]] = []
                    for pl in rule.limits:
                        k = (pl.limit.name, counter_key(d.entries, pl.by))
                        looks[k] = (pl.limit, k[1], 0.0)
                        looked.append(k)
                    plans.append((rule, looked, is_shadow, True))
                    continue
                base = hits if d.hits is None else d.hits
                cost = base * rule.cost
                if not cost <= settings.max_cost and not from_app:
                    raise InvalidRequest(
                        f"descriptor {i}: cost {cost:g} (hits {base:g} x rule cost {rule.cost:g}) "
                        f"is above the service's max_cost of {settings.max_cost:g}")
                group = shadow if is_shadow else enforced
                own_failure = None if is_shadow else rule.failure
                keys: list[tuple[str, str]] = []
                counter_keys: dict[By, str] = {}
                for pl in rule.limits:
                    lim = pl.limit
                    if cost == 1.0:  # every limit takes one whole request
                        c = 1.0
                    else:
                        try:
                            c = lim.check_cost(cost)
                        except InvalidCost as e:
                            if not from_app:
                                raise InvalidRequest(f"descriptor {i}: {e} (limit "
                                                     f"{lim.name!r})") from None
                            c = lim.check_cost(math.ceil(cost))
                    ck = counter_keys.get(pl.by)
                    if ck is None:
                        ck = counter_keys[pl.by] = counter_key(d.entries, pl.by)
                    k = (lim.name, ck)
                    slot = group.get(k)
                    group[k] = (lim, ck, c if slot is None else slot[2] + c)
                    keys.append(k)
                    if own_failure is not None:
                        failures[k] = own_failure
                plans.append((rule, keys, is_shadow, False))
            if memo is not None:
                if self._plans_of is not snap:  # a reload: the old snapshot's plans are dead
                    self._plans.clear()
                    self._plans_of = snap
                self._plans.put(memo, (snap, (plans, enforced, failures, shadow, dict(looks))),
                                _entries_bytes(descriptors,
                                               len(enforced) + len(shadow) + len(looks)))

        now = self.clock()
        if len(plans) == 1 and enforced and not shadow and not looks and not failures:
            # One descriptor whose rule's limits are all enforced (the common request): the
            # general answer below, without its bookkeeping for several descriptors, shadow
            # rules and looks (tests/service/test_plan_memo.py holds the two equal).
            return (yield from self._one_rule(snap, domain, plans[0], enforced, now))
        results: dict[tuple[str, str], Decision] = {}
        degraded = False
        ticket: core.Ticket | None = None
        if enforced:
            if settings.fallback_share != self.failure.share:  # a reload changed it
                self.failure.set_share(settings.fallback_share)
            policies = None if not failures else \
                [failures.get(k, settings.failure) for k in enforced]
            decisions, degraded, ticket = yield from self._decide(
                list(enforced.values()), now, settings.failure, policies=policies)
            results.update(zip(enforced.keys(), decisions, strict=True))
        shadow_results: dict[tuple[str, str], Decision] = {}
        if shadow:
            # A quota-mode descriptor is charged whatever the others say, as envoyproxy/
            # ratelimit's DoLimit charges each: one store call per quota-mode descriptor
            # (a store call is all or nothing), the shadow-mode ones together.
            groups: list[list[tuple[str, str]]] = []
            taken: set[tuple[str, str]] = set()
            for rule, plan_keys, plan_shadow, plan_look in plans:
                if plan_shadow and not plan_look and rule is not None and rule.quota_mode:
                    groups.append([k for k in plan_keys if k not in taken])
                    taken.update(plan_keys)
            rest = [k for k in shadow if k not in taken]
            for keys in (rest, *groups):
                if keys:
                    decisions, _, _ = yield from self._decide([shadow[k] for k in keys], now,
                                                              "open")
                    shadow_results.update(zip(keys, decisions, strict=True))
        # The enforced call rejected: nothing was charged, so a descriptor it would have
        # admitted gets a look at its counters instead of its "as if charged" answer.
        relook: set[tuple[str, str]] = set()
        if results and not all(d.allowed for d in results.values()):
            for _, plan_keys, plan_shadow, plan_look in plans:
                if plan_keys and not plan_shadow and not plan_look \
                        and all(results[k].allowed for k in plan_keys):
                    for k in plan_keys:
                        if k not in looks:
                            lim, ck, _ = enforced[k]
                            looks[k] = (lim, ck, 0.0)
                            relook.add(k)
        look_results: dict[tuple[str, str], Decision] = {}
        if looks:
            decisions, look_degraded, _ = yield from self._decide(
                list(looks.values()), now, settings.failure, consume=False)
            look_results.update(zip(looks.keys(), decisions, strict=True))
            if look_degraded:  # a look the policy answered says nothing better: keep them
                for k in relook:
                    del look_results[k]
                degraded = degraded or len(relook) < len(looks)
            for k in relook & look_results.keys():
                results[k] = look_results[k]

        statuses: list[DescriptorStatus] = []
        deciding: list[Decision] = []
        consulted: dict[str, Limit] = {}
        stats = self.stats
        for rule, plan_keys, plan_shadow, plan_look in plans:
            if rule is None:
                statuses.append(DescriptorStatus("unmatched"))
                stats.decision(domain, "", "", "unmatched")
                continue
            if rule.unlimited:
                statuses.append(DescriptorStatus("unlimited", rule))
                stats.decision(domain, rule.name, "", "unlimited")
                continue
            if not rule.limits and plan_look:  # nothing asked of 0 allowed (as 0 > 0 is false
                # in envoyproxy/ratelimit's check)
                statuses.append(DescriptorStatus("allowed", rule, Decision(True, 0, 0.0, 0.0,
                                                                           0.0, None)))
                stats.decision(domain, rule.name, "", "allowed")
                continue
            if not rule.limits:  # 0 requests per unit (or such an override): always over
                never = Decision(False, 0, None, 0.0, 0.0, None)
                if plan_shadow:  # as envoyproxy/ratelimit: over, and answered OK in shadow
                    statuses.append(DescriptorStatus("shadow_rejected", rule, never))
                    stats.decision(domain, rule.name, "", "shadow_rejected")
                    continue
                statuses.append(DescriptorStatus("rejected", rule, never))
                deciding.append(never)
                stats.decision(domain, rule.name, "", "rejected")
                continue
            source = look_results if plan_look else shadow_results if plan_shadow else results
            merged = source[plan_keys[0]] if len(plan_keys) == 1 else \
                merge_decisions([source[k] for k in plan_keys])
            limits = rule.limit_objs
            outcome: Outcome
            if plan_shadow:
                outcome = "allowed" if merged.allowed else "shadow_rejected"
            else:
                outcome = "allowed" if merged.allowed else "rejected"
                deciding.append(merged)
                for lim in limits:
                    consulted.setdefault(lim.name, lim)
            statuses.append(DescriptorStatus(outcome, rule, merged, limits))
            policy = merged.limit.name if merged.limit is not None else ""
            stats.decision(domain, rule.name, policy, outcome)
        decision = merge_decisions(deciding) if deciding else None
        failure = settings.failure
        if decision is not None and decision.degraded:
            # The policy that answered for the deciding limit (a rule may have its own).
            for st in statuses:
                if st.decision == decision and st.rule is not None:
                    failure = st.rule.failure or settings.failure
                    break
        # envoyproxy/ratelimit's quota mode: OVER_LIMIT when every quota-mode descriptor is
        # over (an ordinary one over is a rejection anyway); shadow mode still answers OK.
        quota = [st for st in statuses if st.rule is not None and st.rule.quota_mode
                 and st.decision is not None]
        quota_over = bool(quota) and all(st.over_limit for st in quota) \
            and not (settings.shadow_mode or dom.shadow_mode)
        return CheckResult(
            domain=domain,
            allowed=all(s.ok for s in statuses) and not quota_over,
            decision=decision,
            failure=failure,
            statuses=tuple(statuses),
            policies=tuple(consulted.values()),
            degraded=degraded,
            legacy_headers=settings.legacy_headers,
            generation=snap.generation,
            ticket=ticket,
        )

    def simple_checks(self, snap: Policies, domain: str,
                      descriptors: Sequence[DescriptorRequest], hits: float
                      ) -> tuple[list[Check], tuple[Limit, ...]] | None:
        """The store checks of a request whose every matched rule is plain (enforced limits
        or unlimited: no shadow mode, own failure policy, ``replaces``, override or
        per-descriptor hits), with the limits they consult; None for any other request,
        which `plan` decides. A driver that needs only the merged decision (the
        middleware) decides these with one `core.hit`, skipping the per-descriptor
        statuses `plan` builds; the decision is the same (`plan`'s merged one)."""
        settings = snap.settings
        if len(descriptors) == 1:  # the common case, without the generators below
            cacheable = descriptors[0].rule is None
            ck: tuple[object, ...] = (id(snap), domain, hits, descriptors[0].entries)
        else:
            cacheable = all(d.rule is None for d in descriptors)
            ck = (id(snap), domain, hits, *(d.entries for d in descriptors))
        if cacheable:
            hit = self._simple.get(ck)
            if hit is not None and hit[0] is snap:
                if settings.fallback_share != self.failure.share:
                    self.failure.set_share(settings.fallback_share)
                return hit[1]
        dom = snap.domains.get(domain)
        if dom is None or settings.shadow_mode or dom.shadow_mode \
                or len(descriptors) > MAX_DESCRIPTORS:
            return None
        checks: dict[tuple[str, str], Check] = {}
        limits: dict[str, Limit] = {}
        for d in descriptors:
            if d.hits is not None or d.override is not None:
                return None
            rule = d.rule if d.rule is not None else dom.match(d.entries)
            if rule is None or rule.unlimited:
                continue
            if rule.shadow_mode or rule.quota_mode or rule.failure is not None \
                    or rule.replaces or not rule.limits:
                return None
            cost = hits * rule.cost
            if not cost <= settings.max_cost:
                return None  # `plan` says why
            for pl in rule.limits:
                lim = pl.limit
                try:
                    c = lim.check_cost(cost)
                except InvalidCost:
                    return None
                k = (lim.name, counter_key(d.entries, pl.by))
                slot = checks.get(k)
                checks[k] = (lim, k[1], c if slot is None else slot[2] + c)
                limits.setdefault(lim.name, lim)
        if settings.fallback_share != self.failure.share:  # a reload changed it
            self.failure.set_share(settings.fallback_share)
        out = (list(checks.values()), tuple(limits.values()))
        if cacheable:
            # The same descriptors on the same snapshot make the same checks (a returning
            # client): remembered, at most SIMPLE_CACHE_SIZE of them (PLAN_MEMO_BYTES).
            self._simple.put(ck, (snap, out), _entries_bytes(descriptors, len(checks)))
        return out

    def _one_rule(self, snap: Policies, domain: str, plan: _RulePlan,
                  enforced: dict[tuple[str, str], Check], now: float, *,
                  t0: float | None = None) -> core.Plan[CheckResult]:
        """`plan`'s answer for one descriptor whose rule is enforced (no shadow, no look, no
        rule of its own failure policy): the same `CheckResult` as the general path. `t0`:
        when its store call started, if before this plan (`check`'s direct paths)."""
        settings = snap.settings
        if settings.fallback_share != self.failure.share:  # a reload changed it
            self.failure.set_share(settings.fallback_share)
        decisions, degraded, ticket = yield from self._decide(
            list(enforced.values()), now, settings.failure, t0=t0)
        return self._one_rule_result(snap, domain, plan, enforced, decisions,
                                     degraded=degraded, ticket=ticket)

    def _one_rule_result(self, snap: Policies, domain: str, plan: _RulePlan,
                         enforced: dict[tuple[str, str], Check], decisions: list[Decision],
                         *, degraded: bool, ticket: core.Ticket | None) -> CheckResult:
        """`_one_rule`'s answer from its store call's decisions."""
        settings = snap.settings
        rule, plan_keys = plan[0], plan[1]
        assert rule is not None  # a plan with enforced checks has a rule with limits
        if len(decisions) == len(plan_keys):  # enforced holds plan_keys, in their order
            merged = merge_decisions(decisions)
        else:  # a key twice in the rule: charged once, with both costs
            results = dict(zip(enforced.keys(), decisions, strict=True))
            merged = merge_decisions([results[k] for k in plan_keys])
        got = self._consulted.get(id(rule))
        if got is None or got[0] is not rule:
            consulted: dict[str, Limit] = {}
            for lim in rule.limit_objs:
                consulted.setdefault(lim.name, lim)
            if len(self._consulted) >= SIMPLE_CACHE_SIZE:
                self._consulted.clear()
            got = self._consulted[id(rule)] = (rule, tuple(consulted.values()))
        outcome: Outcome = "allowed" if merged.allowed else "rejected"
        self.stats.decision(domain, rule.name,
                            merged.limit.name if merged.limit is not None else "", outcome)
        # Built as tuples (both are NamedTuples), in their fields' order: keywords cost more.
        return _new(CheckResult, (
            domain, merged.allowed, merged,
            (_new(DescriptorStatus, (outcome, rule, merged, rule.limit_objs)),),
            got[1], degraded, settings.legacy_headers, snap.generation, True,
            (rule.failure or settings.failure) if merged.degraded else settings.failure,
            ticket))

    def _decide(self, checks: list[Check], now: float, policy: FailurePolicy, *,
                consume: bool = True, policies: Sequence[FailurePolicy] | None = None,
                t0: float | None = None
                ) -> core.Plan[tuple[list[Decision], bool, core.Ticket | None]]:
        """One store call, through the core; on a `StoreError`, `policy`'s decisions, or
        with `policies` (one per check: rules with their own failure policy), each check's
        own policy's. `t0`: when the store call started, if before this plan."""
        if t0 is None:
            t0 = time.perf_counter()
        if policies is None:
            decisions, ticket = yield from core.decide(self.store, checks, now, self.failure,
                                                       consume=consume, policy=policy)
        else:
            decisions, ticket = yield from self._decide_each(checks, now, policies)
        seconds = time.perf_counter() - t0
        if not decisions[0].degraded:  # the store answered (the policy marks all degraded)
            self.stats.store_call(seconds, None)
            return decisions, False, ticket
        # The error's type, as the core's on_error hook last saw it (a metric label).
        self.stats.store_call(seconds, self._last_error)
        for p in sorted(set(policies or (policy,))):
            self.stats.failure_policy(p)
        return decisions, True, ticket

    def _decide_each(self, checks: list[Check], now: float,
                     policies: Sequence[FailurePolicy]
                     ) -> core.Plan[tuple[list[Decision], core.Ticket | None]]:
        """`core.decide` where each check has its own failure policy: one store call; if it
        fails, each policy decides its own checks (and the request is admitted only if
        all of them admit it)."""
        try:
            decisions, at = yield core.Op(self.store, "decide", (checks, now, True))
        except StoreError as e:
            out: list[Decision | None] = [None] * len(checks)
            for p in sorted(set(policies)):
                idx = [i for i, q in enumerate(policies) if q == p]
                got, _ = yield from self.failure.decisions([checks[i] for i in idx], now, e, p)
                for i, d in zip(idx, got, strict=True):
                    out[i] = d
            return [d for d in out if d is not None], None
        if self.failure.failing:
            self.failure.recovered()
        admitted = all(d.allowed for d in decisions)
        return decisions, core.Ticket(self.store, checks, at) if admitted else None

    def _on_store_error(self, exc: BaseException) -> None:
        self._last_error = type(exc).__name__

    def _override_rule(self, domain: str, d: DescriptorRequest) -> Rule:
        """The rule for an Envoy `limit` override: a fixed window of `requests_per_unit`.

        As envoyproxy/ratelimit, the counter is the descriptor's entries within the unit's
        window, whatever the override's size: every override of a domain and unit is one limit
        (``api.override/second``) and one key table. The metrics' `rule` label is the fixed
        ``{override}`` (braces: no policies rule can be named so), so that no label value
        comes from a request.
        """
        o = d.override
        assert o is not None
        spec = (domain, o.requests_per_unit, o.unit)
        cache = self._overrides
        rule = cache.get(spec)
        if rule is not None:
            cache.move_to_end(spec)
            return rule
        limits: tuple[PolicyLimit, ...] = ()
        if o.requests_per_unit > 0:
            rate = Rate(o.requests_per_unit, float(UNIT_SECONDS[o.unit]))
            limits = (PolicyLimit(Limit("fixed-window", rate,
                                        name=f"{domain}.override/{o.unit}")),)
        rule = Rule(domain, OVERRIDE_RULE, (), limits, zero_unit="" if limits else o.unit)
        cache[spec] = rule
        if len(cache) > OVERRIDE_CACHE_SIZE:
            cache.popitem(last=False)
        return rule

    async def probe(self, timeout: float = 2.0) -> str | None:
        """Ask the store a harmless question (a peek); None if it answered, else the error.

        Only a store failure (or the timeout) is an answer here; a bug propagates."""
        try:
            assert isinstance(self.store, AsyncStore), "probe() needs an asyncio store"
            await asyncio.wait_for(
                self.store.adecide([(_PROBE, "probe", 1.0)], self.clock(), False), timeout)
        except (StoreError, asyncio.TimeoutError) as e:
            return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return None
