"""A request's whole decision under a policies snapshot: `decide_request`, one plan.

The middleware, ``ratekeeper serve``'s ``POST /v1/http`` and replay run this plan (with
`core.run` or `core.arun`): map the request with the snapshot's ``[http]`` part
(`HTTPRules.map`), decide its descriptors with the `Engine`, turn the decision into a
verdict (``max_delay``, dry run) and refund a reservation queued for too long.
"""

from __future__ import annotations

import logging
from typing import Literal, NamedTuple

from .. import core
from .._errors import StoreError
from .._types import Decision, Limit
from ._engine import CheckResult, Engine
from ._http import Extra, HTTPCheck
from ._model import Policies
from ._request import RequestInfo

__all__ = ["HTTPDecision", "Verdict", "decide_mapped", "decide_request", "verdict_of"]

log = logging.getLogger("ratekeeper.policy")


#: What happened to one request: admitted (now, or after a queueing ``delay``), rejected,
#: or, in dry run, what would have happened.
Verdict = Literal["allowed", "delayed", "rejected", "shadow-rejected", "shadow-delayed"]


def verdict_of(d: Decision, *, dry_run: bool, max_delay: float | None
               ) -> tuple[Decision, Verdict, bool]:
    """A request's decision as a verdict: ``(decision, verdict, refund)``.

    A queued request that would wait longer than `max_delay` is rejected instead (its
    retry is when the queue has drained enough), and `refund` says its charge must be given
    back. Dry run turns a reject or a delay into a pass but keeps the decision.
    """
    refund = False
    if d.allowed and max_delay is not None and d.delay > max_delay:
        d = d._replace(allowed=False, retry_after=d.delay - max_delay, delay=0.0)
        refund = not dry_run
    if d.allowed:
        if d.delay > 0:
            return d, "shadow-delayed" if dry_run else "delayed", False
        return d, "allowed", False
    return d, "shadow-rejected" if dry_run else "rejected", refund


class HTTPDecision(NamedTuple):
    """One request decided: its `check`, the (possibly max_delay-rejected) `decision`, the
    `verdict`, the `limits` consulted (for ``RateLimit-Policy``) and the store `failure`
    policy that answered if the store failed. `result` is the engine's per-descriptor
    `CheckResult` when the request needed one (shadow mode, a rule's own failure policy,
    ...), else None. A driver sleeps ``decision.delay`` for a ``"delayed"`` verdict; the plan
    has already refunded a reservation rejected for waiting too long."""

    check: HTTPCheck
    decision: Decision
    verdict: Verdict
    limits: tuple[Limit, ...]
    failure: str
    result: CheckResult | None = None


def decide_request(engine: Engine, snap: Policies, req: RequestInfo, now: float,
                   extras: tuple[Extra, ...] = ()) -> core.Plan[HTTPDecision | None]:
    """Plan: `req` under the snapshot `snap` (its ``[http]`` part and domain rules): None
    when not limited (not covered, exempt, or no descriptor met a limit), else its
    `HTTPDecision`. The middleware, the service's ``/v1/http`` and replay all run this.

    A request whose rules are all plain (`Engine.simple_checks`) is one `core.hit` (one
    ``decide_one`` for a single limit), or one `core.decide` when a queued request may need
    its refund; any other goes through `Engine.plan`. Both give the same decision."""
    rules = snap.http
    if rules is None:
        return None
    check = rules.map(req, now, extras)
    if check is None:
        return None
    return (yield from decide_mapped(engine, snap, check, now))


def decide_mapped(engine: Engine, snap: Policies, check: HTTPCheck, now: float
                  ) -> core.Plan[HTTPDecision | None]:
    """Plan: the rest of `decide_request` once the request is mapped: `check` (what
    ``snap.http.map`` gave for it) decided by the engine. Replay calls it with a mapping it
    remembered for an identical request (same method, path, host, peer and read headers);
    everything else decides through `decide_request`, which ends here."""
    simple = engine.simple_checks(snap, check.domain, check.descriptors, check.cost)
    result: CheckResult | None = None
    ticket: core.Ticket | None = None
    if simple is not None:
        checks, limits = simple
        if not checks:  # every descriptor unmatched or unlimited
            return None
        policy = snap.settings.failure
        failure: str = policy
        queues = check.max_delay is not None and not check.dry_run and any(
            lim.algorithm == "leaky-bucket" and not lim.nodelay for lim in limits)
        if queues:  # a delay past max_delay gives the charge back: keep its ticket
            decisions, ticket = yield from core.decide(engine.store, checks, now,
                                                       engine.failure, policy=policy)
            d = core.merge_decisions(decisions)
        else:
            d = yield from core.hit(engine.store, checks, now, engine.failure, policy=policy)
    else:
        result = yield from engine.plan(snap, check.domain, check.descriptors, check.cost,
                                        from_app=True)
        if result.decision is None:  # every descriptor unmatched or unlimited
            return None
        d, limits, failure, ticket = (result.decision, result.policies, result.failure,
                                      result.ticket)
    if d.allowed and d.delay == 0.0:  # the common case, as verdict_of decides it
        return HTTPDecision(check, d, "allowed", limits, failure, result)
    d, verdict, refund = verdict_of(d, dry_run=check.dry_run, max_delay=check.max_delay)
    if refund and ticket is not None:
        try:
            yield from core.refund(ticket, now)
        except StoreError as e:  # the charge stays and expires as usual
            log.warning("could not refund a rejected reservation: %s", e)
    return HTTPDecision(check, d, verdict, limits, failure, result)
