"""The HTTP JSON API (a Starlette ASGI app): ``POST /v1/check`` and friends.

Routes:

- ``POST /v1/check``: ``{"domain": "api", "descriptors": [...], "cost": 1}`` or
  ``{"domain": "login", "key": "alice"}`` -> ``200`` with the decision, the statuses and the
  headers the caller should send its own client. A rejection is still a ``200``: the check
  worked, and its answer is ``"allowed": false``. A domain the policies do not define is
  ``200``, allowed, every descriptor unmatched (as envoyproxy/ratelimit; ``[service]
  unknown_domain = "error"`` makes it ``404``). Bad input is a ``4xx`` with an RFC 9457
  ``application/problem+json`` body saying what is wrong: ``400`` malformed or invalid,
  ``404`` unknown domain (strict mode), ``413`` body over the limit. The body must be JSON
  whatever its Content-Type says (so ``curl -d '{...}'`` works).
- ``POST /v1/http``: ``{"method": "POST", "path": "/login", "headers": {...}, "client":
  "203.0.113.7"}`` -> what the middleware would do with that request under the policies'
  ``[http]`` part (its verdict, status, headers, decision and the descriptors it sent),
  decided on the same counters: a gateway or a non-Python app can share the limits of the
  in-process middleware. ``400`` when the policies have no ``[http]`` part.
- ``GET /v1/policies``: the live policies, documented (every domain, rule and limit).
- ``GET /healthz``: 200 while the process serves (503 once it is shutting down).
- ``GET /readyz``: 200 when the store answers and the service is not shutting down.
- ``GET /healthcheck``: the same readiness as envoyproxy/ratelimit answers it (its
  ``HealthChecker.ServeHTTP``): 200 ``OK`` (text/plain), or 500 with no body.
- ``GET /metrics``: Prometheus exposition.

Descriptor forms accepted in ``descriptors`` (mix freely):

- Envoy's: ``{"entries": [{"key": "user", "value": "alice"}], "cost": 2}`` (``hits_addend``
  is accepted for ``cost``; a descriptor's own cost of 0 checks without charging);
- short: ``{"user": "alice", "op": "export"}``: every member is an entry, in order.

``"key": K`` is shorthand for ``"descriptors": [{"key": K}]``, a one-entry descriptor whose
entry key is literally ``key``, matched by a rule ``key = "key"``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route, request_response
from starlette.types import Receive, Scope, Send

from .. import core
from .._json import decision_json, json_number
from .._types import Decision, Limit
from ..http.headers import PROBLEM_CONTENT_TYPE, problem_body, ratelimit_headers, rejection_headers
from ..policy._decide import HTTPDecision, decide_request
from ..policy._engine import (
    MAX_DESCRIPTORS,
    CheckResult,
    DescriptorRequest,
    DescriptorStatus,
    InvalidRequest,
    UnknownDomain,
    check_hits,
    check_text,
    make_descriptor,
)
from ..policy._model import Policies
from ..policy._request import RequestInfo, request_from_json
from ._service import STORE_FAILED, Remembered, Service, StoreFailed, result_headers
from ._stats import PrometheusStats

__all__ = ["create_app", "parse_check", "result_json"]

log = logging.getLogger("ratekeeper.service")

_TOP_MEMBERS = ("domain", "descriptors", "key", "cost", "hits_addend")
_ENVOY_MEMBERS = ("entries", "cost", "hits_addend")


class _BodyTooLarge(Exception):
    pass


def _stdlib_dumps(obj: Any) -> bytes:
    """The reference encoding: what Starlette's JSONResponse sends (compact, UTF-8, no NaN)."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, indent=None,
                      separators=(",", ":")).encode("utf-8")


try:
    import orjson
except ImportError:  # the pure-Python fallback: same bytes, a few microseconds more
    orjson = None  # type: ignore[assignment]

#: Where orjson's output may differ from the reference: a float below 1e-4, which json prints
#: as ``5e-05``/``1e-07`` and orjson as ``0.00005``/``1e-7`` (all others print alike, checked
#: on millions of random doubles), or NaN/Infinity (orjson ``null``, json refuses them).
_SMALL_EXPONENT = re.compile(rb"\de-\d")

#: Which encoder `dumps` uses (reported in the ``listening`` log record).
JSON_CODEC = "json" if orjson is None else "orjson"


