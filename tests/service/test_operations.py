"""The service's operational surface, against real ``ratekeeper serve`` processes on loopback:
the gRPC health service, HTTP ``/healthcheck``, gRPC reflection, TLS and mTLS on the gRPC
listener, unix-socket listeners."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from ratekeeper.policy._loader import parse_policies_text
from ratekeeper.service import Engine
from ratekeeper.service._grpc import LimitHeaders, parse_request, response_for
from ratekeeper.service.proto.envoy.service.ratelimit.v3 import rls_pb2
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.testing import ManualClock
from tests.servers import RedisServer
from tests.service._envoy import (
    METHOD,
    RateLimitRequest,
    RateLimitResponse,
    RateLimitResponseCode,
    descriptor,
)
from tests.service._proc import ServiceProcess, run_cli
from tests.service.conftest import POLICIES

RLS = "envoy.service.ratelimit.v3.RateLimitService"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def own(tmp_path: Path) -> Iterator[list[ServiceProcess]]:
    """Services a test starts itself (stopped, by pid, at the end)."""
    procs: list[ServiceProcess] = []
    try:
        yield procs
    finally:
        for p in procs:
            p.stop()


def _health(target: str) -> tuple[grpc.Channel, health_pb2_grpc.HealthStub]:
    ch = grpc.insecure_channel(target)
    grpc.channel_ready_future(ch).result(timeout=10)
    return ch, health_pb2_grpc.HealthStub(ch)


def _check(stub: health_pb2_grpc.HealthStub, name: str) -> int:
    status: int = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status
    return status


# -- gRPC health ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["", RLS, "ratelimit"])
def test_grpc_health_serves_each_name_while_the_store_answers(service: ServiceProcess,
                                                              name: str) -> None:
    ch, stub = _health(service.grpc)
    with ch:
        assert _check(stub, name) == SERVING


def test_grpc_health_of_an_unknown_service_name_is_not_found(service: ServiceProcess) -> None:
    ch, stub = _health(service.grpc)
    with ch, pytest.raises(grpc.RpcError) as e:
        _check(stub, "no.such.Service")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_grpc_health_serves_while_the_store_is_down_as_envoy_ratelimits_default(
        tmp_path: Path, own: list[ServiceProcess]) -> None:
    """envoyproxy/ratelimit src/settings/settings.go: REDIS_HEALTH_CHECK_ACTIVE_CONNECTION
    defaults to false, so its health stays SERVING with Redis down (issue 32 item 6): the
    failure policy answers the checks meanwhile. /healthcheck says OK too; /readyz, which
    asks the store, says 503."""
    redis = RedisServer("redis")  # nothing listens on its port
    svc = ServiceProcess(POLICIES, tmp_path / "svc.log", "--store", redis.url)
    own.append(svc.start())
    ch, stub = _health(svc.grpc)
    with ch:
        for name in ("", RLS):
            assert _check(stub, name) == SERVING
    r = httpx.get(f"{svc.http}/healthcheck", timeout=10)
    assert (r.status_code, r.text) == (200, "OK")
    assert httpx.get(f"{svc.http}/readyz", timeout=10).status_code == 503


def test_grpc_health_is_not_serving_until_the_store_answers(
        tmp_path: Path, own: list[ServiceProcess]) -> None:
    redis = RedisServer("redis")  # its port is chosen, nothing listens there yet
    svc = ServiceProcess(POLICIES, tmp_path / "svc.log", "--store", redis.url,
                         "--health-checks-store")
    own.append(svc.start())
    ch, stub = _health(svc.grpc)
    with ch:
        for name in ("", RLS):
            assert _check(stub, name) == NOT_SERVING
    # (The channel is closed first: forking redis-server while grpc's threads run aborts it.)
    redis.start()
    try:
        ch, stub = _health(svc.grpc)
        with ch:
            watch = stub.Watch(health_pb2.HealthCheckRequest(service=RLS), timeout=30)
            # NOT_SERVING until the next probe finds the store, then SERVING: at most two.
            seen = [next(watch).status]
            if seen[0] != SERVING:
                seen.append(next(watch).status)
            watch.cancel()
            assert seen[-1] == SERVING and seen[0] in (NOT_SERVING, SERVING)
            assert _check(stub, "") == SERVING
    finally:
        redis.stop()


def test_grpc_health_watch_turns_not_serving_when_shutdown_begins(
        tmp_path: Path, own: list[ServiceProcess]) -> None:
    svc = ServiceProcess(POLICIES, tmp_path / "svc.log", "--grace", "5")
    own.append(svc.start())
    ch, stub = _health(svc.grpc)
    with ch:
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
        assert next(watch).status == SERVING
        svc.send(signal.SIGTERM)
        assert next(watch).status == NOT_SERVING
    assert svc.stop() == 0


# -- HTTP /healthcheck ------------------------------------------------------------------------

def test_healthcheck_answers_ok_as_envoy_ratelimit(service: ServiceProcess) -> None:
    # envoyproxy/ratelimit src/server/health.go, HealthChecker.ServeHTTP: 200 with the body
    # "OK" while healthy, 500 with no body otherwise (test/server/health_test.go).
    r = httpx.get(f"{service.http}/healthcheck", timeout=10)
    assert (r.status_code, r.text) == (200, "OK")
    assert r.headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize("how", [("--health-checks-store",),
                                 ("env", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true")],
                         ids=["flag", "go-env"])
def test_healthcheck_is_500_while_the_store_is_unreachable_when_told_to_follow_it(
        tmp_path: Path, own: list[ServiceProcess], how: tuple[str, ...],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """envoyproxy/ratelimit's REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true: unhealthy while
    Redis is unreachable."""
    args: tuple[str, ...] = how
    if how[0] == "env":
        monkeypatch.setenv(how[1], how[2])
        args = ()
    redis = RedisServer("redis")  # nothing listens on its port
    svc = ServiceProcess(POLICIES, tmp_path / "svc.log", "--store", redis.url, *args)
    own.append(svc.start())
    r = httpx.get(f"{svc.http}/healthcheck", timeout=10)
    assert (r.status_code, r.content) == (500, b"")
    # /healthz is the process's liveness, still 200: only readiness depends on the store.
    assert httpx.get(f"{svc.http}/healthz", timeout=10).status_code == 200


# -- gRPC reflection --------------------------------------------------------------------------

def test_grpc_reflection_lists_and_describes_the_services(service: ServiceProcess) -> None:
    # What `grpcurl -plaintext HOST:PORT list` and `describe` ask, through grpcio-reflection's
    # own client: the services, then Envoy's request message resolved from the server alone.
    with grpc.insecure_channel(service.grpc) as ch:
        db = ProtoReflectionDescriptorDatabase(ch)
        services = set(db.get_services())
        assert {RLS, "grpc.health.v1.Health",
                "grpc.reflection.v1alpha.ServerReflection"} <= services
        pool = DescriptorPool(db)
        method = pool.FindServiceByName(RLS).FindMethodByName("ShouldRateLimit")
        assert method.input_type.full_name == "envoy.service.ratelimit.v3.RateLimitRequest"
        fields = {f.name for f in method.input_type.fields}
        assert {"domain", "descriptors", "hits_addend"} <= fields
        assert method.output_type.fields_by_name["overall_code"].enum_type is not None


async def test_the_grpc_server_registers_no_method_and_answers_every_service(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # grpc.aio waits on one request-call task per registered method for every call it takes
    # (asyncio.wait over all of them), ~5 % of a decision's CPU with health's and
    # reflection's. The generated add_*_to_server functions register theirs: none may be.
    from grpc.aio._server import Server  # noqa: PLC0415

    from ratekeeper.policy import PolicyHolder  # noqa: PLC0415
    from ratekeeper.service import Service  # noqa: PLC0415
    from ratekeeper.service._grpc import start_grpc_server  # noqa: PLC0415
    from ratekeeper.service._grpc_ops import Health  # noqa: PLC0415

    registered: list[str] = []
    original = Server.add_registered_method_handlers

    def spy(self: Server, service: str, handlers: object) -> None:
        registered.append(service)
        original(self, service, handlers)

    monkeypatch.setattr(Server, "add_registered_method_handlers", spy)
    service = Service(PolicyHolder(POLICIES), MemoryStore(), clock=ManualClock())
    health = Health(service)
    server, port = await start_grpc_server(service, "127.0.0.1", 0, health=health)
    try:
        await health.update()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            check = ch.unary_unary(METHOD, request_serializer=RateLimitRequest.SerializeToString,
                                   response_deserializer=RateLimitResponse.FromString)
            answer = await check(RateLimitRequest(domain="nowhere", descriptors=[
                descriptor(("user", "a"))]), timeout=10)
            assert answer.overall_code == RateLimitResponseCode.OK
            stub = health_pb2_grpc.HealthStub(ch)
            got = await stub.Check(health_pb2.HealthCheckRequest(service=RLS), timeout=10)
            assert got.status == SERVING
        # reflection (a stream), through grpcio-reflection's own client, in a thread
        def services() -> set[str]:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as sync_ch:
                return set(ProtoReflectionDescriptorDatabase(sync_ch).get_services())
        assert {RLS, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} \
            <= await asyncio.to_thread(services)
    finally:
        await server.stop(None)
    assert registered == []


# -- TLS and mTLS on the gRPC listener --------------------------------------------------------

def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Certificate | None = None,
          issuer_key: ec.EllipticCurvePrivateKey | None = None, *, ca: bool = False,
          server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    b = (x509.CertificateBuilder().subject_name(name)
         .issuer_name(issuer.subject if issuer is not None else name)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(hours=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return b.sign(issuer_key or key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class Pki:
    """A throwaway CA with a server certificate (127.0.0.1) and a client certificate, plus
    a client certificate from another CA; PEM files in `dir`."""

    def __init__(self, dir: Path) -> None:
        ca_key, other_key = _key(), _key()
        self.ca = _cert("ratekeeper test CA", ca_key, ca=True)
        other = _cert("another CA", other_key, ca=True)
        server_key, client_key, stranger_key = _key(), _key(), _key()
        server = _cert("127.0.0.1", server_key, self.ca, ca_key, server=True)
        self.client = (_pem_key(client_key), _pem(_cert("client", client_key, self.ca, ca_key)))
        self.stranger = (_pem_key(stranger_key),
                         _pem(_cert("stranger", stranger_key, other, other_key)))
        self.ca_pem = _pem(self.ca)
        self.ca_file, self.cert_file, self.key_file = (
            dir / "ca.pem", dir / "server.pem", dir / "server-key.pem")
        self.ca_file.write_bytes(self.ca_pem)
        self.cert_file.write_bytes(_pem(server))
        self.key_file.write_bytes(_pem_key(server_key))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def _secure_check(target: str, pki: Pki, client: tuple[bytes, bytes] | None) -> int:
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki.ca_pem, private_key=client[0] if client else None,
        certificate_chain=client[1] if client else None)
    with grpc.secure_channel(target, creds) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        return _check(stub, RLS)


def _decides_over_tls(target: str, pki: Pki, client: tuple[bytes, bytes] | None) -> None:
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki.ca_pem, private_key=client[0] if client else None,
        certificate_chain=client[1] if client else None)
    with grpc.secure_channel(target, creds) as ch:
        method = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        req = RateLimitRequest(domain="t", descriptors=[descriptor(("user", "tls"))])
        resp = RateLimitResponse.parse(method(bytes(req), timeout=10))
        assert resp.overall_code == RateLimitResponseCode.OK
        assert resp.statuses[0].current_limit.requests_per_unit == 3  # decided by the policies


def test_grpc_over_tls_decides_and_refuses_plaintext(
        tmp_path: Path, pki: Pki, own: list[ServiceProcess]) -> None:
    svc = ServiceProcess(POLICIES, tmp_path / "svc.log", "--grpc-tls-cert", str(pki.cert_file),
                         "--grpc-tls-key", str(pki.key_file))
    own.append(svc.start())
    assert svc.wait_for(lambda r: r.get("event") == "listening")["grpc_tls"] == "tls"
    _decides_over_tls(svc.grpc, pki, None)
    assert _secure_check(svc.grpc, pki, None) == SERVING
    with grpc.insecure_channel(svc.grpc) as ch, pytest.raises(grpc.RpcError) as e:
        health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE


def test_grpc_mtls_requires_a_client_certificate_from_the_ca(
        tmp_path: Path, pki: Pki, own: list[ServiceProcess]) -> None:
    svc = ServiceProcess(POLICIES, tmp_path / "svc.log", "--grpc-tls-cert", str(pki.cert_file),
                         "--grpc-tls-key", str(pki.key_file),
                         "--grpc-tls-client-ca", str(pki.ca_file))
    own.append(svc.start())
    assert svc.wait_for(lambda r: r.get("event") == "listening")["grpc_tls"] == "mtls"
    _decides_over_tls(svc.grpc, pki, pki.client)
    for client in (None, pki.stranger):  # no certificate; one another CA signed
        with pytest.raises(grpc.RpcError) as e:
            _secure_check(svc.grpc, pki, client)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(("flags", "message"), [
    (["--grpc-tls-cert", "{cert}"], "needs both --grpc-tls-cert and --grpc-tls-key"),
    (["--grpc-tls-client-ca", "{ca}"], "--grpc-tls-client-ca needs --grpc-tls-cert"),
    (["--grpc-tls-cert", "{ca}.missing", "--grpc-tls-key", "{key}"],
     "cannot read --grpc-tls-cert"),
    (["--grpc-tls-cert", "{policies}", "--grpc-tls-key", "{key}"],
     "is not PEM (the server's certificate chain)"),
])
def test_bad_tls_flags_refuse_to_start_and_say_why(pki: Pki, flags: list[str],
                                                   message: str) -> None:
    args = [f.format(cert=pki.cert_file, key=pki.key_file, ca=pki.ca_file, policies=POLICIES)
            for f in flags]
    r = run_cli(["serve", "--config", str(POLICIES), "--http-port", "0", "--grpc-port", "0",
                 *args])
    assert r.returncode == 1, r.stderr
    assert "not starting" in r.stderr and message in r.stderr
    assert "Traceback" not in r.stderr


# -- unix sockets -----------------------------------------------------------------------------

@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory for sockets (a unix socket path is at most ~107 bytes; pytest's
    tmp_path can be longer)."""
    d = Path(tempfile.mkdtemp(prefix="rk-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_http_and_grpc_on_unix_sockets_only(short_dir: Path, tmp_path: Path,
                                            own: list[ServiceProcess]) -> None:
    http_sock, grpc_sock = short_dir / "http.sock", short_dir / "grpc.sock"
    svc = ServiceProcess(POLICIES, tmp_path / "svc.log", "--no-http", "--no-grpc",
                         "--http-unix", str(http_sock), "--grpc-unix", str(grpc_sock))
    own.append(svc.start())
    rec = svc.wait_for(lambda r: r.get("event") == "listening")
    assert (rec["http_unix"], rec["grpc_unix"]) == (str(http_sock), str(grpc_sock))
    assert "http_port" not in rec and "grpc_port" not in rec  # no TCP listener
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(http_sock)),
                      base_url="http://rk", timeout=10) as client:
        assert client.get("/healthcheck").text == "OK"
        r = client.post("/v1/check", json={"domain": "t", "descriptors": [{"user": "unix"}]})
        assert r.status_code == 200 and r.json()["allowed"] is True
    with grpc.insecure_channel(f"unix:{grpc_sock}") as ch:
        assert _check(health_pb2_grpc.HealthStub(ch), RLS) == SERVING
        method = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        req = RateLimitRequest(domain="t", descriptors=[descriptor(("user", "unix"))])
        resp = RateLimitResponse.parse(method(bytes(req), timeout=10))
        # The second hit of the same counter: HTTP and gRPC on sockets share the service.
        assert resp.statuses[0].limit_remaining == 1
    assert svc.stop() == 0
    assert not http_sock.exists() and not grpc_sock.exists()  # removed on the way out


