"""Envoy's rate limit service protocol: ``envoy.service.ratelimit.v3.RateLimitService``.

`RateLimitServicer.ShouldRateLimit` answers the call an Envoy ``envoy.filters.http.ratelimit``
(or network / thrift ratelimit) filter makes, with the messages generated from Envoy's own
rls.proto (``ratekeeper.service.proto``; see scripts/gen_protos.sh), so Envoy uses
ratekeeper unchanged:

- request ``domain``, ``descriptors`` (entries, optional ``limit`` override, optional
  per-descriptor ``hits_addend``) and ``hits_addend``, read as envoyproxy/ratelimit's
  ``GetHitsAddends``: a descriptor's ``hits_addend`` that is set is used as it is, 0
  included (check, charge nothing); unset, the request's, where 0 (the default) means 1;
- response ``overall_code``, one ``DescriptorStatus`` per descriptor in request order
  (``code``, ``current_limit`` {requests_per_unit, unit, name}, ``limit_remaining``,
  ``duration_until_reset``), and ``response_headers_to_add``: the ``RateLimit-Policy`` /
  ``RateLimit`` fields (plus ``Retry-After`` on OVER_LIMIT) that Envoy adds to the response,
  or envoyproxy/ratelimit's three headers by name (`LimitHeaders`); when the store failed
  and the failure policy decided, ``X-RateLimit-Degraded: <policy>`` too.

Mirroring envoyproxy/ratelimit: an empty domain or an empty descriptor list is
``INVALID_ARGUMENT``; an unknown domain, a descriptor with no entries or one matching no rule
is OK without ``current_limit`` (``[service] unknown_domain = "error"`` refuses an unknown
domain instead); an unlimited one is OK with ``limit_remaining`` = 2^32-1; an OVER_LIMIT
status has ``limit_remaining`` 0; ``current_limit`` is the configured rate in its unit
(``60/minute`` is 60 per MINUTE) and names the limit only when the policies name it;
``duration_until_reset`` is whole seconds, rounded up (the Go service's ``unit - now % unit``
on whole seconds); global shadow mode answers OK overall and keeps each descriptor's code.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc  # type: ignore[import-untyped]

from .._memo import Memo
from .._rates import parse_rate
from .._types import Limit
from ..http.headers import _ceil_seconds
from ..policy._engine import (
    UNIT_SECONDS,
    CheckResult,
    DescriptorRequest,
    DescriptorStatus,
    InvalidRequest,
    Override,
    UnknownDomain,
    make_descriptor,
)
from ..policy._rules import Rule
from ._service import (
    DEFAULT_MAX_BODY,
    STORE_FAILED,
    Remembered,
    Service,
    StoreFailed,
    result_headers,
)
from .proto.envoy.service.ratelimit.v3 import rls_pb2
from .proto.envoy.type.v3 import ratelimit_unit_pb2

__all__ = [
    "METHOD",
    "SERVICE",
    "Answers",
    "LimitHeaders",
    "RateLimitServicer",
    "parse_request",
    "response_bytes",
    "response_for",
    "response_of",
    "response_parts",
    "start_grpc_server",
]

log = logging.getLogger("ratekeeper.service")

#: ``envoy.service.ratelimit.v3.RateLimitService``, from the generated descriptor.
SERVICE: str = rls_pb2.DESCRIPTOR.services_by_name["RateLimitService"].full_name
#: The full method path Envoy calls.
METHOD = f"/{SERVICE}/ShouldRateLimit"
UINT32_MAX = 2**32 - 1
#: Added to an answer the failure policy decided (the store failed), naming that policy: the
#: middleware's default `degraded_header`, so a client sees one field whichever decided.
DEGRADED_HEADER = "X-RateLimit-Degraded"

_OK = rls_pb2.RateLimitResponse.OK
_OVER_LIMIT = rls_pb2.RateLimitResponse.OVER_LIMIT
_RL = rls_pb2.RateLimitResponse.RateLimit
#: A configured period that is exactly one of Envoy's units is answered in that unit.
_EXACT_UNITS: dict[float, int] = {
    float(UNIT_SECONDS[name]): _RL.Unit.Value(name.upper()) for name in UNIT_SECONDS}
#: Seconds per response unit, smallest first, for other periods (WEEK is left out there:
#: Envoys before 1.28 do not know it, and no 3/2s-like rate needs it).
_UNITS: tuple[tuple[int, int], ...] = (
    (1, _RL.SECOND), (60, _RL.MINUTE), (3600, _RL.HOUR), (86400, _RL.DAY),
    (30 * 86400, _RL.MONTH), (365 * 86400, _RL.YEAR),
)


def parse_request(req: rls_pb2.RateLimitRequest) -> tuple[str, list[DescriptorRequest], float]:
    """Validate a RateLimitRequest: ``(domain, descriptors, hits)`` or `InvalidRequest`."""
    if not req.domain:
        raise InvalidRequest("rate limit domain must not be empty")
    if not req.descriptors:
        raise InvalidRequest("rate limit descriptor list must not be empty")
    hits = float(req.hits_addend or 1)
    out: list[DescriptorRequest] = []
    for i, d in enumerate(req.descriptors):
        where = f"descriptors[{i}]"
        if d.is_negative_hits:
            raise InvalidRequest(f"{where}: is_negative_hits (giving hits back) is not supported")
        h: int | None = d.hits_addend.value if d.HasField("hits_addend") else None
        override = None
        if d.HasField("limit"):
            unit = ratelimit_unit_pb2.RateLimitUnit.Name(d.limit.unit).lower() \
                if d.limit.unit in ratelimit_unit_pb2.RateLimitUnit.values() else "?"
            if unit not in UNIT_SECONDS:
                raise InvalidRequest(f"{where}.limit.unit {d.limit.unit} is not a known unit")
            override = Override(d.limit.requests_per_unit, unit)
        entries = [(e.key, e.value) for e in d.entries]
        out.append(make_descriptor(entries, hits=h, override=override, where=where))
    return req.domain, out, hits


def _parse_bytes(data: bytes) -> tuple[str, tuple[DescriptorRequest, ...], float]:
    """A serialized RateLimitRequest -> `parse_request`'s answer (descriptors as a tuple), or
    `InvalidRequest` for bytes that are not one (the servicer is given the bytes: grpc
    answers UNKNOWN when a deserializer raises, this answers INVALID_ARGUMENT and why)."""
    try:
        req: rls_pb2.RateLimitRequest = rls_pb2.RateLimitRequest.FromString(data)
    except Exception as e:
        raise InvalidRequest(f"not a RateLimitRequest: {str(e) or type(e).__name__}"
                             ) from None
    domain, descriptors, hits = parse_request(req)
    return domain, tuple(descriptors), hits


#: `_parse_bytes`, remembered per message (Envoy sends a client's same descriptors again);
#: a bad message is refused each time it comes.
parse_cached: Remembered[bytes, tuple[str, tuple[DescriptorRequest, ...], float]] = \
    Remembered(_parse_bytes, size=10_000, max_len=512)


#: `_rate_unit` per limit, by id; each entry holds its limit, so the id stays its own.
_RATE_UNITS: dict[int, tuple[Limit, tuple[int, int]]] = {}


def _rate_unit(lim: Limit) -> tuple[int, int]:
    """`_compute_rate_unit(lim)`, computed once per limit (a few per policies file)."""
    got = _RATE_UNITS.get(id(lim))
    if got is None:
        if len(_RATE_UNITS) >= 4096:  # reloads make new limits
            _RATE_UNITS.clear()
        got = _RATE_UNITS[id(lim)] = (lim, _compute_rate_unit(lim))
    return got[1]


def _compute_rate_unit(lim: Limit) -> tuple[int, int]:
    """A limit's rate as Envoy's (requests_per_unit, unit): the configured amount and unit
    when the period is one of Envoy's (60/minute -> 60 per MINUTE, 1/week -> 1 per WEEK),
    else the smallest unit with a whole number of requests (3/2s -> 90 per MINUTE)."""
    rate = parse_rate(lim.rate)  # a Limit holds a parsed Rate: this returns it
    unit = _EXACT_UNITS.get(float(rate.period))
    if unit is not None and float(rate.amount).is_integer():
        return min(int(rate.amount), UINT32_MAX), unit
    per = lim.per_second
    for seconds, unit in _UNITS:
        n = per * seconds
        r = round(n)
        if r >= 1 and abs(n - r) <= 1e-9 * n:
            return min(r, UINT32_MAX), unit
    return max(1, min(math.floor(per * _UNITS[-1][0]), UINT32_MAX)), _UNITS[-1][1]


#: One `DescriptorStatus` as data: (code, current_limit as (requests_per_unit, unit, name) or
#: None, limit_remaining, duration_until_reset in seconds or None when unset).
StatusParts = tuple[rls_pb2.RateLimitResponse.Code, tuple[int, int, str] | None, int, int | None]
#: A whole `RateLimitResponse` as data: (overall_code, statuses, response_headers_to_add).
ResponseParts = tuple[rls_pb2.RateLimitResponse.Code, tuple[StatusParts, ...],
                      tuple[tuple[str, str], ...]]


@dataclass(frozen=True, slots=True)
class LimitHeaders:
    """envoyproxy/ratelimit's response headers (its ``LIMIT_RESPONSE_HEADERS_ENABLED``), by
    name: ``LIMIT_LIMIT_HEADER``, ``LIMIT_REMAINING_HEADER``, ``LIMIT_RESET_HEADER``; its
    defaults are the ``RateLimit-*`` family, ``X-RateLimit-*`` names give the other one.

    Sent instead of our ``RateLimit-Policy``/``RateLimit`` fields, for the descriptor closest
    to its limit, as the Go service picks it: the status with the least ``limit_remaining``
    among those with a ``current_limit`` (the first on a tie), an OVER_LIMIT one over any
    (the last of them). Values: its ``requests_per_unit``, its ``limit_remaining`` and its
    ``duration_until_reset`` in whole seconds."""

    limit: str = "RateLimit-Limit"
    remaining: str = "RateLimit-Remaining"
    reset: str = "RateLimit-Reset"

    def pick(self, statuses: tuple[StatusParts, ...]) -> tuple[tuple[str, str], ...]:
        chosen = None
        least = UINT32_MAX
        for st in statuses:
            if st[1] is not None and st[2] < least:
                chosen, least = st, st[2]
            if st[0] == _OVER_LIMIT:
                chosen, least = st, 0
        if chosen is None:
            return ()
        rpu = chosen[1][0] if chosen[1] is not None else 0
        return ((self.limit, str(rpu)), (self.remaining, str(chosen[2])),
                (self.reset, str(chosen[3] or 0)))


def response_parts(result: CheckResult, limit_headers: LimitHeaders | None = None, *,
                   now: float | None = None) -> ResponseParts:
    """What the RateLimitResponse for a check result holds, as data (`response_for` and
    `response_bytes` build it); with `limit_headers`, envoyproxy/ratelimit's headers instead
    of ours. `now` (the engine's clock, seconds) gives a fixed window that charged nothing
    its time to the window's end, which its decision does not carry."""
    statuses: list[StatusParts] = []
    for s in result.statuses:
        over = s.over_limit
        code = _OVER_LIMIT if over else _OK
        d = s.decision
        if d is None:
            statuses.append((code, None, UINT32_MAX if s.outcome == "unlimited" else 0, None))
            continue
        lim = d.limit
        current = None
        if lim is not None:
            rpu, unit = _rate_unit(lim)
            current = (rpu, unit, _label(s, lim))
        elif s.rule is not None and s.rule.zero_unit:
            # 0 requests per unit: the Go service names that limit and its window's end
            # (base_limiter.go, generateResponseDescriptorStatus with CalculateReset).
            zero = s.rule.zero_unit
            statuses.append((code, (0, _RL.Unit.Value(zero.upper()), s.rule.label), 0,
                             _window_end(UNIT_SECONDS[zero], now)))
            continue
        remaining = UINT32_MAX if s.outcome == "unlimited" else 0
        # Over the limit (shadow mode's too) is 0 left, as envoyproxy/ratelimit, even when
        # some capacity is left that this request's cost did not fit in.
        if not over and s.outcome != "shadow_rejected":
            remaining = min(max(int(d.remaining), 0), UINT32_MAX)
        reset = d.reset_after if math.isfinite(d.reset_after) else 10.0**9
        if reset <= 0 and now is not None and lim is not None \
                and lim.algorithm == "fixed-window":
            # Nothing charged in the window (a cost above the whole limit): the decision
            # has nothing to reset, but the Go service answers every status the time to
            # its window's end (`unit - now % unit`), and Envoy's reset header shows it.
            reset = lim.period - now % lim.period
        statuses.append((code, current, remaining, _reset_seconds(reset)))
    parts = tuple(statuses)
    headers = tuple(result_headers(result)) if limit_headers is None \
        else limit_headers.pick(parts)
    if result.degraded:
        # The failure policy decided, not the store: say so, as the middleware does (an
        # answer that looks like the full quota is otherwise indistinguishable from one).
        headers = (*headers, (DEGRADED_HEADER, result.failure))
    return _OK if result.allowed else _OVER_LIMIT, parts, headers


def _reset_seconds(reset: float) -> int:
    """``duration_until_reset`` of a status: whole seconds, rounded up (a window ending in
    29.75 s says 30, as the Go service's whole-second arithmetic); the tolerance absorbs
    float noise (3600.0000000001 says 3600)."""
    return max(0, math.ceil(reset - 1e-6))


def _window_end(period: int, now: float | None) -> int:
    """Whole seconds to the end of a `period`-second window at `now` (0 without a clock),
    as envoyproxy/ratelimit's ``CalculateReset``: ``unit - now % unit`` on whole seconds."""
    if now is None:
        return 0
    return int(period - int(now) % period)


def response_of(parts: ResponseParts) -> rls_pb2.RateLimitResponse:
    """The RateLimitResponse message `parts` describe."""
    overall, statuses, headers = parts
    resp = rls_pb2.RateLimitResponse(overall_code=overall)
    for code, current, remaining, reset in statuses:
        st = resp.statuses.add()
        st.code = code
        st.limit_remaining = remaining
        if current is not None:
            st.current_limit.requests_per_unit = current[0]
            st.current_limit.unit = current[1]
            if current[2]:
                st.current_limit.name = current[2]
        if reset is not None:
            st.duration_until_reset.seconds = reset
    for name, value in headers:
        resp.response_headers_to_add.add(key=name, value=value)
    return resp


def response_for(result: CheckResult, limit_headers: LimitHeaders | None = None, *,
                 now: float | None = None) -> rls_pb2.RateLimitResponse:
    """The RateLimitResponse for a check result (`response_parts`' options)."""
    return response_of(response_parts(result, limit_headers, now=now))


def _serialize(parts: ResponseParts) -> bytes:
    data: bytes = response_of(parts).SerializeToString()
    return data


#: `response_of(parts).SerializeToString()`, remembered per parts: the answers of a busy
#: limit repeat (its rate, a remaining count, a reset), and building the message is most of
#: the cost of an answer. Any answer (a status count, a header's length) is remembered.
response_bytes: Remembered[ResponseParts, bytes] = Remembered(_serialize, size=10_000,
                                                              max_len=None)


def _label(s: DescriptorStatus, lim: Limit) -> str:
    """The name the policies gave `lim` ("" if none): Envoy's ``current_limit.name``."""
    if s.rule is not None:
        for p in s.rule.limits:
            if p.limit is lim:
                return p.label
    return ""


#: What an admitted one-status answer depends on: the ids of its limit and rule, its
#: remaining count (``int``), its status's and its RateLimit field's reset seconds.
AnswerKey = tuple[int, int, int, int, int]


class Answers:
    """The serialized RateLimitResponse for a check result (`response_bytes` of
    `response_parts`), with the common answer remembered by what it depends on: one
    descriptor admitted by an enforced limit. Its bytes are a function of the deciding limit,
    the rule (its name for the limit, the limits its RateLimit-Policy lists), the remaining
    count and the two reset roundings: `AnswerKey`. Every other result (a rejection, shadow
    mode, several descriptors, legacy headers, a reset to work out from the clock) is built
    by `response_parts` each time. One per servicer: `limit_headers` is fixed for its life."""

    __slots__ = ("_get", "_memo", "limit_headers")

    def __init__(self, limit_headers: LimitHeaders | None = None, *,
                 size: int = 10_000) -> None:
        self.limit_headers = limit_headers
        # Each entry holds its limit and rule, so the ids in its key stay theirs.
        self._memo: Memo[AnswerKey, tuple[Limit, Rule, bytes]] = Memo(size)
        self._get = self._memo.get

    def __call__(self, result: CheckResult, now: float) -> bytes:
        statuses = result.statuses
        if len(statuses) == 1 and not result.legacy_headers:
            s = statuses[0]
            d = s.decision
            if s.outcome == "allowed" and d is not None and d is result.decision \
                    and not result.degraded:  # (a degraded answer has a field more)
                lim, rule, reset = d.limit, s.rule, d.reset_after
                # (reset <= 0 of a fixed window is worked out from `now`; inf is capped)
                if lim is not None and rule is not None and 0.0 < reset < 1e9:
                    key = (id(lim), id(rule), int(d.remaining), _reset_seconds(reset),
                           _ceil_seconds(reset))
                    got = self._get(key)
                    if got is not None and got[0] is lim and got[1] is rule:
                        return got[2]
                    data = response_bytes(response_parts(result, self.limit_headers, now=now))
                    self._memo.put(key, (lim, rule, data))
                    return data
        return response_bytes(response_parts(result, self.limit_headers, now=now))

    def __len__(self) -> int:
        return len(self._memo)


class RateLimitServicer:
    """The ``RateLimitService`` implementation, on grpc.aio."""

    def __init__(self, service: Service, limit_headers: LimitHeaders | None = None) -> None:
        self.service = service
        self.limit_headers = limit_headers
        # Held here too: read on every call (a Service keeps its engine and stats for life).
        self._engine = service.engine
        self._request_done = service.stats.request
        self._answer = Answers(limit_headers)
        self._error_on_store_failure = service.store_failure == "error"

    async def ShouldRateLimit(  # noqa: N802 (the protocol's method name)
        self, request: bytes, context: Any
    ) -> bytes:
        """One call, on the message's bytes (grpc passes them through): remembered parses
        and answers (`parse_cached`, `Answers`) skip most protobuf work."""
        t0 = time.perf_counter()
        result = "error"
        try:
            domain, descriptors, hits = parse_cached(request)
            engine = self._engine
            res = await engine.check(domain, descriptors, hits)
            if res.degraded and self._error_on_store_failure:
                # envoyproxy/ratelimit's answer to a cache error: an error, so that Envoy's
                # failure_mode_deny (not this service) decides what a store failure means.
                raise StoreFailed
            result = "degraded" if res.degraded else \
                "ok" if res.known_domain else "unknown_domain"
            return self._answer(res, engine.clock())
        except StoreFailed:
            result = "store_error"
            code, detail = grpc.StatusCode.UNAVAILABLE, STORE_FAILED
        except UnknownDomain as e:
            result = "unknown_domain"
            code, detail = grpc.StatusCode.INVALID_ARGUMENT, str(e)
        except InvalidRequest as e:
            result = "invalid"
            code, detail = grpc.StatusCode.INVALID_ARGUMENT, str(e)
        except Exception:
            log.exception("unhandled error in ShouldRateLimit", extra={"event": "grpc_error"})
            code, detail = grpc.StatusCode.INTERNAL, "the service failed to answer; see its log"
        finally:
            self._request_done("grpc", result, time.perf_counter() - t0)
        await context.abort(code, detail)
        raise AssertionError("unreachable: context.abort raises")


def grpc_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


async def start_grpc_server(service: Service, host: str, port: int | None, *,
                            max_message: int = DEFAULT_MAX_BODY, health: Any = None,
                            limit_headers: LimitHeaders | None = None,
                            reflect: bool = True, credentials: Any = None,
                            unix: str | None = None,
                            reuse_port: bool = False,
                            interceptors: Sequence[Any] = ()) -> tuple[Any, int]:
    """Start a grpc.aio server for `service`; returns ``(server, bound TCP port)`` (0 when
    `port` is None: no TCP listener). `health` (a `_grpc_ops.Health`) adds
    ``grpc.health.v1.Health``; `reflect` adds server reflection; `credentials` (grpc server
    credentials) makes the TCP listener TLS; `unix` also listens on that socket path;
    `interceptors` (grpc.aio server interceptors) see every call (none by default: a call
    costs no more than its handler)."""
    server = grpc.aio.server(interceptors=tuple(interceptors) or None, options=[
        ("grpc.max_receive_message_length", max_message),
        # A port in use is an error, not a silent second listener, but for --workers.
        ("grpc.so_reuseport", 1 if reuse_port else 0),
    ])
    # What the generated add_RateLimitServiceServicer_to_server does, with a deserializer
    # that turns undecodable bytes into INVALID_ARGUMENT rather than UNKNOWN, and without
    # registering the method (see _grpc_ops.GenericOnly).
    handlers = {"ShouldRateLimit": grpc.unary_unary_rpc_method_handler(
        RateLimitServicer(service, limit_headers).ShouldRateLimit,
        request_deserializer=None, response_serializer=None,  # bytes: see ShouldRateLimit
    )}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    names = [SERVICE]
    if health is not None:
        from ._grpc_ops import HEALTH_SERVICE  # noqa: PLC0415
        health.add_to(server)
        names.append(HEALTH_SERVICE)
    if reflect:
        from ._grpc_ops import add_reflection  # noqa: PLC0415
        add_reflection(server, names)
    bound = 0
    if port is not None:
        address = grpc_address(host, port)
        bound = _add_port(server, address, credentials)
    if unix is not None:
        # A unix socket is local: it stays plaintext even when the TCP listener is TLS.
        _add_port(server, f"unix:{unix}", None)
    await server.start()
    return server, int(bound)


def _add_port(server: Any, address: str, credentials: Any) -> int:
    try:
        bound = (server.add_insecure_port(address) if credentials is None
                 else server.add_secure_port(address, credentials))
    except RuntimeError as e:
        raise OSError(f"cannot listen for gRPC on {address}: {e}") from None
    if not bound:
        raise OSError(f"cannot listen for gRPC on {address}")
    return int(bound)
