"""Bad requests against the real service, on raw keep-alive connections (http.client,
sockets, grpc): every bad value is a 4xx problem (or INVALID_ARGUMENT) naming the field, the
same connection then serves the next good request, and nothing is logged as a server error.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.service._proc import ServiceProcess
from tests.service.test_http import BAD

POLICIES = Path(__file__).parent / "policies" / "service.toml"
PROBLEM = "application/problem+json"


def post(conn: http.client.HTTPConnection, body: bytes) -> tuple[int, str, dict[str, Any]]:
    conn.request("POST", "/v1/check", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    return r.status, r.getheader("content-type", ""), json.loads(data)


def local_port(conn: http.client.HTTPConnection) -> int:
    assert conn.sock is not None
    port: int = conn.sock.getsockname()[1]
    return port


def server_errors(svc: ServiceProcess, after: int) -> list[dict[str, Any]]:
    return [r for r in svc.records()[after:]
            if r["level"] in ("error", "critical") or "exc" in r]


@pytest.fixture
def conn(service: ServiceProcess) -> Iterator[http.client.HTTPConnection]:
    c = http.client.HTTPConnection("127.0.0.1", service.http_port, timeout=10)
    try:
        yield c
    finally:
        c.close()


# A JSON text may spell a lone UTF-16 surrogate as an escape; Python decodes it into a str
# that cannot be encoded (as UTF-8, a counter key, a Redis key).
SURROGATES: list[tuple[str, bytes, str]] = [
    ("value", b'{"domain": "t", "descriptors": [{"user": "\\ud800"}]}',
     "descriptors[0].entries[0].value"),
    ("key", b'{"domain": "t", "descriptors": [{"\\udc00": "x"}]}',
     "descriptors[0].entries[0].key"),
    ("envoy form value", b'{"domain": "t", "descriptors": [{"entries": '
     b'[{"key": "user", "value": "a\\udfffb"}]}]}', "descriptors[0].entries[0].value"),
    ("second entry", b'{"domain": "t", "descriptors": [{"user": "a", "op": "\\ud83d"}]}',
     "descriptors[0].entries[1].value"),
    ("key shorthand", b'{"domain": "t", "key": "\\ud800"}', "key"),
    ("domain", b'{"domain": "t\\ud800", "key": "a"}', "domain"),
]


@pytest.mark.parametrize(("body", "field"), [s[1:] for s in SURROGATES],
                         ids=[s[0] for s in SURROGATES])
def test_a_lone_surrogate_is_a_400_naming_the_field_and_the_connection_lives_on(
        service: ServiceProcess, conn: http.client.HTTPConnection, uid: str,
        body: bytes, field: str) -> None:
    n = len(service.records())
    good = json.dumps({"domain": "t", "descriptors": [{"user": uid}]}).encode()
    assert post(conn, good)[0] == 200
    port = local_port(conn)

    status, ctype, problem = post(conn, body)
    assert status == 400, problem
    assert ctype == PROBLEM and problem["status"] == 400
    assert problem["detail"].startswith(field + " ") or problem["detail"].startswith(field + ":")
    assert "surrogate" in problem["detail"]

    status, _, out = post(conn, good)  # the same connection, not a new one
    assert status == 200 and out["decision"]["remaining"] == 1
    assert local_port(conn) == port
    assert server_errors(service, n) == []


def test_every_bad_body_keeps_the_connection_and_logs_no_server_error(
        service: ServiceProcess, conn: http.client.HTTPConnection, uid: str) -> None:
    n = len(service.records())
    good = json.dumps({"domain": "t", "descriptors": [{"user": uid}]}).encode()
    assert post(conn, good)[0] == 200
    port = local_port(conn)
    for name, body, status, detail in BAD:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        got, ctype, problem = post(conn, raw)
        assert (got, ctype) == (status, PROBLEM), (name, problem)
        assert detail in problem["detail"], (name, problem)
        assert post(conn, b'{"domain": "t", "descriptors": [{"tenant": "%s"}]}'
                    % uid.encode())[0] == 200, name
        assert local_port(conn) == port, f"{name}: the connection was closed"
    assert server_errors(service, n) == []


WRONG_TYPES: list[tuple[str, object, str]] = [
    ("null value", {"domain": "t", "descriptors": [{"user": None}]},
     "descriptors[0].entries[0].value must be a string"),
    ("list value", {"domain": "t", "descriptors": [{"user": ["a"]}]},
     "descriptors[0].entries[0].value must be a string"),
    ("object value", {"domain": "t", "descriptors": [{"user": {"a": 1}}]},
     "descriptors[0].entries[0].value must be a string"),
    ("boolean value", {"domain": "t", "descriptors": [{"user": True}]},
     "descriptors[0].entries[0].value must be a string"),
    ("number key in envoy form", {"domain": "t", "descriptors": [
        {"entries": [{"key": 1, "value": "a"}]}]}, "descriptors[0].entries[0].key"),
    ("entries not a list", {"domain": "t", "descriptors": [{"entries": "user=a"}]},
     "descriptors[0].entries must be a list"),
    ("number domain", {"domain": 7, "key": "a"}, "domain must be a non-empty string"),
    ("list key", {"domain": "t", "key": ["a"]}, "key must be a non-empty string"),
    ("string body", "just a string", "must be a JSON object"),
    ("null body", None, "must be a JSON object"),
    ("huge value", {"domain": "t", "descriptors": [{"user": "\u00e9" * 1025}]},
     "at most 1024"),
    ("descriptor cost a string", {"domain": "t", "descriptors": [
        {"entries": [{"key": "user", "value": "a"}], "cost": "2"}]},
     "descriptors[0] cost must be a number"),
]


@pytest.mark.parametrize(("body", "detail"), [w[1:] for w in WRONG_TYPES],
                         ids=[w[0] for w in WRONG_TYPES])
def test_wrong_json_types_are_a_400_naming_the_field(
        service: ServiceProcess, conn: http.client.HTTPConnection, body: object,
        detail: str) -> None:
    status, ctype, problem = post(conn, json.dumps(body).encode())
    assert (status, ctype) == (400, PROBLEM), problem
    assert detail in problem["detail"]


def test_non_utf8_bodies_are_a_400(conn: http.client.HTTPConnection) -> None:
    for body in (b'{"domain": "t", "key": "\xff"}', b'{"domain": "t", "key": "\xed\xa0\x80"}',
                 b"\xfe\xff\x00{", "{\"domain\": \"t\", \"key\": \"é\"}".encode("latin-1")):
        status, ctype, problem = post(conn, body)
        assert (status, ctype) == (400, PROBLEM), body
        assert "not valid JSON" in problem["detail"]


def test_control_characters_are_ordinary_values_with_counters_of_their_own(
        conn: http.client.HTTPConnection, uid: str) -> None:
    # Valid Unicode: accepted (Envoy may forward any header value) and %-encoded in keys.
    for value in (f"{uid}\u0000", f"{uid}\n", f"{uid}\u007f", f"{uid}\u2028"):
        status, _, out = post(conn, json.dumps(
            {"domain": "t", "descriptors": [{"user": value}]}).encode())
        assert status == 200 and out["decision"]["remaining"] == 2, value


# -- gRPC: the same class of bad input ---------------------------------------------------------


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([b])
        out += bytes([b | 0x80])


def _field(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + _varint(len(payload)) + payload


def rls_request(domain: bytes, key: bytes, value: bytes) -> bytes:
    """A RateLimitRequest written by hand, so that it can hold bytes no encoder would write:
    domain (1), descriptors (2) -> entries (1) -> key (1), value (2)."""
    entry = _field(0x0A, key) + _field(0x12, value)
    return _field(0x0A, domain) + _field(0x12, _field(0x0A, entry))


@pytest.mark.parametrize(("req", "detail"), [
    (rls_request(b"t", b"user", b"\xed\xa0\x80"), "bad UTF-8"),  # an encoded lone surrogate
    (rls_request(b"t", b"user", b"\xff"), "bad UTF-8"),
    (rls_request(b"t", b"\xc3", b"x"), "bad UTF-8"),
    (rls_request(b"\xffz", b"user", b"x"), "bad UTF-8"),
    (rls_request(b"t", b"user", b"x" * 1025), "descriptors[0].entries[0].value is 1025"),
    (rls_request(b"t", b"k" * 257, b"x"), "descriptors[0].entries[0].key is 257"),
], ids=["surrogate", "invalid byte", "truncated key", "domain", "huge value", "huge key"])
def test_grpc_strings_that_cannot_be_keys_are_invalid_argument_without_traceback(
        service: ServiceProcess, req: bytes, detail: str) -> None:
    n = len(service.records())
    with grpc.insecure_channel(service.grpc) as ch:
        method = ch.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
        with pytest.raises(grpc.RpcError) as info:
            method(req, timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert detail in info.value.details()
        assert method(rls_request(b"t", b"tenant", b"fine"), timeout=10)  # the channel lives
    assert server_errors(service, n) == []


# -- a client that goes away mid-body ----------------------------------------------------------


def test_a_client_disconnecting_mid_body_is_one_debug_record_without_traceback(
        tmp_path: Path) -> None:
    with ServiceProcess(POLICIES, tmp_path / "log", "--log-level", "debug") as svc:
        body = b'{"domain": "t", "descriptors": [{"user": "gone"}]}'
        with socket.create_connection(("127.0.0.1", svc.http_port), timeout=10) as s:
            s.sendall(b"POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body[:len(body) // 2])
        svc.wait_for(lambda r: r.get("event") == "client_disconnected")
        # A later request is answered: the disconnect was handled before the next one.
        conn = http.client.HTTPConnection("127.0.0.1", svc.http_port, timeout=10)
        try:
            assert post(conn, body)[0] == 200
            conn.request("GET", "/metrics")
            metrics = conn.getresponse().read().decode()
        finally:
            conn.close()
    assert 'ratekeeper_requests_total{result="disconnected",transport="http"} 1.0' in metrics
    records = svc.records()
    gone = [r for r in records if r.get("event") == "client_disconnected"]
    assert len(gone) == 1 and gone[0]["level"] == "debug"
    assert [r for r in records if r["level"] in ("warning", "error", "critical")] == []
    assert [r for r in records if "exc" in r or "Traceback" in r["msg"]] == []