def test_a_stale_socket_file_is_replaced_and_another_file_refused(
        short_dir: Path, tmp_path: Path, own: list[ServiceProcess]) -> None:
    stale = short_dir / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()  # what a killed process leaves: the file, nobody listening
    svc = ServiceProcess(POLICIES, tmp_path / "svc.log", "--http-unix", str(stale))
    own.append(svc.start())
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(stale)), timeout=10) as client:
        assert client.get("http://rk/healthz").status_code == 200
    svc.stop()
    precious = short_dir / "notes.txt"
    precious.write_text("keep me")
    r = run_cli(["serve", "--config", str(POLICIES), "--http-port", "0", "--grpc-port", "0",
                 "--http-unix", str(precious)])
    assert r.returncode == 1
    assert "not a socket" in r.stderr and "Traceback" not in r.stderr
    assert precious.read_text() == "keep me"


# -- envoyproxy/ratelimit's limit headers, by name --------------------------------------------

HEADERS_POLICIES = """
[domains.h]
[[domains.h.descriptors]]
key = "a"
limits = [{ algorithm = "fixed-window", rate = "3/hour" }]

[[domains.h.descriptors]]
key = "b"
limits = [{ algorithm = "fixed-window", rate = "10/minute" }]
"""
X = LimitHeaders("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")


