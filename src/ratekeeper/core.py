"""The decision core: everything about a rate-limit decision that is not I/O.

This module does no I/O, reads no clock of its own and never sleeps. It owns, once:

* validating keys (`check_key`) and costs (through `Limit.check_cost`);
* turning a set of limits and a key into store checks (`Limits.checks`, with
  `GLOBAL_KEY` for ``scope="global"`` limits);
* the all-or-nothing composite and the merged decision (`merge_decisions`);
* the failure policy (`Failure`: open, closed, local with a share, raise), its local
  fallback store and the degraded marking;
* reservations and refunds (`Ticket`), and the waits behind ``acquire`` (`Waits`).

Theory of operation. Work that needs a store is written as a *plan*: a generator that
yields one `Op` at a time (decide, refund, reset, or sleep) and is sent back what the
store answered, or has the `StoreError` the store raised thrown into it. `run` executes a
plan with synchronous calls, `arun` with awaits; nothing else differs. `Limiter` and
`AsyncLimiter`, the HTTP middleware and the decision service are thin drivers that build
plans here and run them, so a rule (a failure policy, a key check, the merge) exists once.

The one exception is the hot path of a single per-key limit: a store binds it once
(`Store.bind_hit`), with `HitHooks` from here, so a decision on it is one call into the
store and the failure policy is consulted only when the store raises.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Generator, Sequence
from typing import Any, Literal, NamedTuple, TypeVar

from ._errors import InvalidKey, InvalidLimit, RateLimitExceeded, StoreError
from ._rates import Rate
from ._types import GLOBAL_KEY, Decision, Limit
from .stores._base import Check, HitHooks
from .stores.memory import MemoryStore

__all__ = [
    "CLOSED_RETRY_AFTER",
    "FAILURE_POLICIES",
    "GLOBAL_KEY",
    "Failure",
    "FailurePolicy",
    "Limits",
    "Op",
    "Plan",
    "Ticket",
    "Waits",
    "arun",
    "charged",
    "check_key",
    "merge_decisions",
    "run",
]

log = logging.getLogger("ratekeeper")

T = TypeVar("T")

FailurePolicy = Literal["open", "closed", "local", "raise"]
FAILURE_POLICIES: tuple[FailurePolicy, ...] = ("open", "closed", "local", "raise")

#: How long a fail-closed decision tells the caller to wait (seconds).
CLOSED_RETRY_AFTER = 1.0

#: Longest key accepted by default (characters).
MAX_KEY_LENGTH = 512


# -- plans and their two drivers -------------------------------------------------------------


class Op(NamedTuple):
    """One step of a plan: call ``target.<method>(*args)`` (``await target.a<method>`` in
    the async driver). ``method == "sleep"``: `target` is the sleep function of the sync
    driver's caller, or the coroutine function the async driver awaits."""

    target: Any
    method: str
    args: tuple[Any, ...]


Plan = Generator[Op, Any, T]


# The two drivers are the one place where sync and async differ: a call or an await. They
# stay side by side, short and identical in shape on purpose (a plan runs the same under
# both); a shared driver object cost 0.4 µs per plan, most of a composite decision's overhead.


#: `run`'s `first` when the plan's first store call is still to be made.
_NOT_MADE: Any = object()


def run(plan: Plan[T], first: Any = _NOT_MADE) -> T:
    """Execute `plan` with synchronous store calls. With `first`, the plan's first store
    call was made already: `first` is what it returned, or the `StoreError` it raised."""
    try:
        op = next(plan) if first is _NOT_MADE else _made_first(plan, first)
        while True:
            try:
                result = op.target(*op.args) if op.method == "sleep" else \
                    getattr(op.target, op.method)(*op.args)
            except StoreError as e:
                op = plan.throw(e)
            else:
                op = plan.send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value


async def arun(plan: Plan[T], first: Any = _NOT_MADE) -> T:
    """Execute `plan` with awaited store calls (an async store's ``a``-prefixed methods);
    `first` as `run`'s."""
    try:
        op = next(plan) if first is _NOT_MADE else _made_first(plan, first)
        while True:
            try:
                result = await _acall(op)
            except StoreError as e:
                op = plan.throw(e)
            else:
                op = plan.send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value


def _made_first(plan: Plan[Any], first: Any) -> Op:
    next(plan)  # the store call made already
    return plan.throw(first) if isinstance(first, StoreError) else plan.send(first)


async def _acall(op: Op) -> Any:
    if op.method != "sleep":
        return await getattr(op.target, "a" + op.method)(*op.args)
    slept = op.target(*op.args)  # an injected sleep may be a plain function
    return await slept if inspect.isawaitable(slept) else slept


