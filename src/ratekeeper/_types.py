"""The value types every layer shares: `Limit` (what is allowed) and `Decision` (what happened).

Both are immutable. `Limit` validates its parameters when it is built, so an invalid limit
never reaches a store. `Decision` is built on the hot path of every check, so it is a
`NamedTuple` (no `__dict__`, built with one `tuple.__new__`): about six times cheaper to create
than a frozen dataclass, which matters when a decision costs well under a microsecond.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from ._errors import InvalidCost, InvalidLimit
from ._rates import Rate, parse_rate

__all__ = ["ALGORITHMS", "GLOBAL_KEY", "MAX_AMOUNT", "RULES", "Decision", "Limit", "LimitRules",
           "check_cost", "check_number", "register"]

#: The key under which a ``scope="global"`` limit keeps its one counter, in every store and
#: through every driver (the library, the middleware, the service, ``ratekeeper inspect``).
GLOBAL_KEY = "*global*"

#: ``params(algorithm, rate, burst, nodelay, delay) -> (burst, capacity, window)``: see
#: `LimitRules.params`.
Params = Callable[[str, Rate, float | None, bool, int], tuple[float | None, float, float]]


class LimitRules(NamedTuple):
    """What one algorithm accepts in a `Limit`, declared by its own module.

    The values cannot import the algorithms (they sit below them), so each algorithm's
    record carries its rules and ``ratekeeper.algorithms`` registers them here, in the
    registry's order, when the package is imported; `Limit` only looks them up.
    """

    #: What the algorithm follows, in one line (``ratekeeper.ALGORITHMS[name]``).
    description: str
    #: ``params(algorithm, rate, burst, nodelay, delay) -> (burst, capacity, window)``: the
    #: limit's effective burst (None if the algorithm has none), its capacity in cost units
    #: and the seconds an empty state takes to recover fully, from the parsed rate and the
    #: arguments as given (unchecked). Raises `InvalidLimit`, naming the bad argument.
    params: Params
    #: Costs must be whole numbers (the algorithm counts requests, not units).
    whole_costs: bool = False


#: Every algorithm a `Limit` accepts: name -> its rules, in the registry's order. Filled by
#: `register` (``ratekeeper.algorithms`` registers every algorithm on import).
RULES: dict[str, LimitRules] = {}

#: Every algorithm name a `Limit` accepts, with the reference it follows (kept by `register`).
ALGORITHMS: dict[str, str] = {}

_MAX_NAME = 200

#: The largest amount, burst, capacity, delay or cost a limit takes: 2**63 - 1, the largest
#: integer Redis (a 64-bit counter) holds. Above it no store could count the quota, and
#: headers would carry numbers of hundreds of digits (``burst = 1e308``); at most 19 here.
MAX_AMOUNT = 2**63 - 1


def register(name: str, rules: LimitRules) -> None:
    """Make `name` an algorithm `Limit` accepts, validated by `rules`.

    Called by the algorithm registry (``ratekeeper/algorithms/__init__.py``) for each
    algorithm, in order; registering one name twice with different rules is a bug.
    """
    if RULES.get(name, rules) is not rules:
        raise ValueError(f"algorithm {name!r} is already registered with other rules")
    RULES[name] = rules
    ALGORITHMS[name] = rules.description


def check_number(what: str, v: object, *, allow_zero: bool = False) -> float:
    """`v` as a finite float above 0 (or >= 0), else `InvalidLimit` naming `what`."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InvalidLimit(f"{what} must be a number, got {v!r}")
    try:
        f = float(v)
    except OverflowError:
        raise InvalidLimit(f"{what} is too large to be a number: {v!r:.40}...") from None
    if math.isnan(f) or math.isinf(f):
        raise InvalidLimit(f"{what} must be a finite number, got {v!r}")
    if f < 0 or (f == 0 and not allow_zero):
        raise InvalidLimit(f"{what} must be {'>= 0' if allow_zero else '> 0'}, got {v!r}")
    return f