def dumps(obj: Any) -> bytes:
    """`obj` as a JSON body, byte for byte what `_stdlib_dumps` gives, with orjson when it is
    installed (several times faster on a /v1/check answer) and the standard library else."""
    if orjson is None:
        return _stdlib_dumps(obj)
    try:
        out: bytes = orjson.dumps(obj)
    except (TypeError, orjson.JSONEncodeError):
        return _stdlib_dumps(obj)  # raises what the reference raises (or encodes it)
    # Rare on the hot path (a tiny float; a null: an unmatched descriptor): the reference.
    # (Substring tests first: a regex scan of a whole answer costs more than orjson did.)
    if b"null" in out or b"0.0000" in out or (b"e-" in out and _SMALL_EXPONENT.search(out)):
        return _stdlib_dumps(obj)
    return out


class _JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


class _JSONBytes(Response):
    """An encoded JSON body."""

    media_type = "application/json"


#: Constant answers, encoded once.
_OK_BODY = dumps({"status": "ok"})
_STOPPING_BODY = dumps({"status": "stopping"})


def _problem(status: int, title: str, detail: str, **extra: Any) -> Response:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return Response(json.dumps(body, ensure_ascii=True, separators=(",", ":")),
                    status_code=status, media_type=PROBLEM_CONTENT_TYPE)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _cost(obj: Mapping[str, Any], where: str) -> Any:
    if "cost" in obj and "hits_addend" in obj:
        raise InvalidRequest(f"{where}: give either cost or hits_addend (its Envoy name), "
                             "not both")
    return obj.get("cost", obj.get("hits_addend"))


