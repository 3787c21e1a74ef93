"""The JSON form of a `Decision`: one definition, printed by ``simulate`` and answered by the
decision service. A value-level module: it imports nothing of ratekeeper but the values."""

from __future__ import annotations

from typing import Any

from ._types import Decision

__all__ = ["decision_json", "json_number"]


def json_number(x: float | None) -> float | int | None:
    """`x` rounded to 9 decimals (nanoseconds), None as it is."""
    if x is None:
        return None
    return round(x, 9)


def decision_json(d: Decision) -> dict[str, Any]:
    """The JSON form of a decision (as `simulate` and the decision service print it)."""
    return {
        "allowed": d.allowed,
        "remaining": d.remaining,
        "retry_after": 0 if d.allowed else json_number(d.retry_after),
        "reset_after": json_number(d.reset_after),
        "delay": json_number(d.delay),  # 0.0 on a rejection, as the Decision says
        "limit": d.limit.name if d.limit is not None else None,
    }
