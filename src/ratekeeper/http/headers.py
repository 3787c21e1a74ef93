"""Response header fields and problem bodies for a `Decision`: pure functions, no I/O.

Nothing here imports a web framework, so any server (the ASGI and WSGI middleware, the
decision service, your own code) can build the same fields from the same decision.

Formats (draft-ietf-httpapi-ratelimit-headers, structured-field form; RFC 9651 strings)::

    RateLimit-Policy: "api";q=100;w=60      q = Limit.quota, w = ceil(Limit.window) seconds
    RateLimit: "api";r=42;t=17              r = Decision.remaining, t = ceil(reset_after) s

and, on a rejection, ``Retry-After: <ceil(retry_after)>`` (RFC 9110 delay-seconds) and
``Cache-Control: no-store``, with an RFC 9457 ``application/problem+json`` body.

Rounding is always *up*: a client that waits the advertised whole seconds is never early.

When a decision says the request can *never* be admitted (``retry_after is None``: its cost
exceeds the limit's capacity), there is no honest Retry-After value: any number would invite
a retry that is certain to fail. `retry_after_seconds` returns ``None``, `rejection_headers`
then omits Retry-After (RFC 9110 makes it optional) and `problem_body` says so in its
``detail`` and ``retry_after: null``. Callers who want a different status for this case
(e.g. 413) can test ``decision.retry_after is None`` themselves.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping

from .._types import Decision, Limit

__all__ = [
    "PROBLEM_CONTENT_TYPE",
    "PROBLEM_TYPE",
    "problem_body",
    "ratelimit_headers",
    "rejection_headers",
    "retry_after_seconds",
    "sf_string",
]

#: The media type of `problem_body` (RFC 9457).
PROBLEM_CONTENT_TYPE = "application/problem+json"
#: The problem ``type`` URI; "about:blank" means "see the status code" (RFC 9457, 4.2.1).
PROBLEM_TYPE = "about:blank"

Headers = list[tuple[str, str]]


def _ceil_seconds(seconds: float) -> int:
    """Whole seconds, rounded up; 0 for zero, negative or NaN; huge values are capped."""
    if not seconds > 0:  # also NaN
        return 0
    if seconds >= 1e15 or math.isinf(seconds):
        return 10**15  # sf-integer allows 15 digits
    return math.ceil(seconds)


def retry_after_seconds(decision: Decision) -> int | None:
    """Whole seconds a client should wait before retrying, rounded up; None for never.

    - allowed decisions: 0 (nothing to wait for);
    - rejected: ``ceil(retry_after)``, at least 1, so a client that waits this long is never
      earlier than the limiter allows (a rejected client asking again "now" is pointless);
    - ``retry_after is None`` (the cost can never be admitted): ``None``.
    """
    ra = decision.retry_after
    if ra is None:
        return None
    if decision.allowed:
        return 0
    return max(1, _ceil_seconds(ra))


def sf_string(value: str) -> str:
    """`value` as an RFC 9651 sf-string: quoted, with ``"`` and ``\\`` escaped.

    sf-strings hold printable ASCII only; any other character (limit names may be Unicode)
    is replaced by ``%XX`` percent-encoding of its UTF-8 bytes, and ``%`` itself by ``%25``,
    so the mapping is reversible with `urllib.parse.unquote`.
    """
    known = _SF.get(value)
    if known is not None:
        return known
    out = []
    for ch in value:
        if ch == "%" or not (" " <= ch <= "~"):
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass")))
        elif ch in '"\\':
            out.append("\\" + ch)
        else:
            out.append(ch)
    quoted = '"' + "".join(out) + '"'
    if len(value) <= _MAX_CACHED_NAME:
        if len(_SF) >= _CACHE_SIZE:
            _SF.clear()  # many distinct names (reloads, tests): stay bounded
        _SF[value] = quoted
    return quoted


#: Limit names are few and every response quotes them: quoted once (bounded, see sf_string).
_SF: dict[str, str] = {}
#: Limit -> its RateLimit-Policy item: constant for a Limit, which is immutable; keyed by
#: id and holding the Limit, so an id is never mistaken for a later object's.
_ITEMS: dict[int, tuple[Limit, str]] = {}
_CACHE_SIZE = 1024
_MAX_CACHED_NAME = 256


def _policy_item(limit: Limit) -> str:
    known = _ITEMS.get(id(limit))
    if known is not None and known[0] is limit:
        return known[1]
    item = f"{sf_string(limit.name)};q={limit.quota};w={_ceil_seconds(limit.window)}"
    if len(_ITEMS) >= _CACHE_SIZE:
        _ITEMS.clear()
    _ITEMS[id(limit)] = (limit, item)
    return item


def ratelimit_headers(
    decision: Decision,
    *,
    legacy: bool = False,
    policies: Iterable[Limit] | None = None,
) -> Headers:
    """The ``RateLimit-Policy`` and ``RateLimit`` fields for `decision` (empty without a limit).

    `RateLimit-Policy` lists `policies` when given (e.g. every limit of a composite check,
    so a client learns all of them) and otherwise the decision's own limit; the decision's
    limit is always included. `RateLimit` reports the decision's limit only: in a composite
    check that is the most restrictive one (the draft asks for the lowest remaining).

    With ``legacy=True`` the de-facto ``X-RateLimit-Limit`` (q), ``X-RateLimit-Remaining`` (r)
    and ``X-RateLimit-Reset`` (t: delta seconds, not an epoch timestamp) follow.
    """
    lim = decision.limit
    if lim is None:
        return []
    if not policies or (isinstance(policies, (tuple, list)) and len(policies) == 1
                        and policies[0] is lim):
        policy = _policy_item(lim)  # the common case: one limit, one cached item
    else:
        items: list[str] = []
        seen: set[str] = set()
        for p in (*policies, lim):
            if p.name not in seen:
                seen.add(p.name)
                items.append(_policy_item(p))
        policy = ", ".join(items)
    remaining = max(0, int(decision.remaining))
    reset = _ceil_seconds(decision.reset_after)
    if not decision.allowed:
        # Never advertise a reset earlier than Retry-After (the draft asks that both name
        # the same instant when both are sent).
        reset = max(reset, retry_after_seconds(decision) or 0)
    out: Headers = [
        ("RateLimit-Policy", policy),
        ("RateLimit", f"{sf_string(lim.name)};r={remaining};t={reset}"),
    ]
    if legacy:
        out += [
            ("X-RateLimit-Limit", str(lim.quota)),
            ("X-RateLimit-Remaining", str(remaining)),
            ("X-RateLimit-Reset", str(reset)),
        ]
    return out


def rejection_headers(
    decision: Decision,
    *,
    legacy: bool = False,
    policies: Iterable[Limit] | None = None,
    content_type: bool = True,
) -> Headers:
    """Every field of a rejected response: the RateLimit fields, ``Retry-After`` (whole
    seconds, rounded up; omitted when the request can never be admitted),
    ``Cache-Control: no-store`` and, with `content_type`, ``Content-Type`` for
    `problem_body`."""
    out = ratelimit_headers(decision, legacy=legacy, policies=policies)
    secs = retry_after_seconds(decision)
    if secs is not None:
        out.append(("Retry-After", str(secs)))
    out.append(("Cache-Control", "no-store"))
    if content_type:
        out.append(("Content-Type", PROBLEM_CONTENT_TYPE))
    return out


def problem_body(
    decision: Decision,
    *,
    status: int = 429,
    title: str = "Too Many Requests",
    type_: str = PROBLEM_TYPE,
    instance: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> bytes:
    """A small RFC 9457 ``application/problem+json`` body naming the violated policy.

    Members: ``type``, ``title``, ``status``, ``detail`` and, as extensions, ``policy``
    (the limit's name), ``retry_after`` (whole seconds or null for never), plus `extra`.
    `instance` (e.g. the request path) is included when given.
    """
    lim = decision.limit
    name = lim.name if lim is not None else None
    secs = retry_after_seconds(decision)
    detail = "Rate limit exceeded." if name is None else f"Rate limit {name!r} exceeded."
    if secs is None:
        detail += " This request costs more than the limit's capacity and can never be admitted."
    elif secs:
        detail += f" Retry after {secs} second{'s' if secs != 1 else ''}."
    body: dict[str, object] = {
        "type": type_,
        "title": title,
        "status": status,
        "detail": detail,
    }
    if instance is not None:
        body["instance"] = instance
    body["policy"] = name
    body["retry_after"] = secs
    if extra:
        body.update(extra)
    return json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode("ascii")
