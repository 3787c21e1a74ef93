"""Hooks the policies files of these tests import (``hook = "tests.policy.hooks:..."``)."""

from __future__ import annotations

from ratekeeper.policy._request import RequestInfo

#: user -> plan, as a database would hold it; `calls` records every lookup.
PLANS: dict[str, str] = {}
calls: list[str] = []


def plan_of(request: RequestInfo) -> str | None:
    user = request.headers.get("x-user")
    if user is None:
        return None
    calls.append(user)
    return PLANS.get(user)


def broken(request: RequestInfo) -> str | None:
    raise RuntimeError("the plans database is down")


#: customer -> their contract's limits, as a database would hold them.
CONTRACTS: dict[str, object] = {}
contract_calls: list[str] = []


def contract_limits(request: RequestInfo) -> object:
    user = request.headers.get("x-user", "")
    contract_calls.append(user)
    return CONTRACTS.get(user)


def broken_limits(request: RequestInfo) -> object:
    raise RuntimeError("the contracts database is down")
