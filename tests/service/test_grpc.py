"""Envoy's rate limit protocol against the real service, over real gRPC on loopback.

Requests are built and responses read with the `envoy-data-plane` package's message classes
(betterproto2, an encoding written independently of ours) and sent as raw bytes through a
plain grpc channel, exactly as an Envoy would send them; our generated stubs are only
cross-checked against them at the end.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable, Iterator

import grpc
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.policy._engine import InvalidRequest
from ratekeeper.policy._envoy_config import parse_envoy_config
from ratekeeper.policy._loader import parse_policies_text
from ratekeeper.service import Engine, UnknownDomain, _grpc
from ratekeeper.service._grpc import LimitHeaders, parse_request, response_for
from ratekeeper.service._service import Remembered
from ratekeeper.service.proto.envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.testing import ManualClock
from tests.service._envoy import (
    METHOD,
    RateLimitRequest,
    RateLimitResponse,
    RateLimitResponseCode,
    RateLimitResponseRateLimitUnit,
    RateLimitUnit,
    descriptor,
)
from tests.service._proc import ServiceProcess

OK = RateLimitResponseCode.OK
OVER = RateLimitResponseCode.OVER_LIMIT
UINT32_MAX = 2**32 - 1

Call = Callable[[RateLimitRequest], RateLimitResponse]


@pytest.fixture(scope="module")
def channel(service: ServiceProcess) -> Iterator[grpc.Channel]:
    ch = grpc.insecure_channel(service.grpc)
    try:
        grpc.channel_ready_future(ch).result(timeout=10)
        yield ch
    finally:
        ch.close()


@pytest.fixture(scope="module")
def raw(channel: grpc.Channel) -> Callable[[bytes], bytes]:
    """The method as Envoy calls it: bytes in, bytes out (no serializer of ours)."""
    method = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)

    def call(data: bytes) -> bytes:
        out: bytes = method(data, timeout=10)
        return out

    return call


@pytest.fixture(scope="module")
def call(raw: Callable[[bytes], bytes]) -> Call:
    def do(req: RateLimitRequest) -> RateLimitResponse:
        return RateLimitResponse.parse(raw(bytes(req)))

    return do


def headers(resp: RateLimitResponse) -> dict[str, str]:
    return {h.key: h.value for h in resp.response_headers_to_add}


def test_decisions_statuses_and_headers(call: Call, uid: str) -> None:
    req = RateLimitRequest(domain="t", descriptors=[descriptor(("user", uid))])
    for remaining in (2, 1, 0):
        resp = call(req)
        assert resp.overall_code == OK
        (st,) = resp.statuses
        assert st.code == OK and st.limit_remaining == remaining
        assert st.current_limit is not None
        assert st.current_limit.requests_per_unit == 3
        assert st.current_limit.unit == RateLimitResponseRateLimitUnit.HOUR
        assert st.current_limit.name == ""  # the policies give this limit no name
        assert st.duration_until_reset is not None
        assert datetime.timedelta(0) < st.duration_until_reset <= datetime.timedelta(hours=1)
        h = headers(resp)
        assert h["RateLimit-Policy"] == '"t.user";q=3;w=3600'
        assert h["RateLimit"].startswith(f'"t.user";r={remaining};t=')
        assert "Retry-After" not in h
    resp = call(req)
    assert resp.overall_code == OVER
    assert resp.statuses[0].code == OVER and resp.statuses[0].limit_remaining == 0
    h = headers(resp)
    assert 1 <= int(h["Retry-After"]) <= 3600 and h["Cache-Control"] == "no-store"


def test_a_fixed_window_that_charged_nothing_resets_at_the_windows_end_over_grpc(
        call: Call, uid: str) -> None:
    # The real service (memory store, on Unix time): 5 asked of 3/hour charges nothing, and
    # the reset is still the Go service's unit - now % unit, read against the clock.
    before = int(time.time())
    resp = call(RateLimitRequest(domain="t", descriptors=[descriptor(("user", uid))],
                                 hits_addend=5))
    after = int(time.time())
    assert resp.statuses[0].code == OVER
    assert resp.statuses[0].duration_until_reset is not None
    assert resp.statuses[0].duration_until_reset.seconds in {
        3600 - now % 3600 for now in range(before, after + 1)}


def test_one_status_per_descriptor_in_request_order(call: Call, uid: str) -> None:
    resp = call(RateLimitRequest(domain="t", descriptors=[
        descriptor(("user", f"vip-{uid}")),       # unlimited
        descriptor(("nothing", "matches")),       # no rule
        descriptor(("tenant", uid)),              # gcra 2/hour burst 5 + a global limit
        descriptor(("user", f"trial-{uid}")),     # shadow mode
    ]))
    assert resp.overall_code == OK
    unlimited, unmatched, tenant, trial = resp.statuses
    assert unlimited.code == OK and unlimited.limit_remaining == UINT32_MAX
    assert unlimited.current_limit is None
    assert unmatched.code == OK and unmatched.current_limit is None
    assert unmatched.limit_remaining == 0
    assert tenant.code == OK and tenant.limit_remaining == 4
    assert tenant.current_limit is not None and tenant.current_limit.name == "per-tenant"
    assert tenant.current_limit.requests_per_unit == 2
    assert tenant.current_limit.unit == RateLimitResponseRateLimitUnit.HOUR
    assert trial.code == OK
    # The shadow rule would reject now, and still answers OK.
    again = call(RateLimitRequest(domain="t", descriptors=[descriptor(("user", f"trial-{uid}"))]))
    assert again.overall_code == OK and again.statuses[0].code == OK
    assert again.statuses[0].limit_remaining == 0
    assert headers(again) == {}


def test_hits_addend_request_and_descriptor_level(call: Call, uid: str) -> None:
    resp = call(RateLimitRequest(domain="t", descriptors=[descriptor(("user", uid))],
                                 hits_addend=2))
    assert resp.statuses[0].limit_remaining == 1
    # The descriptor's own hits_addend wins over the request's.
    resp = call(RateLimitRequest(domain="t", descriptors=[
        descriptor(("user", uid), ("op", "export"), hits=3)], hits_addend=7))
    assert resp.statuses[0].limit_remaining == 70  # 100 - 3 x rule cost 10
    resp = call(RateLimitRequest(domain="t", descriptors=[descriptor(("user", uid))],
                                 hits_addend=2))
    assert resp.overall_code == OVER  # 1 left, 2 asked: nothing charged
    resp = call(RateLimitRequest(domain="t", descriptors=[descriptor(("user", uid))]))
    assert resp.overall_code == OK and resp.statuses[0].limit_remaining == 0


def test_an_unknown_domain_and_an_empty_descriptor_are_ok_over_grpc(call: Call) -> None:
    # envoyproxy/ratelimit: no limits for an unknown domain or an entry-less descriptor
    # (test/config/config_test.go, TestBasicConfig).
    for req in (RateLimitRequest(domain="nope", descriptors=[descriptor(("user", "x"))]),
                RateLimitRequest(domain="t", descriptors=[descriptor()])):
        resp = call(req)
        assert resp.overall_code == OK
        assert resp.statuses[0].code == OK and resp.statuses[0].current_limit is None


def test_limit_override_from_envoy(call: Call, uid: str) -> None:
    d = descriptor(("generic_key", uid), override=(2, RateLimitUnit.HOUR))
    codes = [call(RateLimitRequest(domain="t", descriptors=[d])) for _ in range(3)]
    assert [r.overall_code for r in codes] == [OK, OK, OVER]
    lim = codes[0].statuses[0].current_limit
    assert lim is not None and lim.requests_per_unit == 2
    assert lim.unit == RateLimitResponseRateLimitUnit.HOUR
    assert lim.name == ""  # as envoyproxy/ratelimit names no override
    zero = descriptor(("generic_key", uid + "z"), override=(0, RateLimitUnit.SECOND))
    resp = call(RateLimitRequest(domain="t", descriptors=[zero]))
    assert resp.overall_code == OVER


def test_grpc_and_http_share_the_same_counters(call: Call, service: ServiceProcess,
                                               uid: str) -> None:
    call(RateLimitRequest(domain="t", descriptors=[descriptor(("user", uid))]))
    out = httpx.post(f"{service.http}/v1/check", json={"domain": "t", "descriptors": [
        {"user": uid}]}, timeout=10).json()
    assert out["decision"]["remaining"] == 1


INVALID = [
    ("empty domain", RateLimitRequest(domain="", descriptors=[descriptor(("user", "x"))]),
     "domain must not be empty"),
    ("no descriptors", RateLimitRequest(domain="t", descriptors=[]),
     "descriptor list must not be empty"),
    ("empty entry key", RateLimitRequest(domain="t", descriptors=[descriptor(("", "x"))]),
     "key must be a non-empty string"),
    ("hits over max_cost", RateLimitRequest(domain="t", descriptors=[descriptor(("user", "x"))],
                                            hits_addend=UINT32_MAX), "max_cost"),
    ("descriptor hits 2^64-1", RateLimitRequest(domain="t", descriptors=[
        descriptor(("user", "x"), hits=2**64 - 1)]), "max_cost"),
    ("override of unknown unit", RateLimitRequest(domain="t", descriptors=[
        descriptor(("user", "x"), override=(5, RateLimitUnit.UNKNOWN))]), "not a known unit"),
]


@pytest.mark.parametrize(("req", "detail"), [c[1:] for c in INVALID],
                         ids=[c[0] for c in INVALID])
def test_invalid_requests_are_invalid_argument(raw: Callable[[bytes], bytes],
                                               req: RateLimitRequest, detail: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        raw(bytes(req))
    err = info.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert detail in err.details()


def test_negative_hits_are_refused(raw: Callable[[bytes], bytes]) -> None:
    d = descriptor(("user", "x"), hits=1)
    d.is_negative_hits = True
    with pytest.raises(grpc.RpcError) as info:
        raw(bytes(RateLimitRequest(domain="t", descriptors=[d])))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "is_negative_hits" in info.value.details()


def test_garbage_and_huge_messages_do_not_hurt(raw: Callable[[bytes], bytes], call: Call,
                                               uid: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        raw(b"\xff\xff\xff\xff not a protobuf")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a RateLimitRequest" in info.value.details()
    huge = RateLimitRequest(domain="t", descriptors=[descriptor(("user", "x" * 100_000))])
    with pytest.raises(grpc.RpcError) as info:
        raw(bytes(huge))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    resp = call(RateLimitRequest(domain="t", descriptors=[descriptor(("user", uid))]))
    assert resp.overall_code == OK


def test_our_generated_stubs_agree_with_the_independent_encoding(
        channel: grpc.Channel, call: Call, uid: str) -> None:
    ours = rls_pb2.RateLimitRequest(domain="t", hits_addend=2)
    d = ours.descriptors.add()
    d.entries.add(key="user", value=uid)
    d.hits_addend.value = 1
    theirs = RateLimitRequest.parse(ours.SerializeToString())
    assert theirs.domain == "t" and theirs.hits_addend == 2
    assert [(e.key, e.value) for e in theirs.descriptors[0].entries] == [("user", uid)]
    assert theirs.descriptors[0].hits_addend == 1
    assert rls_pb2.RateLimitRequest.FromString(bytes(theirs)) == ours

    stub = rls_pb2_grpc.RateLimitServiceStub(channel)
    resp = stub.ShouldRateLimit(ours, timeout=10)
    assert resp.overall_code == rls_pb2.RateLimitResponse.OK
    assert resp.statuses[0].limit_remaining == 2
    assert resp.statuses[0].current_limit.unit == rls_pb2.RateLimitResponse.RateLimit.HOUR
    # The same answer, read by the other encoding.
    again = RateLimitResponse.parse(resp.SerializeToString())
    assert again.statuses[0].limit_remaining == 2
    assert again.statuses[0].current_limit is not None
    assert again.statuses[0].current_limit.requests_per_unit == 3


# -- Envoy's semantics, in process on a ManualClock: our rls_pb2 in the middle, the
# -- independent encoding on both ends ----------------------------------------------------------

SEMANTICS = """
[service]
{service}

