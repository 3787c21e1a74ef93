"""The service's fast paths answer exactly what the general ones answer.

- ``POST /v1/check`` is answered before Starlette's middleware and router (`_ServiceApp`);
  under a ``root_path`` it still goes through Starlette's route. Both must send the same
  messages (status, headers in order, body bytes) for every body, good or bad.
- `result_headers` renders the constant parts of the RateLimit fields once per set of
  limits; its fields must be what `ratelimit_headers` / `rejection_headers` build.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper import Decision, Limit
from ratekeeper.http.headers import ratelimit_headers, rejection_headers
from ratekeeper.policy._engine import CheckResult, InvalidRequest
from ratekeeper.policy._holder import PolicyHolder
from ratekeeper.service import _http
from ratekeeper.service._grpc import _compute_rate_unit, _rate_unit
from ratekeeper.service._http import (
    check_answer,
    create_app,
    dumps,
    parse_check,
    result_json,
)
from ratekeeper.service._service import Remembered, Service, result_headers
from ratekeeper.service._stats import PrometheusStats
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.testing import ManualClock

POLICIES = Path(__file__).parent / "policies" / "service.toml"

BODIES = [
    b'{"domain":"t","descriptors":[{"user":"fast-a"}]}',
    b'{"domain":"t","descriptors":[{"user":"fast-a"}]}',
    b'{"domain":"t","descriptors":[{"user":"fast-a"}]}',
    b'{"domain":"t","descriptors":[{"user":"fast-a"}]}',  # over its 3/hour
    b'{"domain":"t","descriptors":[{"user":"fast-b","op":"export"}],"cost":2}',
    b'{"domain":"t","descriptors":[{"tenant":"x"},{"user":"vip-1"},{"user":"trial-1"}]}',
    b'{"domain":"t","descriptors":[{"user":"trial-1"}]}',
    b'{"domain":"t","key":"k1"}',
    b'{"domain":"nope","descriptors":[{"user":"a"}]}',
    b'{"domain":"t","descriptors":[{"entries":[{"key":"user","value":"e"}],"cost":0}]}',
    b'{"domain":"t","descriptors":[]}',
    b'{"domain":"t"',
    b'\xff\xfe',
    b'[1]',
    b'{"domain":"t","descriptors":[{"user":"fast-c"}],"cost":1e400}',
    b'{"domain":"t","descriptors":[{"user":"fast-c"}],"extra":1}',
    b"x" * 70_000,  # over the body limit
]


def _app() -> Any:
    clock = ManualClock(1_000_000.0)
    stats = PrometheusStats()
    holder = PolicyHolder(POLICIES, stats=stats)
    return create_app(Service(holder, MemoryStore(), stats=stats, clock=clock))


async def _call(app: Any, body: bytes, *, root_path: str = "", chunked: bool = False,
                length: bytes | None = None) -> list[dict[str, Any]]:
    headers = [(b"host", b"t"), (b"content-type", b"application/json")]
    if length is not None:
        headers.append((b"content-length", length))
    elif not chunked:
        headers.append((b"content-length", str(len(body)).encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": root_path + "/v1/check",
             "raw_path": (root_path + "/v1/check").encode(), "root_path": root_path,
             "query_string": b"", "headers": headers, "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80), "state": {}}
    parts = [body[i:i + 7] for i in range(0, len(body), 7)] if chunked else [body]
    msgs = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1}
            for i, p in enumerate(parts)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return msgs.pop(0) if msgs else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


@pytest.mark.parametrize("chunked", [False, True])
def test_the_hot_route_sends_what_starlettes_route_sends(chunked: bool) -> None:
    fast, routed = _app(), _app()

    async def both() -> None:
        for body in BODIES:
            a = await _call(fast, body, chunked=chunked)
            b = await _call(routed, body, root_path="/under", chunked=chunked)
            assert a == b, body[:80]
            assert a[0]["type"] == "http.response.start"
        # A Content-Length that is no number, one over the limit, a client gone mid-body.
        for length in (b"12x", b"999999"):
            assert await _call(fast, BODIES[0], length=length) == \
                await _call(routed, BODIES[0], root_path="/under", length=length)
        assert await _call(fast, b"", length=b"40") == \
            await _call(routed, b"", root_path="/under", length=b"40")

    asyncio.run(both())


def test_the_routes_keep_their_endpoints_names() -> None:
    # The endpoints are given to Starlette as ASGI apps (`_http._route`: a compiled
    # function is no Python function object), under their own names.
    app = _app()
    paths = {name: app.url_path_for(name) for name in (
        "check", "http_check", "policies", "healthz", "readyz", "healthcheck", "metrics")}
    assert paths == {"check": "/v1/check", "http_check": "/v1/http",
                     "policies": "/v1/policies", "healthz": "/healthz", "readyz": "/readyz",
                     "healthcheck": "/healthcheck", "metrics": "/metrics"}


def test_the_hot_route_answers_a_decision_as_json() -> None:
    sent = asyncio.run(_call(_app(), BODIES[0]))
    assert sent[0]["status"] == 200
    assert sent[0]["headers"] == [(b"content-length", str(len(sent[1]["body"])).encode()),
                                  (b"content-type", b"application/json")]
    assert sent[1]["body"].startswith(b'{"allowed":true,"code":"OK","domain":"t",')


_LIMITS = [Limit("gcra", "1000/s", burst=1000, name="per-user"),
           Limit("token-bucket", "10/minute", name="everyone"),
           Limit("fixed-window", "3/hour", name='odd"name'),
           Limit("fixed-window", "3/hour")]
_numbers = st.one_of(st.integers(-5, 10**6), st.floats(-5, 1e6, allow_nan=False))
_delays = st.one_of(st.floats(0, 1e7, allow_nan=False), st.just(0.0))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_LIMITS), st.lists(st.sampled_from(_LIMITS), max_size=4),
       st.booleans(), st.booleans(), _numbers, _delays, _delays)
def test_result_headers_are_ratelimit_headers(lim: Limit, consulted: list[Limit],
                                              allowed: bool, legacy: bool, remaining: float,
                                              reset: float, retry: float) -> None:
    d = Decision(allowed, remaining, 0.0 if allowed else retry, reset, 0.0, lim)  # type: ignore[arg-type]
    r = CheckResult("d", allowed, d, (), tuple(consulted), legacy_headers=legacy)
    expected = (ratelimit_headers(d, legacy=legacy, policies=tuple(consulted)) if allowed
                else rejection_headers(d, legacy=legacy, policies=tuple(consulted),
                                       content_type=False))
    assert result_headers(r) == expected
    assert result_headers(r) == expected  # the second time from the rendered parts


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10**7), st.sampled_from(("s", "2s", "m", "3m", "h", "d", "7d", "week",
                                               "30d", "365d", "90s")))
def test_a_limits_envoy_rate_is_computed_once_and_the_same(amount: int, per: str) -> None:
    lim = Limit("fixed-window", f"{amount}/{per}")
    assert _rate_unit(lim) == _compute_rate_unit(lim)
    assert _rate_unit(lim) == _compute_rate_unit(lim)  # from memory
    other = Limit("fixed-window", f"{amount + 1}/{per}")
    assert _rate_unit(other) == _compute_rate_unit(other)


# ---------------------------------------------------------------- the /v1/check answer

_TRACE = [
    b'{"domain":"t","descriptors":[{"user":"enc-a"}]}',
    b'{"domain":"t","descriptors":[{"user":"enc-a"}]}',
    b'{"domain":"t","descriptors":[{"user":"enc-b","op":"export"}],"cost":2}',
    b'{"domain":"t","descriptors":[{"user":"enc-c","op":"read"}],"cost":0.5}',
    b'{"domain":"t","descriptors":[{"tenant":"enc"},{"user":"vip-1"},{"user":"trial-9"}]}',
    b'{"domain":"t","descriptors":[{"tenant":"enc"},{"user":"enc-d"}]}',
    b'{"domain":"t","descriptors":[{"user":"trial-9"}]}',  # its shadow rule rejects: OK
    b'{"domain":"t","descriptors":[{"entries":[{"key":"user","value":"enc-e"}],"cost":0}]}',
    b'{"domain":"t","key":"k1"}',
    b'{"domain":"nope","descriptors":[{"user":"a"}]}',
]


def _trace_results() -> list[CheckResult]:
    clock = ManualClock(1_000_000.0)
    holder = PolicyHolder(POLICIES)
    engine = Service(holder, MemoryStore(), clock=clock).engine

    async def run() -> list[CheckResult]:
        out = []
        for body in _TRACE * 5:  # the later rounds: counters run down, limits reject
            out.append(await engine.check(*parse_check(body)))
            clock.advance(0.37)
        return out

    return asyncio.run(run())


def test_check_answers_are_the_general_encoding_byte_for_byte() -> None:
    results = _trace_results()
    assert {r.allowed for r in results} == {True, False}  # both paths taken
    assert any(len(r.statuses) > 1 and r.allowed for r in results)
    for r in results:
        assert check_answer(r) == dumps(result_json(r)), r


_floats = st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                    st.floats(0, 1e-3), st.floats(1e15, 1e20), st.sampled_from(
                        [0.0, -0.0, 1e-05, 5e-05, 1e-07, 0.000999928, 1e16, 123456789.123]))


@settings(max_examples=400, deadline=None)
@given(st.integers(0, len(_TRACE) * 5 - 1), st.one_of(st.integers(-10, 10**12), _floats),
       _floats, _floats, st.booleans(), st.integers(0, 10**6),
       st.text(max_size=8), st.sampled_from([math.inf, math.nan, None, 1.0]))
def test_check_answers_with_any_numbers_are_the_general_encoding(
        i: int, remaining: float, reset: float, delay: float, degraded: bool,
        generation: int, domain: str, odd: float | None) -> None:
    r = _RESULTS[i]
    if r.decision is None:
        return
    d = r.decision._replace(remaining=remaining, reset_after=reset, delay=delay)
    statuses = tuple(s._replace(decision=d if s.decision is r.decision else s.decision)
                     for s in r.statuses)
    changed = r._replace(decision=d, statuses=statuses, degraded=degraded,
                         generation=generation, domain=domain or r.domain)
    assert check_answer(changed) == dumps(result_json(changed))
    # A number the reference refuses (or a None it prints as null): the same answer or error.
    weird = changed._replace(decision=d._replace(reset_after=odd))
    try:
        expected = dumps(result_json(weird))
    except (ValueError, TypeError) as e:
        with pytest.raises(type(e)):
            check_answer(weird)
    else:
        assert check_answer(weird) == expected


_RESULTS = _trace_results()


def test_a_parsed_body_is_remembered_and_a_bad_one_is_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    memo = Remembered(_http._parse_check_tuple, size=3, max_len=512)
    monkeypatch.setattr(_http, "parse_check_cached", memo)
    body = b'{"domain":"t","descriptors":[{"user":"p"},{"entries":[{"key":"k","value":"v"}]}]}'
    first = memo(body)
    domain, descriptors, cost = parse_check(body)
    assert first == (domain, tuple(descriptors), cost)
    assert memo(body) is first  # from memory
    for bad in (b'{"domain":"t"', b'{"domain":"t","descriptors":[]}'):
        for _ in range(2):  # each time, with its message
            with pytest.raises(InvalidRequest):
                memo(bad)
    assert len(memo) == 1 and body in memo
    for n in range(10):  # bounded: cleared when full
        memo(b'{"domain":"t","key":"k%d"}' % n)
        assert len(memo) <= 3
    long = b'{"domain":"t","key":"%s"}' % (b"x" * 513)
    memo(long)
    assert long not in memo