# -- keys, limits, checks --------------------------------------------------------------------


def check_key(key: object, max_length: int = MAX_KEY_LENGTH) -> str:
    """`key` if it can be a rate-limit key, else `InvalidKey` saying why and what to do."""
    if key.__class__ is not str:
        if not isinstance(key, str):
            raise InvalidKey(
                f"a key must be a string, got {type(key).__name__} {key!r:.60}; "
                "convert it (str(user_id)) or use a key function that returns a string"
            )
        key = str(key)
    if not key:
        raise InvalidKey("a key must not be empty")
    if len(key) > max_length:
        raise InvalidKey(
            f"key is {len(key)} characters long, over max_key_length={max_length}: "
            f"{key[:40]!r}...; hash long keys (e.g. hashlib.sha256) or raise max_key_length"
        )
    if not key.isprintable():
        raise InvalidKey(
            f"key {key[:60]!r} contains control or non-printable characters; "
            "encode it first (e.g. key.encode().hex())"
        )
    return key


class Limits:
    """A validated set of limits decided together, all-or-nothing.

    `checks(key, cost)` is the store checks of one request: ``(limit, key, cost)`` per
    limit, the key replaced by `GLOBAL_KEY` for ``scope="global"`` limits.
    """

    __slots__ = ("all", "max_key_length", "per_key", "single")

    def __init__(self, limits: Limit | Sequence[Limit], max_key_length: int = MAX_KEY_LENGTH,
                 *, where: str = "a limiter") -> None:
        lims = (limits,) if isinstance(limits, Limit) else tuple(limits)
        if not lims:
            raise InvalidLimit(f"{where} needs at least one Limit")
        for lim in lims:
            if not isinstance(lim, Limit):
                raise InvalidLimit(f"{where}: expected Limit objects, got {lim!r}")
        names = [lim.name for lim in lims]
        if len(set(names)) != len(names):
            raise InvalidLimit(f"the limits of {where} need distinct names, got {names}")
        if isinstance(max_key_length, bool) or not isinstance(max_key_length, int) \
                or max_key_length < 1:
            raise InvalidLimit(f"max_key_length must be a whole number >= 1, "
                               f"got {max_key_length!r}")
        self.all: tuple[Limit, ...] = lims
        self.per_key: tuple[Limit, ...] = tuple(lim for lim in lims if lim.scope == "key")
        #: The one per-key limit of a limiter that has nothing else (the bound hot path).
        self.single: Limit | None = lims[0] if len(lims) == 1 and lims[0].scope == "key" \
            else None
        self.max_key_length = max_key_length

    def __repr__(self) -> str:
        return f"Limits([{', '.join(lim.name for lim in self.all)}])"

    def key(self, key: object) -> str:
        return check_key(key, self.max_key_length)

    def checks(self, key: object, cost: object) -> list[Check]:
        k = check_key(key, self.max_key_length)
        return [(lim, k if lim.scope == "key" else GLOBAL_KEY,
                 lim.check_cost(cost))  # type: ignore[arg-type]
                for lim in self.all]


def merge_decisions(decisions: Sequence[Decision]) -> Decision:
    """One decision for a composite check: the most restrictive of the per-limit decisions.

    Among rejections, the one with the longest `retry_after` (``None``, never, is longest);
    when all admit, the one with the fewest `remaining` (the later `reset_after` on a tie),
    its `delay` raised to the longest delay of any limit. Ties go to the earlier limit.
    """
    if len(decisions) == 1:
        return decisions[0]
    # One pass, no key functions: this runs on every composite decision.
    worst: Decision | None = None
    worst_wait = -1.0
    best: Decision | None = None
    delay = 0.0
    for d in decisions:
        if not d.allowed:
            wait = math.inf if d.retry_after is None else d.retry_after
            if wait > worst_wait:
                worst, worst_wait = d, wait
        elif worst is None:
            if best is None or d.remaining < best.remaining or (
                    d.remaining == best.remaining and d.reset_after > best.reset_after):
                best = d
            if d.delay > delay:
                delay = d.delay
    if worst is not None:
        return worst
    assert best is not None
    return best if delay == best.delay else best._replace(delay=delay)


# -- the failure policy ----------------------------------------------------------------------


def share_of(lim: Limit, share: float) -> Limit:
    """`lim` scaled to a `share` of its rate and burst (a local fallback's part)."""
    if share == 1:
        return lim
    rate = Rate(lim.rate.amount * share, lim.rate.period)  # type: ignore[union-attr]
    burst = lim.burst
    if burst is not None:
        if lim.algorithm == "leaky-bucket":
            burst = float(math.floor(burst * share))  # nginx burst counts whole requests
        else:
            # A bucket smaller than one token would reject every unit request.
            burst = max(min(1.0, burst), burst * share)
    return Limit(lim.algorithm, rate, burst=burst, nodelay=lim.nodelay, delay=lim.delay,
                 name=lim.name, scope=lim.scope)