[domains.g.limits.per-minute]
rate = "60/minute"

[[domains.g.descriptors]]
key = "named"
limits = ["per-minute"]

[[domains.g.descriptors]]
key = "anon"
limits = [{{ rate = "60/minute" }}]

[[domains.g.descriptors]]
key = "unit"
  [[domains.g.descriptors.descriptors]]
  key = "u"
  value = "second"
  limits = [{{ rate = "10/s" }}]
  [[domains.g.descriptors.descriptors]]
  key = "u"
  value = "hour"
  limits = [{{ rate = "50/hour" }}]
  [[domains.g.descriptors.descriptors]]
  key = "u"
  value = "day"
  limits = [{{ rate = "1000/day" }}]
  [[domains.g.descriptors.descriptors]]
  key = "u"
  value = "week"
  limits = [{{ rate = "1/week" }}]
  [[domains.g.descriptors.descriptors]]
  key = "u"
  value = "month"
  limits = [{{ rate = "5/month" }}]
  [[domains.g.descriptors.descriptors]]
  key = "u"
  value = "year"
  limits = [{{ rate = "100/year" }}]
  [[domains.g.descriptors.descriptors]]
  key = "u"
  value = "odd"
  limits = [{{ algorithm = "gcra", rate = "3/2s" }}]

