"""Envoy's rate limit protocol against the real service, over real gRPC on loopback.

Requests are built and responses read with the `envoy-data-plane` package's message classes
(betterproto2, an encoding written independently of ours) and sent as raw bytes through a
plain grpc channel, exactly as an Envoy would send them; our generated stubs are only
cross-checked against them at the end.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator

import grpc
import httpx
import pytest

from ratekeeper.service.proto.envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
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
        assert st.current_limit.name == "t.user"
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
    assert tenant.current_limit is not None and tenant.current_limit.name == "t.per-tenant"
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


def test_limit_override_from_envoy(call: Call, uid: str) -> None:
    d = descriptor(("generic_key", uid), override=(2, RateLimitUnit.HOUR))
    codes = [call(RateLimitRequest(domain="t", descriptors=[d])) for _ in range(3)]
    assert [r.overall_code for r in codes] == [OK, OK, OVER]
    lim = codes[0].statuses[0].current_limit
    assert lim is not None and lim.requests_per_unit == 2
    assert lim.unit == RateLimitResponseRateLimitUnit.HOUR
    assert lim.name == "t.override/hour"
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
    ("unknown domain", RateLimitRequest(domain="nope", descriptors=[descriptor(("user", "x"))]),
     "unknown domain 'nope'"),
    ("descriptor without entries", RateLimitRequest(domain="t", descriptors=[descriptor()]),
     "descriptors[0] has no entries"),
    ("empty entry key", RateLimitRequest(domain="t", descriptors=[descriptor(("", "x"))]),
     "key must be a non-empty string"),
    ("hits over max_cost", RateLimitRequest(domain="t", descriptors=[descriptor(("user", "x"))],
                                            hits_addend=UINT32_MAX), "max_cost"),
    ("descriptor hits 0", RateLimitRequest(domain="t", descriptors=[
        descriptor(("user", "x"), hits=0)]), "finite number above 0"),
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
    assert again.statuses[0].current_limit.name == "t.user"