class Failure:
    """What a decision is when the store cannot make it, and the bookkeeping around that.

    - ``"open"``: admit (the default, as Envoy does);
    - ``"closed"``: reject, retry after `CLOSED_RETRY_AFTER` (login and security limits);
    - ``"local"``: decide on an in-process `MemoryStore` holding `share` of each limit
      (one process of N gets ``share=1/N``);
    - ``"raise"``: raise the `StoreError`.

    Every such decision has ``degraded=True``. The first failure after a success is logged
    (a warning), recovery once (info); `errors` counts failures and `on_error` sees each.
    """

    def __init__(self, policy: str = "open", share: float = 1.0, *,
                 on_error: Callable[[BaseException], None] | None = None,
                 max_keys: int = 100_000) -> None:
        if policy not in FAILURE_POLICIES:
            raise InvalidLimit(f"failure must be one of {FAILURE_POLICIES}, got {policy!r}")
        if isinstance(share, bool) or not isinstance(share, (int, float)) \
                or not (0 < share <= 1):
            raise InvalidLimit(f"fallback_share must be in (0, 1], got {share!r}")
        self.policy: FailurePolicy = policy
        self.share = float(share)
        self.on_error = on_error
        self.max_keys = max_keys
        self.errors = 0
        #: True from a failure until the next success (read by bound hot paths).
        self.failing = False
        self._fallback: MemoryStore | None = None
        self._shares: dict[int, tuple[Limit, Limit]] = {}

    def __repr__(self) -> str:
        share = f", share={self.share:g}" if self.policy == "local" else ""
        return f"Failure({self.policy!r}{share}, errors={self.errors})"

    def set_share(self, share: float) -> None:
        """Use `share` of each limit from now on (a service's reload may change it); the
        fallback store's counters stay."""
        if isinstance(share, bool) or not isinstance(share, (int, float)) \
                or not (0 < share <= 1):
            raise InvalidLimit(f"fallback_share must be in (0, 1], got {share!r}")
        if share != self.share:
            self.share = float(share)
            self._shares.clear()

    @property
    def fallback(self) -> MemoryStore:
        """The local fallback store (created on first use)."""
        if self._fallback is None:
            self._fallback = MemoryStore(max_keys=self.max_keys)
        return self._fallback

    def failed(self, exc: BaseException, policy: str | None = None) -> None:
        """Record a store failure; raises it again under the ``"raise"`` policy."""
        self.errors += 1
        if not self.failing:
            self.failing = True
            log.warning("rate limit store failed (%s: %s); failure policy %r decides until "
                        "it recovers", type(exc).__name__, exc, policy or self.policy,
                        extra={"event": "store_failed", "error": type(exc).__name__},
                        exc_info=not isinstance(exc, StoreError))
        if self.on_error is not None:
            try:
                self.on_error(exc)
            except Exception:  # a broken hook must not break rate limiting
                log.exception("on_error hook raised")
        if (policy or self.policy) == "raise":
            if isinstance(exc, StoreError):
                raise exc
            raise StoreError(f"rate limit store failed: {exc!r}") from exc

    def recovered(self) -> None:
        if self.failing:
            self.failing = False
            log.info("rate limit store recovered", extra={"event": "store_recovered"})

    def _share(self, lim: Limit) -> Limit:
        pair = self._shares.get(id(lim))
        if pair is None or pair[0] is not lim:
            if len(self._shares) > 10_000:
                self._shares.clear()
            pair = self._shares[id(lim)] = (lim, share_of(lim, self.share))
        return pair[1]

    def decisions(self, checks: Sequence[Check], now: float, exc: StoreError,
                  policy: str | None = None) -> Plan[tuple[list[Decision], Ticket | None]]:
        """Plan: the per-check decisions the policy makes after `exc`, and where it charged
        the request (a `Ticket` on the fallback store for ``"local"``, else None)."""
        policy = policy or self.policy
        self.failed(exc, policy)
        if policy == "local":
            local = [(self._share(lim), k, c) for lim, k, c in checks]
            store = self.fallback
            decisions, at = yield Op(store, "decide", (local, now, True))
            # Report the configured limits, not their local shares.
            out = [d._replace(limit=checks[i][0], degraded=True)
                   for i, d in enumerate(decisions)]
            admitted = all(d.allowed for d in out)
            return out, Ticket(store, local, at) if admitted else None
        if policy == "closed":
            return [Decision(False, 0, CLOSED_RETRY_AFTER, CLOSED_RETRY_AFTER, 0.0, lim, True)
                    for lim, _, _ in checks], None
        return [Decision(True, lim.quota, 0.0, 0.0, 0.0, lim, True) for lim, _, _ in checks], None