def _json_object(body: bytes, example: str) -> dict[str, Any]:
    """The body as a JSON object, or `InvalidRequest` saying what is wrong with it."""
    try:
        # Decoded here, strictly: json.loads(bytes) would guess UTF-16/32 and let encoded
        # surrogates through ("surrogatepass"); RFC 8259 JSON between systems is UTF-8.
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidRequest(f"the body is not valid JSON: it is not UTF-8 (byte "
                             f"0x{body[e.start]:02x} at offset {e.start})") from None
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise InvalidRequest(f"the body is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise InvalidRequest(f"the body must be a JSON object such as {example}")
    return obj


def _parse_check_tuple(body: bytes) -> tuple[str, tuple[DescriptorRequest, ...], float]:
    domain, descriptors, cost = parse_check(body)
    return domain, tuple(descriptors), cost


#: `parse_check`, remembered per body (only valid ones: a bad body raises each time): a
#: returning client sends the same bytes (its key, its descriptors), and the answer is a
#: pure function of them. Bodies over 512 bytes are parsed afresh (a check is under 100).
parse_check_cached: Remembered[bytes, tuple[str, tuple[DescriptorRequest, ...], float]] = \
    Remembered(_parse_check_tuple, size=10_000, max_len=512)


def parse_check(body: bytes) -> tuple[str, list[DescriptorRequest], float]:
    """Validate a ``/v1/check`` body: ``(domain, descriptors, cost)``, or `InvalidRequest`."""
    obj = _json_object(body, '{"domain": "api", "descriptors": [{"user": "alice"}]}')
    unknown = [k for k in obj if k not in _TOP_MEMBERS]
    if unknown:
        raise InvalidRequest(f"unknown member(s) {unknown}; expected: {', '.join(_TOP_MEMBERS)}")
    domain = obj.get("domain")
    if not isinstance(domain, str) or not domain:
        raise InvalidRequest(f"domain must be a non-empty string, got {domain!r:.60}")
    check_text(domain, "domain")
    raw_cost = _cost(obj, "request")
    cost = 1.0 if raw_cost is None else check_hits(raw_cost, "cost")
    if ("descriptors" in obj) == ("key" in obj):
        raise InvalidRequest('give either "descriptors" (a list) or "key" (a string)')
    if "key" in obj:
        key = obj["key"]
        if not isinstance(key, str) or not key:
            raise InvalidRequest(f"key must be a non-empty string, got {key!r:.60}")
        check_text(key, "key")
        return domain, [make_descriptor([("key", key)], where="key")], cost
    raw = obj["descriptors"]
    if not isinstance(raw, list):
        raise InvalidRequest(f"descriptors must be a list, got {type(raw).__name__}")
    if not raw:
        raise InvalidRequest("descriptors is empty; a check needs at least one descriptor")
    if len(raw) > MAX_DESCRIPTORS:
        raise InvalidRequest(f"{len(raw)} descriptors in one check; at most {MAX_DESCRIPTORS}")
    return domain, [_descriptor(d, f"descriptors[{i}]") for i, d in enumerate(raw)], cost


def _descriptor(d: object, where: str) -> DescriptorRequest:
    if not isinstance(d, dict):
        raise InvalidRequest(f'{where} must be an object: {{"user": "alice"}} or '
                             f'{{"entries": [{{"key": "user", "value": "alice"}}]}}')
    if "entries" not in d:
        return make_descriptor(list(d.items()), where=where)
    unknown = [k for k in d if k not in _ENVOY_MEMBERS]
    if unknown:
        raise InvalidRequest(f"{where}: unknown member(s) {unknown}; expected: "
                             f"{', '.join(_ENVOY_MEMBERS)}")
    entries = d["entries"]
    if not isinstance(entries, list):
        raise InvalidRequest(f"{where}.entries must be a list of {{\"key\": ..., "
                             f"\"value\": ...}} objects")
    pairs: list[tuple[object, object]] = []
    for j, e in enumerate(entries):
        if not isinstance(e, dict) or set(e) - {"key", "value"} or "key" not in e:
            raise InvalidRequest(f'{where}.entries[{j}] must be {{"key": ..., "value": ...}}, '
                                 f"got {e!r:.60}")
        pairs.append((e["key"], e.get("value", "")))
    return make_descriptor(pairs, hits=_cost(d, where), where=where)


def _decision(d: Decision | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return decision_json(d)


def _status_json(s: DescriptorStatus) -> dict[str, Any]:
    return {
        "code": "OVER_LIMIT" if s.over_limit else "OK",
        "outcome": s.outcome,
        "rule": None if s.rule is None else s.rule.name,
        "limits": [lim.name for lim in s.limits],
        "decision": _decision(s.decision),
    }


#: Listed in a ``/v1/check`` answer's headers when the failure policy decided (the store
#: failed), naming that policy: the middleware's default `degraded_header`, and what the gRPC
#: answer adds (`_grpc.DEGRADED_HEADER`).
DEGRADED_HEADER = "X-RateLimit-Degraded"


def _headers(r: CheckResult) -> dict[str, str]:
    """The fields the caller should send its client for `r` (`result_headers`, and on a
    degraded answer `DEGRADED_HEADER`)."""
    headers = dict(result_headers(r))
    if r.degraded:
        headers[DEGRADED_HEADER] = r.failure
    return headers


def result_json(r: CheckResult) -> dict[str, Any]:
    """The ``/v1/check`` response body for a result."""
    out: dict[str, Any] = {
        "allowed": r.allowed,
        "code": "OK" if r.allowed else "OVER_LIMIT",
        "domain": r.domain,
        "decision": _decision(r.decision),
        "headers": _headers(r),
        "statuses": [_status_json(s) for s in r.statuses],
        "degraded": r.degraded,
        "generation": r.generation,
    }
    if not r.allowed and r.decision is not None:
        out["problem"] = json.loads(problem_body(r.decision))
    return out


#: JSON text of a string, as `_stdlib_dumps` writes it (ensure_ascii=False): the C function
#: json.dumps itself calls for a str.
_json_str: Callable[[str], str] = json.encoder.encode_basestring

#: The constant JSON text around a status's decision, by (outcome, rule, limits); each entry
#: holds its rule and limits so that their ids stay theirs while it lives. Cleared when full.
_STATUS_HEADS: dict[tuple[str, int, int], tuple[str, object, object]] = {}
#: The JSON text of a limit's name, by limit id (the entry holds the limit).
_LIMIT_NAMES: dict[int, tuple[str, object]] = {}
_FRAGMENTS_SIZE = 4096


def _limit_name(lim: Limit) -> str:
    got = _LIMIT_NAMES.get(id(lim))
    if got is None:
        if len(_LIMIT_NAMES) >= _FRAGMENTS_SIZE:
            _LIMIT_NAMES.clear()
        got = _LIMIT_NAMES[id(lim)] = (_json_str(lim.name), lim)
    return got[0]


def _decision_text(d: Decision) -> str | None:
    """`decision_json(d)` as `_stdlib_dumps` writes it; None when it has no limit or a
    number that is not finite (the general path answers those)."""
    lim = d.limit
    if lim is None:
        return None
    retry = 0 if d.allowed else json_number(d.retry_after)
    numbers = (f'{d.remaining!r},"retry_after":{retry!r},'
               f'"reset_after":{json_number(d.reset_after)!r},'
               f'"delay":{json_number(d.delay)!r}')
    if "n" in numbers:  # inf, nan (the reference refuses them) or None (its null)
        return None
    return (f'{{"allowed":{"true" if d.allowed else "false"},"remaining":{numbers},'
            f'"limit":{_limit_name(lim)}}}')


def check_answer(r: CheckResult) -> bytes:
    """``dumps(result_json(r))``, byte for byte, for less: an admitted check's answer is
    joined from JSON text rendered once per rule and limit and the few numbers that change.
    Other answers (a rejection, an unmatched descriptor, no decision) take the general path."""
    d = r.decision
    if d is None or not r.allowed:
        return dumps(result_json(r))
    top = _decision_text(d)
    if top is None:
        return dumps(result_json(r))
    statuses = []
    for s in r.statuses:
        sd = s.decision
        rule = s.rule
        if sd is None or rule is None:
            return dumps(result_json(r))
        text = top if sd is d else _decision_text(sd)
        if text is None:
            return dumps(result_json(r))
        key = (s.outcome, id(rule), id(s.limits))
        head = _STATUS_HEADS.get(key)
        if head is None:
            if len(_STATUS_HEADS) >= _FRAGMENTS_SIZE:
                _STATUS_HEADS.clear()
            code = '"OVER_LIMIT"' if s.over_limit else '"OK"'
            names = ",".join(_limit_name(lim) for lim in s.limits)
            head = _STATUS_HEADS[key] = (
                f'{{"code":{code},"outcome":{_json_str(s.outcome)},'
                f'"rule":{_json_str(rule.name)},"limits":[{names}],"decision":', rule, s.limits)
        statuses.append(f"{head[0]}{text}}}")
    headers = ",".join([f"{_json_str(k)}:{_json_str(v)}"
                        for k, v in _headers(r).items()])
    degraded = "true" if r.degraded else "false"
    return (f'{{"allowed":true,"code":"OK","domain":{_json_str(r.domain)},"decision":{top},'
            f'"headers":{{{headers}}},"statuses":[{",".join(statuses)}],'
            f'"degraded":{degraded},"generation":{r.generation!r}}}').encode()


def parse_http_request(body: bytes) -> RequestInfo:
    """Validate a ``/v1/http`` body (`ratekeeper.policy.request_from_json`)."""
    obj = _json_object(body, '{"method": "GET", "path": "/", "client": "203.0.113.7"}')
    try:
        return request_from_json(obj)
    except ValueError as e:
        raise InvalidRequest(str(e)) from None


def http_result_json(hd: HTTPDecision | None, snap: Policies) -> dict[str, Any]:
    """The ``/v1/http`` answer: what the middleware would do with the request."""
    if hd is None:
        return {"allowed": True, "verdict": "not_limited", "status": 200, "decision": None,
                "headers": {}, "descriptors": [], "route": None,
                "generation": snap.generation}
    rules = snap.http
    assert rules is not None
    d = hd.decision
    limits = hd.limits
    rejected = hd.verdict == "rejected"
    if rejected:
        headers = rejection_headers(d, legacy=rules.legacy_headers, policies=limits,
                                    content_type=False)
    else:
        headers = ratelimit_headers(d, legacy=rules.legacy_headers, policies=limits)
    out: dict[str, Any] = {
        "allowed": not rejected,
        "verdict": hd.verdict,
        "status": rules.status if rejected else 200,
        "decision": decision_json(d),
        "headers": dict(headers),
        "descriptors": [[list(e) for e in desc.entries] for desc in hd.check.descriptors],
        "route": hd.check.route or None,
        "degraded": d.degraded,
        "generation": snap.generation,
    }
    if rejected:
        out["problem"] = json.loads(problem_body(d, status=rules.status,
                                                 type_=rules.problem_type))
    return out


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The request body (as Starlette's ``Request.stream`` reads it), at most `limit` bytes:
    `_BodyTooLarge` past it (a Content-Length over it before reading), `ClientDisconnect`
    if the client goes away first."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            length = value.decode("latin-1")
            try:
                n = int(length)
            except ValueError:
                raise InvalidRequest(f"Content-Length {length!r:.30} is not a number") from None
            if n > limit:
                raise _BodyTooLarge(n)
            break
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise _BodyTooLarge(size)
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        elif kind == "http.disconnect":
            raise ClientDisconnect()
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


#: The headers of a JSON answer after its content-length, as Starlette's Response sends them.
_JSON_TYPE = (b"content-type", b"application/json")


class _ServiceApp(Starlette):
    """The Starlette app, with ``POST /v1/check`` (the hot route) answered before Starlette's
    middleware and router: the same bytes, without their cost per request."""

    check_asgi: Callable[[Scope, Receive, Send], Awaitable[None]]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1/check" \
                and scope["method"] == "POST" and not scope.get("root_path"):
            await self.check_asgi(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def create_app(service: Service, limit_headers: Any = None) -> Starlette:
    """The ASGI application of the decision service. `limit_headers` (a
    `_grpc.LimitHeaders`): envoyproxy/ratelimit's headers in ``POST /json``'s answers, as
    in the gRPC ones."""
    engine = service.engine
    stats = service.stats
    error_on_store_failure = service.store_failure == "error"

    async def answer(scope: Scope, receive: Receive,
                     decide: Callable[[bytes], Awaitable[tuple[str, bytes]]]
                     ) -> bytes | Response:
        """One POST: read the body, `decide` it (-> metric result, encoded JSON answer): the
        JSON body; every client mistake a 4xx problem, a bug a logged 500."""
        t0 = time.perf_counter()
        result = "error"
        try:
            body = await _read_body(scope, receive, service.max_body)
            result, out = await decide(body)
            return out
        except _BodyTooLarge as e:
            result = "too_large"
            return _problem(413, "Content Too Large",
                            f"the body is over the {service.max_body}-byte limit "
                            f"({e.args[0]} bytes or more)")
        except StoreFailed:
            result = "store_error"
            return _problem(503, "Service Unavailable", STORE_FAILED)
        except UnknownDomain as e:
            result = "unknown_domain"
            return _problem(404, "Unknown Domain", str(e), known_domains=list(e.known))
        except InvalidRequest as e:
            result = "invalid"
            return _problem(400, "Bad Request", str(e))
        except ClientDisconnect:
            # The client went away mid-body: nobody to answer, nothing wrong with the service.
            result = "disconnected"
            log.debug("client disconnected before sending the whole body",
                      extra={"event": "client_disconnected"})
            return Response(status_code=400)
        except Exception:
            # Answered here rather than by Starlette's error middleware, which re-raises to
            # uvicorn: that logs the error a second time and closes the keep-alive connection.
            log.exception("unhandled error in POST %s", scope["path"],
                          extra={"event": "http_error"})
            return _problem(500, "Internal Server Error",
                            "the service failed to answer; see its log")
        finally:
            stats.request("http", result, time.perf_counter() - t0)

    async def decide_check(body: bytes) -> tuple[str, bytes]:
        domain, descriptors, cost = parse_check_cached(body)
        res = await engine.check(domain, descriptors, cost)
        if res.degraded and error_on_store_failure:
            raise StoreFailed  # as the gRPC answer: the caller decides (503)
        result = "degraded" if res.degraded else "ok" if res.known_domain else "unknown_domain"
        return result, check_answer(res)

    async def decide_http(body: bytes) -> tuple[str, bytes]:
        snap = service.holder.current
        if snap.http is None:
            raise InvalidRequest(f"the policies ({snap.source}) have no [http] part, so a "
                                 "request cannot be mapped to descriptors; POST descriptors "
                                 "to /v1/check instead, or add [http]")
        req = parse_http_request(body)
        hd = await core.arun(decide_request(engine, snap, req, engine.clock()))
        return "ok", dumps(http_result_json(hd, snap))

    async def check_asgi(scope: Scope, receive: Receive, send: Send) -> None:
        # The answer sent as Starlette's Response sends it, with its headers in its order.
        out = await answer(scope, receive, decide_check)
        if isinstance(out, Response):
            await out(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-length", b"%d" % len(out)), _JSON_TYPE]})
        await send({"type": "http.response.body", "body": out})

    async def check(request: Request) -> Response:
        # Only reached under a root_path (`_ServiceApp` answers the rest first).
        out = await answer(request.scope, request.receive, decide_check)
        return out if isinstance(out, Response) else _JSONBytes(out)

    async def http_check(request: Request) -> Response:
        out = await answer(request.scope, request.receive, decide_http)
        return out if isinstance(out, Response) else _JSONBytes(out)

    async def go_json(request: Request) -> Response:
        # envoyproxy/ratelimit's /json: a RateLimitRequest in protobuf JSON, answered with
        # the RateLimitResponse gRPC would give, 200 (OK) or 429 (OVER_LIMIT).
        from google.protobuf import json_format  # type: ignore[import-untyped]  # noqa: PLC0415

        from ._grpc import parse_request, response_for  # noqa: PLC0415
        from .proto.envoy.service.ratelimit.v3 import rls_pb2  # noqa: PLC0415
        over = False

        async def decide_json(body: bytes) -> tuple[str, bytes]:
            nonlocal over
            req = rls_pb2.RateLimitRequest()
            try:
                json_format.Parse(body, req)
            except (json_format.ParseError, RecursionError, UnicodeDecodeError) as e:
                raise InvalidRequest(
                    "the body is not a RateLimitRequest in protobuf JSON (envoyproxy/"
                    'ratelimit\'s /json: {"domain": "d", "descriptors": [{"entries": '
                    f'[{{"key": "k", "value": "v"}}]}}]}}): {str(e)[:200]}') from None
            domain, descriptors, hits = parse_request(req)
            res = await engine.check(domain, descriptors, hits)
            if res.degraded and error_on_store_failure:
                raise StoreFailed
            resp = response_for(res, limit_headers, now=engine.clock())
            over = resp.overall_code == rls_pb2.RateLimitResponse.OVER_LIMIT
            result = "degraded" if res.degraded else \
                "ok" if res.known_domain else "unknown_domain"
            return result, json.dumps(json_format.MessageToDict(resp),
                                      separators=(",", ":")).encode()

        out = await answer(request.scope, request.receive, decide_json)
        if isinstance(out, Response):
            return out
        return Response(out, status_code=429 if over else 200, media_type="application/json")

    async def policies(request: Request) -> Response:
        doc = service.holder.current.describe()
        doc["last_reload_error"] = service.holder.last_error
        return _JSON(doc)

    async def healthz(request: Request) -> Response:
        if service.stopping:
            return Response(_STOPPING_BODY, 503, media_type="application/json")
        return Response(_OK_BODY, media_type="application/json")

    async def readyz(request: Request) -> Response:
        if service.stopping:
            return _JSON({"status": "stopping"}, status_code=503)
        problem = await engine.probe()
        if problem is not None:
            return _JSON({"status": "unavailable", "store": service.store_name,
                                 "error": problem}, status_code=503)
        return _JSON({"status": "ready", "store": service.store_name, "pid": os.getpid(),
                             "generation": service.holder.current.generation})

    async def healthcheck(request: Request) -> Response:
        # envoyproxy/ratelimit's path and answers, for probes written against it: the
        # process's health unless told to follow the store (Service.health_checks_store).
        if service.stopping or (service.health_checks_store
                                and await engine.probe() is not None):
            return Response(status_code=500)
        return Response(b"OK", media_type="text/plain")

    async def metrics(request: Request) -> Response:
        if not isinstance(stats, PrometheusStats):
            return _problem(404, "Not Found", "this service keeps no Prometheus metrics")
        body, ctype = stats.render()
        return Response(body, media_type=ctype)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        resp = _problem(exc.status_code, _TITLES.get(exc.status_code, "Error"),
                        f"{request.method} {request.url.path}: {exc.detail}")
        if exc.headers:
            resp.headers.update(exc.headers)
        return resp

    async def server_error(request: Request, exc: Exception) -> Response:
        log.error("unhandled error in %s %s", request.method, request.url.path,
                  exc_info=exc, extra={"event": "http_error"})
        return _problem(500, "Internal Server Error", "the service failed to answer; see its log")

    app = _ServiceApp(
        routes=[
            _route("/v1/check", check, "POST"),
            _route("/v1/http", http_check, "POST"),
            _route("/json", go_json, "POST"),
            _route("/v1/policies", policies, "GET"),
            _route("/healthz", healthz, "GET"),
            _route("/readyz", readyz, "GET"),
            _route("/healthcheck", healthcheck, "GET"),
            _route("/metrics", metrics, "GET"),
        ],
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )
    app.check_asgi = check_asgi
    return app


class _ASGIApp:
    """An ASGI app as an object. Starlette takes a route's endpoint for a request -> response
    function only if it is a Python function object, which a compiled module's functions are
    not (`ratekeeper._compiled`): otherwise it calls it as an ASGI app."""

    __slots__ = ("app",)

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        return self.app(scope, receive, send)


def _route(path: str, endpoint: Callable[[Request], Awaitable[Response]], method: str) -> Route:
    """``Route(path, endpoint, methods=[method])``, whether `endpoint` is compiled or not."""
    return Route(path, _ASGIApp(request_response(endpoint)), methods=[method],
                 name=endpoint.__name__)


_TITLES = {404: "Not Found", 405: "Method Not Allowed"}