def _decide(engine: Engine, limit_headers: LimitHeaders | None, *keys: str,
            domain: str = "h") -> list[tuple[str, str]]:
    req = RateLimitRequest(domain=domain, descriptors=[descriptor((k, "v")) for k in keys])
    ours = rls_pb2.RateLimitRequest.FromString(bytes(req))
    res = asyncio.run(engine.check(*parse_request(ours)))
    return [(h.key, h.value) for h in response_for(res, limit_headers).response_headers_to_add]


@pytest.fixture
def engine() -> Engine:
    snap = parse_policies_text(HEADERS_POLICIES)
    return Engine(lambda: snap, MemoryStore(), clock=ManualClock(1000.0))  # 1000 s: 16m40s


def test_limit_headers_name_the_descriptor_closest_to_its_limit(engine: Engine) -> None:
    # envoyproxy/ratelimit src/service/ratelimit.go, shouldRateLimitWorker: the status with
    # the least limit_remaining among those with a current_limit gives the three headers
    # (test/service/ratelimit_test.go, TestServiceWithCustomRatelimitHeaders).
    # b: 10/minute, 9 left; a: 3/hour, 2 left, 2600 s to the hour (the clock is at 1000 s).
    assert _decide(engine, X, "b", "a") == [
        ("X-RateLimit-Limit", "3"), ("X-RateLimit-Remaining", "2"), ("X-RateLimit-Reset", "2600")]
    # Only b now: its own numbers, 40 s to the minute.
    assert _decide(engine, LimitHeaders(), "b") == [
        ("RateLimit-Limit", "10"), ("RateLimit-Remaining", "8"), ("RateLimit-Reset", "20")]