# -- decisions and reservations --------------------------------------------------------------


class Ticket(NamedTuple):
    """Where an admitted request was charged: the store, the checks, the store's time."""

    store: Any
    checks: list[Check]
    at: float


def decide(store: Any, checks: list[Check], now: float, failure: Failure, *,
           consume: bool = True, policy: str | None = None
           ) -> Plan[tuple[list[Decision], Ticket | None]]:
    """Plan: decide `checks` all-or-nothing on `store` (the failure policy answers if it
    fails). Returns the per-check decisions and, when admitted and charged, the `Ticket`
    a refund needs."""
    try:
        decisions, at = yield Op(store, "decide", (checks, now, consume))
    except StoreError as e:
        out = yield from failure.decisions(checks, now, e, policy)
        return out
    return decisions, charged(store, checks, decisions, at, failure=failure, consume=consume)


def charged(store: Any, checks: list[Check], decisions: list[Decision], at: float, *,
            failure: Failure, consume: bool = True) -> Ticket | None:
    """After `store` answered `checks` (at its time `at`): the store is back if it was
    failing, and the `Ticket` of a charged, admitted request (None: nothing to refund)."""
    if failure.failing:
        failure.recovered()
    if not consume:
        return None
    for d in decisions:
        if not d.allowed:
            return None
    # As Ticket(store, checks, at), without a NamedTuple's generated __new__ (interpreted).
    return tuple.__new__(Ticket, (store, checks, at))


def hit(store: Any, checks: list[Check], now: float, failure: Failure, *,
        consume: bool = True, policy: str | None = None) -> Plan[Decision]:
    """Plan: the merged decision on `checks`, charged when `consume` (a charge that needs no
    refund; ``consume=False`` is a peek). One charged check goes to the store's one-limit
    call (``decide_one``, its fastest); anything else to `decide`, all-or-nothing. `policy`
    overrides `failure`'s policy for this call."""
    try:
        if consume and len(checks) == 1:
            d: Decision = yield Op(store, "decide_one", (*checks[0], now))
        else:
            decisions, _ = yield Op(store, "decide", (checks, now, consume))
            d = merge_decisions(decisions)
    except StoreError as e:
        degraded, _ = yield from failure.decisions(checks, now, e, policy)
        return merge_decisions(degraded)
    if failure.failing:
        failure.recovered()
    return d


def refund(ticket: Ticket, now: float) -> Plan[None]:
    """Plan: give back what `ticket` charged."""
    yield Op(ticket.store, "refund", (ticket.checks, now, ticket.at))


class Waits:
    """The arithmetic of waiting for admission (``acquire``, the ``wait=True`` decorator)."""

    __slots__ = ("clock",)

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock

    def deadline(self, timeout: float | None) -> float | None:
        if timeout is None:
            return None
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                or not (timeout >= 0):
            raise ValueError(f"timeout must be >= 0 seconds or None, got {timeout!r}")
        return self.clock() + timeout

    def retry_wait(self, d: Decision, deadline: float | None) -> float:
        """Seconds to sleep before trying again, or raise when waiting cannot help."""
        if d.retry_after is None:
            raise RateLimitExceeded(d, f"cost can never be admitted by {d.limit!r}: {d!r}")
        wait = max(d.retry_after, 1e-6)
        if deadline is not None and self.clock() + wait > deadline:
            raise RateLimitExceeded(d, f"would have to wait {wait:.3f}s, past the timeout: {d!r}")
        return wait

    def delay_fits(self, d: Decision, deadline: float | None) -> bool:
        return deadline is None or self.clock() + d.delay <= deadline


def hit_hooks(limits: Limits, clock: Callable[[], float], failure: Failure,
              slow: Callable[[str, float], Decision]) -> HitHooks:
    """What a store's bound hot path (`Store.bind_hit`) needs from the core."""
    max_len = limits.max_key_length

    def failed(exc: StoreError, key: str, cost: float) -> Decision:
        checks = limits.checks(key, cost)
        decisions, _ = run(failure.decisions(checks, clock(), exc))
        return merge_decisions(decisions)

    def key_check(key: str) -> object:
        return check_key(key, max_len)

    return HitHooks(clock, key_check, max_len, failure, failed, slow)