[[domains.g.descriptors]]
key = "user"
limits = [{{ rate = "3/hour" }}]

[[domains.g.descriptors]]
key = "trial"
shadow_mode = true
limits = [{{ rate = "1/hour" }}]
"""


class InProcess:
    """An engine on a ManualClock behind our gRPC request parser and response builder."""

    def __init__(self, service: str = "") -> None:
        snap = parse_policies_text(SEMANTICS.format(service=service))
        self.clock = ManualClock()
        self.engine = Engine(lambda: snap, MemoryStore(), clock=self.clock)

    def __call__(self, req: RateLimitRequest) -> RateLimitResponse:
        ours = rls_pb2.RateLimitRequest.FromString(bytes(req))
        res = asyncio.run(self.engine.check(*parse_request(ours)))
        # As the servicer: the engine's clock after the check.
        return RateLimitResponse.parse(
            response_for(res, now=self.clock()).SerializeToString())


def one(call: Callable[[RateLimitRequest], RateLimitResponse], *entries: tuple[str, str],
        hits_addend: int = 0) -> RateLimitResponse:
    return call(RateLimitRequest(domain="g", descriptors=[descriptor(*entries)],
                                 hits_addend=hits_addend))


Unit = RateLimitResponseRateLimitUnit


@pytest.mark.parametrize(("value", "rpu", "unit"), [
    ("second", 10, Unit.SECOND), ("hour", 50, Unit.HOUR), ("day", 1000, Unit.DAY),
    ("week", 1, Unit.WEEK), ("month", 5, Unit.MONTH), ("year", 100, Unit.YEAR),
    ("odd", 90, Unit.MINUTE),  # no Envoy unit is 2 s: the smallest with a whole number
])
def test_current_limit_is_in_the_configured_unit(value: str, rpu: int, unit: Unit) -> None:
    # envoyproxy/ratelimit answers the configured requests_per_unit and unit as they are
    # (test/redis/fixed_cache_impl_test.go, TestRedis: CurrentLimit: limits[0].Limit).
    st = one(InProcess(), ("unit", "x"), ("u", value)).statuses[0]
    assert st.current_limit is not None
    assert (st.current_limit.requests_per_unit, st.current_limit.unit) == (rpu, unit)


def test_sixty_per_minute_is_sixty_per_minute_not_one_per_second() -> None:
    st = one(InProcess(), ("anon", "a")).statuses[0]
    assert st.current_limit is not None
    assert (st.current_limit.requests_per_unit, st.current_limit.unit) == (60, Unit.MINUTE)
    assert st.limit_remaining == 59


def test_current_limit_name_only_when_the_config_names_the_limit() -> None:
    # envoyproxy/ratelimit's current_limit.name is the config's rate_limit.name, "" when the
    # config gives none (src/config/config_impl.go, NewRateLimit; overrides pass "").
    call = InProcess()
    named = one(call, ("named", "a")).statuses[0].current_limit
    anon = one(call, ("anon", "a")).statuses[0].current_limit
    override = call(RateLimitRequest(domain="g", descriptors=[
        descriptor(("anon", "o"), override=(7, RateLimitUnit.DAY))])).statuses[0].current_limit
    assert named is not None and named.name == "per-minute"
    assert anon is not None and anon.name == ""
    assert override is not None and override.name == ""
    assert (override.requests_per_unit, override.unit) == (7, Unit.DAY)


@pytest.mark.parametrize(("now", "seconds"), [(90.25, 30), (120.0, 60), (179.999, 1)])
def test_duration_until_reset_is_whole_seconds_as_envoy_ratelimit(now: float,
                                                                  seconds: int) -> None:
    # envoyproxy/ratelimit: unit - now % unit on whole Unix seconds (src/utils/utilities.go,
    # CalculateReset), so a minute window at t=90.25 resets in 30 s, at t=120 in 60 s.
    call = InProcess()
    call.clock.set(now)
    st = one(call, ("anon", "a")).statuses[0]
    assert st.duration_until_reset == datetime.timedelta(seconds=seconds)


def test_a_fixed_window_that_charged_nothing_reports_the_time_to_the_windows_end() -> None:
    # envoyproxy/ratelimit gives every status with a limit duration_until_reset =
    # unit - now % unit (src/limiter/base_limiter.go, generateResponseDescriptorStatus ->
    # utils.CalculateReset), charged or not. A cost above the whole limit charges nothing
    # in the window, and its answer said 0 s.
    call = InProcess()
    call.clock.set(90.25)
    over = one(call, ("user", "fresh"), hits_addend=5).statuses[0]  # 5 asked of 3/hour
    assert over.code == OVER
    assert over.duration_until_reset == datetime.timedelta(seconds=3600 - 90)
    # The same through an Envoy override (a fixed window of its own), and a look (hits 0).
    r = call(RateLimitRequest(domain="g", descriptors=[
        descriptor(("anon", "o"), override=(2, RateLimitUnit.MINUTE), hits=3),
        descriptor(("anon", "p"), hits=0)]))
    assert [s.duration_until_reset for s in r.statuses] == [datetime.timedelta(seconds=30)] * 2


def test_over_limit_statuses_report_no_remaining() -> None:
    # envoyproxy/ratelimit: an OVER_LIMIT status has limit_remaining 0
    # (test/limiter/base_limiter_test.go, TestGetResponseStatusOverLimit).
    call = InProcess()
    assert one(call, ("user", "u"), hits_addend=2).statuses[0].limit_remaining == 1
    over = one(call, ("user", "u"), hits_addend=2)  # 2 asked, 1 left: rejected
    assert over.overall_code == OVER
    assert over.statuses[0].code == OVER and over.statuses[0].limit_remaining == 0
    assert one(call, ("user", "u")).statuses[0].limit_remaining == 0  # the 1 was still there


def test_an_unknown_domain_is_ok_with_no_limit() -> None:
    # envoyproxy/ratelimit: GetLimit on an unknown domain is nil, so every descriptor is OK
    # without a limit (test/config/config_test.go, TestBasicConfig: "foo_domain").
    resp = InProcess()(RateLimitRequest(domain="nope", descriptors=[
        descriptor(("user", "u")), descriptor(("anon", "a"))]))
    assert resp.overall_code == OK
    assert [(s.code, s.current_limit, s.limit_remaining) for s in resp.statuses] == \
        [(OK, None, 0), (OK, None, 0)]
    assert resp.response_headers_to_add == []


def test_unknown_domain_error_is_a_strict_option() -> None:
    with pytest.raises(UnknownDomain, match="unknown domain 'nope'"):
        InProcess('unknown_domain = "error"')(
            RateLimitRequest(domain="nope", descriptors=[descriptor(("user", "u"))]))


def test_a_descriptor_without_entries_is_ok_with_no_limit() -> None:
    # envoyproxy/ratelimit: GetLimit on a descriptor with no entries is nil
    # (test/config/config_test.go, TestBasicConfig: GetLimit("test-domain", {})).
    resp = InProcess()(RateLimitRequest(domain="g", descriptors=[descriptor(),
                                                                 descriptor(("user", "u"))]))
    assert resp.overall_code == OK
    assert resp.statuses[0].code == OK and resp.statuses[0].current_limit is None
    assert resp.statuses[1].limit_remaining == 2


def test_global_shadow_mode_answers_ok_and_keeps_each_descriptor_status() -> None:
    # test/service/ratelimit_test.go, TestServiceGlobalShadowMode: overall OK, the
    # descriptor over its limit still says OVER_LIMIT (remaining 0), the other OK.
    call = InProcess("shadow_mode = true")
    for _ in range(3):
        assert one(call, ("user", "u")).overall_code == OK
    resp = call(RateLimitRequest(domain="g", descriptors=[descriptor(("user", "u")),
                                                          descriptor(("nothing", "x"))]))
    assert resp.overall_code == OK
    over, unmatched = resp.statuses
    assert over.code == OVER and over.limit_remaining == 0 and over.current_limit is not None
    assert unmatched.code == OK and unmatched.current_limit is None


def test_global_shadow_mode_still_sends_the_rate_limit_headers() -> None:
    # src/service/ratelimit.go, shouldRateLimitWorker: the headers are built from the
    # descriptor statuses (the one closest to its limit; an OVER_LIMIT one over any) before
    # global shadow mode turns the overall code to OK, so a client still sees its quota.
    call = InProcess("shadow_mode = true")
    for left in (2, 1, 0):
        h = headers(one(call, ("user", "u")))
        assert h["RateLimit-Policy"] == '"g.user";q=3;w=3600'
        assert h["RateLimit"] == f'"g.user";r={left};t=3600'  # the clock is at 0
    over = one(call, ("user", "u"))
    assert over.overall_code == OK
    # The descriptor over its limit is the one reported, with nothing left; the request
    # passes, so there is no Retry-After.
    assert headers(over) == {"RateLimit-Policy": '"g.user";q=3;w=3600',
                             "RateLimit": '"g.user";r=0;t=3600'}
    # Of two descriptors, the one closest to its limit (one left of 60/minute's would be 59).
    both = call(RateLimitRequest(domain="g", descriptors=[descriptor(("anon", "a")),
                                                          descriptor(("user", "v"))]))
    assert headers(both)["RateLimit"] == '"g.user";r=2;t=3600'


def test_global_shadow_mode_sends_envoy_ratelimits_headers_by_name_too() -> None:
    call = InProcess("shadow_mode = true")

    def limit_headers(req: RateLimitRequest) -> dict[str, str]:
        ours = rls_pb2.RateLimitRequest.FromString(bytes(req))
        res = asyncio.run(call.engine.check(*parse_request(ours)))
        return {h.key: h.value for h in response_for(res, LimitHeaders()).response_headers_to_add}

    for _ in range(3):
        limit_headers(RateLimitRequest(domain="g", descriptors=[descriptor(("user", "u"))]))
    assert limit_headers(RateLimitRequest(domain="g", descriptors=[
        descriptor(("anon", "a")), descriptor(("user", "u"))])) == {
        "RateLimit-Limit": "3", "RateLimit-Remaining": "0", "RateLimit-Reset": "3600"}


def test_a_shadow_rule_says_ok_and_an_enforced_one_still_rejects() -> None:
    # test/service/ratelimit_test.go, TestMixedRuleShadowMode: the shadow-mode descriptor is
    # OK, the enforced one over its limit makes the answer OVER_LIMIT.
    call = InProcess()
    for _ in range(3):
        one(call, ("user", "u"))
    one(call, ("trial", "t"))
    resp = call(RateLimitRequest(domain="g", descriptors=[descriptor(("trial", "t")),
                                                          descriptor(("user", "u"))]))
    assert resp.overall_code == OVER
    assert [s.code for s in resp.statuses] == [OK, OVER]


def test_hits_addend_as_envoy_ratelimit_reads_it() -> None:
    # src/utils/utilities.go, GetHitsAddends: a descriptor's hits_addend that is set, even to
    # 0, is used as is (0: check, charge nothing); unset, the request's, where 0 means 1
    # (test/redis/fixed_cache_impl_test.go, TestRedis: per-descriptor hits_addend 0).
    call = InProcess()
    r = call(RateLimitRequest(domain="g", descriptors=[descriptor(("user", "u"), hits=0)],
                              hits_addend=2))
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 3  # nothing charged
    assert one(call, ("user", "u")).statuses[0].limit_remaining == 2  # request 0: 1 hit
    r = call(RateLimitRequest(domain="g", descriptors=[
        descriptor(("user", "u"), hits=0), descriptor(("user", "v"))], hits_addend=2))
    assert [s.limit_remaining for s in r.statuses] == [2, 1]  # unset: the request's 2
    r = call(RateLimitRequest(domain="g", descriptors=[descriptor(("user", "u"), hits=2)]))
    assert r.statuses[0].limit_remaining == 0
    r = call(RateLimitRequest(domain="g", descriptors=[descriptor(("user", "u"), hits=0)]))
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 0  # full: still OK
    assert one(call, ("user", "u")).overall_code == OVER


def test_a_message_is_parsed_once_and_a_bad_one_each_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    memo = Remembered(_grpc._parse_bytes, size=3, max_len=512)
    monkeypatch.setattr(_grpc, "parse_cached", memo)
    ours = rls_pb2.RateLimitRequest(domain="g", hits_addend=2)
    ours.descriptors.add().entries.add(key="user", value="p")
    data = ours.SerializeToString()
    first = memo(data)
    domain, descriptors, hits = parse_request(ours)
    assert first == (domain, tuple(descriptors), hits) == ("g", first[1], 2.0)
    assert memo(data) is first  # from memory
    empty = rls_pb2.RateLimitRequest(domain="g").SerializeToString()
    for bad, why in ((b"\xff\xff not a protobuf", "not a RateLimitRequest"),
                     (empty, "must not be empty")):
        for _ in range(2):  # refused each time, with its reason
            with pytest.raises(InvalidRequest, match=why):
                memo(bad)
    assert len(memo) == 1 and data in memo
    for n in range(10):  # bounded: cleared when full
        other = rls_pb2.RateLimitRequest(domain="g")
        other.descriptors.add().entries.add(key="k", value=str(n))
        memo(other.SerializeToString())
        assert len(memo) <= 3


_CODES = st.sampled_from([rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT])
_STATUS = st.tuples(
    _CODES,
    st.none() | st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 7), st.text(max_size=8)),
    st.integers(0, 2**32 - 1), st.none() | st.integers(0, 10**9))
_HEADER = st.tuples(st.text(min_size=1, max_size=10), st.text(max_size=20))


@settings(max_examples=300, deadline=None)
@given(st.tuples(_CODES, st.lists(_STATUS, max_size=4).map(tuple),
                 st.lists(_HEADER, max_size=3).map(tuple)))
def test_a_remembered_answer_is_the_messages_own_bytes(parts: _grpc.ResponseParts) -> None:
    expected = _grpc.response_of(parts).SerializeToString()
    assert _grpc.response_bytes(parts) == expected
    assert _grpc.response_bytes(parts) == expected  # the remembered one too
    back = rls_pb2.RateLimitResponse.FromString(expected)
    assert [(s.code, s.limit_remaining) for s in back.statuses] == [
        (s[0], s[2]) for s in parts[1]]
    assert [(h.key, h.value) for h in back.response_headers_to_add] == list(parts[2])


class InProcessYaml(InProcess):
    """`InProcess` on an envoyproxy/ratelimit YAML config (and Envoy overrides allowed)."""

    def __init__(self, text: str) -> None:
        snap = parse_envoy_config([("inline.yaml", text)])
        self.clock = ManualClock(1_700_000_000.0)  # Unix time: windows end on the minute
        self.engine = Engine(lambda: snap, MemoryStore(), clock=self.clock)


def test_zero_requests_per_unit_names_its_limit_and_the_window_end_as_the_go_service() -> None:
    # envoyproxy/ratelimit src/limiter/base_limiter.go GetResponseDescriptorStatus: a limit
    # of 0 requests per unit is over (0 > 0 is false only for 0 hits) and its status still
    # carries current_limit {0, unit, name}, limit_remaining 0 and CalculateReset's
    # `unit - now % unit`.
    call = InProcessYaml("domain: g\ndescriptors:\n  - key: blocked\n    rate_limit:\n"
                         "      unit: minute\n      requests_per_unit: 0\n"
                         "      name: nobody\n")
    call.clock.set(1_700_000_000.0 + 17.5)  # 1_700_000_000 is 20 s into its minute
    resp = one(call, ("blocked", "x"))
    st = resp.statuses[0]
    assert resp.overall_code == OVER and st.code == OVER
    assert (st.current_limit.requests_per_unit, st.current_limit.unit,
            st.current_limit.name) == (0, Unit.MINUTE, "nobody")
    assert st.limit_remaining == 0
    assert st.duration_until_reset == datetime.timedelta(seconds=60 - 37)
    # 0 hits: a look, OK (0 > 0 is false), with the same limit and reset.
    look = call(RateLimitRequest(domain="g", descriptors=[
        descriptor(("blocked", "x"), hits=0)]))
    assert look.overall_code == OK and look.statuses[0].code == OK
    assert look.statuses[0].current_limit.unit == Unit.MINUTE
    assert look.statuses[0].duration_until_reset == datetime.timedelta(seconds=23)
    # An Envoy override of 0 per hour: the same, in its unit (no name: an override has none).
    over = call(RateLimitRequest(domain="g", descriptors=[
        descriptor(("any", "y"), override=(0, Unit.HOUR))]))
    ost = over.statuses[0]
    assert over.overall_code == OVER
    assert (ost.current_limit.requests_per_unit, ost.current_limit.unit,
            ost.current_limit.name) == (0, Unit.HOUR, "")
    assert ost.duration_until_reset == datetime.timedelta(seconds=3600 - 1_700_000_017 % 3600)


def test_zero_requests_per_unit_in_shadow_mode_is_answered_ok_as_the_go_service() -> None:
    # base_limiter.go GetResponseDescriptorStatus: over the limit, then OK in shadow mode (a
    # rule's own shadow_mode); global shadow mode keeps the descriptor's OVER_LIMIT and
    # answers OK overall, as for any limit.
    call = InProcessYaml("domain: g\ndescriptors:\n  - key: blocked\n    shadow_mode: true\n"
                         "    rate_limit:\n      unit: minute\n      requests_per_unit: 0\n")
    resp = one(call, ("blocked", "x"))
    assert resp.overall_code == OK and resp.statuses[0].code == OK
    assert resp.statuses[0].current_limit.unit == Unit.MINUTE
    shadowed = InProcess("shadow_mode = true")
    over = shadowed(RateLimitRequest(domain="g", descriptors=[
        descriptor(("any", "y"), override=(0, Unit.HOUR))]))
    assert over.overall_code == OK and over.statuses[0].code == OVER