def test_limit_headers_of_an_over_limit_request_say_none_left(engine: Engine) -> None:
    for _ in range(3):
        _decide(engine, X, "a")
    # a is over (0 left); b, allowed-but-uncharged, says its 10: the over one is named.
    assert _decide(engine, X, "b", "a") == [
        ("X-RateLimit-Limit", "3"), ("X-RateLimit-Remaining", "0"), ("X-RateLimit-Reset", "2600")]


def test_limit_headers_are_left_out_with_no_limit_and_ours_are_the_default(
        engine: Engine) -> None:
    assert _decide(engine, X, "a", domain="nope") == []  # unknown domain: no current_limit
    ours = dict(_decide(engine, None, "a"))
    assert "RateLimit-Policy" in ours and "X-RateLimit-Limit" not in ours


def test_limit_headers_from_envoy_ratelimit_settings_in_the_environment(
        tmp_path: Path, own: list[ServiceProcess], monkeypatch: pytest.MonkeyPatch) -> None:
    # The Go service's own settings carry over: LIMIT_RESPONSE_HEADERS_ENABLED and the names
    # (src/settings/settings.go); a flag wins over its variable.
    monkeypatch.setenv("LIMIT_RESPONSE_HEADERS_ENABLED", "true")
    monkeypatch.setenv("LIMIT_REMAINING_HEADER", "X-RateLimit-Remaining")
    svc = ServiceProcess(POLICIES, tmp_path / "svc.log", "--limit-limit-header",
                         "X-RateLimit-Limit")
    own.append(svc.start())
    with grpc.insecure_channel(svc.grpc) as ch:
        method = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        req = RateLimitRequest(domain="t", descriptors=[descriptor(("user", "hdr"))])
        resp = RateLimitResponse.parse(method(bytes(req), timeout=10))
    names = [h.key for h in resp.response_headers_to_add]
    assert names == ["X-RateLimit-Limit", "X-RateLimit-Remaining", "RateLimit-Reset"]