@dataclass(frozen=True, slots=True)
class Limit:
    """One limit: an algorithm, a rate and its options. Validated at construction.

    - ``Limit("token-bucket", "10/s", burst=20)``: a bucket of 20 tokens refilled at 10 per
      second (Go's ``rate.NewLimiter(10, 20)``). `burst` defaults to the rate's amount.
    - ``Limit("gcra", "10/s", burst=20)``: the same decisions, one float of state per key.
    - ``Limit("leaky-bucket", "10r/s", burst=20, nodelay=True)``: nginx
      ``limit_req zone=... burst=20 nodelay``; `burst` (default 0) is how many requests may
      queue beyond the one being served; without `nodelay`, queued requests are admitted with a
      `Decision.delay`; ``delay=D`` lets the first D excess requests through at once.
    - ``Limit("fixed-window", "100/minute")``, ``"sliding-window-log"``,
      ``"sliding-window-counter"``: at most N (the rate's amount) per period P.

    `name` identifies the limit's state in a store (two limits with the same name share
    state) and is what HTTP headers and metrics call the policy; it defaults to a name built
    from the parameters. ``scope="global"`` makes one counter shared by every key (a global
    limit beside per-key ones in a composite check).
    """

    algorithm: str
    rate: Rate | str
    burst: float | None = None
    nodelay: bool = False
    delay: int = 0
    name: str = ""
    scope: Literal["key", "global"] = "key"

    # Derived once here so the hot path only reads attributes.
    per_second: float = field(init=False, repr=False, compare=False)
    interval: float = field(init=False, repr=False, compare=False)
    capacity: float = field(init=False, repr=False, compare=False)
    period: float = field(init=False, repr=False, compare=False)
    window: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        rules = RULES.get(self.algorithm)
        if rules is None:
            if not RULES:  # never silently accept parameters nothing has checked
                raise RuntimeError(
                    "no algorithm is registered yet: a Limit was built while ratekeeper was "
                    "still being imported; import ratekeeper first (ratekeeper.algorithms "
                    "registers every algorithm)"
                )
            raise InvalidLimit(
                f"unknown algorithm {self.algorithm!r}; choose one of: {', '.join(RULES)}"
            )
        rate = parse_rate(self.rate)  # InvalidRate, itself an InvalidLimit
        set_(self, "rate", rate)
        if self.scope not in ("key", "global"):
            raise InvalidLimit(f"scope must be 'key' or 'global', got {self.scope!r}")
        burst, capacity, window = rules.params(
            self.algorithm, rate, self.burst, self.nodelay, self.delay)
        for what, v in (("the rate's amount", rate.amount), ("burst", burst),
                        ("capacity", capacity), ("delay", self.delay)):
            if v is not None and not v <= MAX_AMOUNT:  # (`not <=`: NaN too)
                raise InvalidLimit(
                    f"{what} must be at most {MAX_AMOUNT} (2**63 - 1, the largest integer a "
                    f"store counts), got {v!r:.40}")
        set_(self, "burst", None if burst is None else float(burst))
        set_(self, "per_second", rate.per_second)
        set_(self, "interval", 1.0 / rate.per_second)
        set_(self, "capacity", float(capacity))
        set_(self, "period", float(rate.period))
        set_(self, "window", float(window))
        if not isinstance(self.name, str):
            raise InvalidLimit(f"name must be a string, got {self.name!r}")
        if not self.name:
            set_(self, "name", self.default_name())
        if len(self.name) > _MAX_NAME or any(c in self.name for c in "{}\n\r\0 "):
            raise InvalidLimit(
                f"limit name {self.name[:60]!r} must be at most {_MAX_NAME} characters with no "
                "spaces, braces or control characters"
            )

    def default_name(self) -> str:
        """A name built from the parameters, e.g. ``gcra-10/s-b20``."""
        parts = [self.algorithm, str(self.rate)]
        if self.burst is not None:
            parts.append(f"b{self.burst:g}")
        if self.nodelay:
            parts.append("nodelay")
        if self.delay:
            parts.append(f"d{self.delay}")
        if self.scope == "global":
            parts.append("global")
        return "-".join(parts)

    @property
    def quota(self) -> int:
        """The whole-request quota a client sees (`q` of the RateLimit-Policy header)."""
        return math.floor(self.capacity)

    def check_cost(self, cost: float) -> float:
        """Validate a request cost for this limit; returns it as a float."""
        c = check_cost(cost)
        if not c.is_integer() and RULES[self.algorithm].whole_costs:
            raise InvalidCost(
                f"{self.algorithm} counts whole requests; cost must be a whole number, got {cost!r}"
            )
        return c


def check_cost(cost: object) -> float:
    """A cost must be a number above 0 and at most `MAX_AMOUNT` (fractions allowed except
    where noted)."""
    if isinstance(cost, bool) or not isinstance(cost, (int, float)):
        raise InvalidCost(f"cost must be a number, got {cost!r}")
    try:
        c = float(cost)
    except OverflowError:
        raise InvalidCost(f"cost is too large to be a number: {cost!r:.40}...") from None
    if not (c > 0 and c <= MAX_AMOUNT):  # also rejects NaN and infinities
        if c > MAX_AMOUNT and c < math.inf:
            raise InvalidCost(f"cost must be at most {MAX_AMOUNT} (2**63 - 1, the largest "
                              f"integer a store counts), got {cost!r}")
        raise InvalidCost(f"cost must be a finite number above 0, got {cost!r}")
    return c


class Decision(NamedTuple):
    """The result of one check, with everything an HTTP layer needs.

    - `allowed`: the request may go ahead (after `delay` seconds).
    - `remaining`: whole units of quota left after this decision.
    - `retry_after`: seconds until the same request could be admitted if nothing else arrived;
      ``0.0`` when allowed; ``None`` when the cost exceeds the limit's capacity (never).
    - `reset_after`: seconds until the quota is full again.
    - `delay`: seconds an admitted request should wait before it proceeds (leaky bucket
      queueing, as nginx does); ``0.0`` otherwise.
    - `limit`: the limit that decided (in a composite check, the most restrictive one).
    - `degraded`: the store was unavailable and a failure policy made this decision.

    ``bool(decision)`` is `allowed`.
    """

    allowed: bool
    remaining: int
    retry_after: float | None
    reset_after: float
    delay: float
    limit: Limit | None = None
    degraded: bool = False

    def __bool__(self) -> bool:
        return self.allowed

    def __repr__(self) -> str:
        name = self.limit.name if self.limit is not None else None
        verdict = "allowed" if self.allowed else "rejected"
        parts = [verdict, f"remaining={self.remaining}"]
        if not self.allowed:
            parts.append(f"retry_after={self.retry_after!r}")
        if self.delay:
            parts.append(f"delay={self.delay:g}")
        parts.append(f"reset_after={self.reset_after:g}")
        if name:
            parts.append(f"limit={name!r}")
        if self.degraded:
            parts.append("degraded")
        return f"Decision({', '.join(parts)})"