@pytest.mark.parametrize(("env", "flags", "message"), [
    ({"LIMIT_RESPONSE_HEADERS_ENABLED": "yes"}, [], "is not a boolean"),
    ({"LIMIT_RESPONSE_HEADERS_ENABLED": "1", "LIMIT_RESET_HEADER": "Reset: now"}, [],
     "LIMIT_RESET_HEADER: not an HTTP header name"),
    ({}, ["--limit-response-headers", "--limit-limit-header", "X Limit"],
     "not an HTTP header name"),
])
def test_bad_limit_header_settings_refuse_to_start_and_say_why(
        env: dict[str, str], flags: list[str], message: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    r = run_cli(["serve", "--config", str(POLICIES), "--http-port", "0", "--grpc-port", "0",
                 *flags])
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_socket_another_service_listens_on_is_not_taken_over(
        short_dir: Path, tmp_path: Path, own: list[ServiceProcess]) -> None:
    path = short_dir / "http.sock"
    svc = ServiceProcess(POLICIES, tmp_path / "svc.log", "--http-unix", str(path))
    own.append(svc.start())
    r = run_cli(["serve", "--config", str(POLICIES), "--http-port", "0", "--grpc-port", "0",
                 "--http-unix", str(path)])
    assert r.returncode == 1 and "another process listens there" in r.stderr, r.stderr
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), timeout=10) as client:
        assert client.get("http://rk/healthcheck").text == "OK"  # the first one still serves
