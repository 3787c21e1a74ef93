"""gRPC TLS as envoyproxy/ratelimit serves it (issue 32 item 5): a certificate and key renamed
over the old ones are used from the next handshake on, without a restart (its
test/integration/integration_test.go::TestReloadGRPCServerCerts), and with
GRPC_CLIENT_TLS_SAN a client certificate that does not name it is refused. Certificates are
made in the test (the `cryptography` package)."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import socket
import ssl
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ratekeeper.service._cli import add_serve, go_settings
from ratekeeper.service._grpc_ops import TlsConfigError
from ratekeeper.service._server import ServeOptions, serve
from ratekeeper.service.proto.envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from ratekeeper.service.proto.envoy.service.ratelimit.v3 import rls_pb2

POLICIES = Path(__file__).parent / "policies" / "service.toml"
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, *, issuer: tuple[Any, Any] | None,
          sans: list[str]) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    b = (x509.CertificateBuilder().subject_name(name)
         .issuer_name(name if issuer is None else issuer[0].subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(NOW - datetime.timedelta(days=1))
         .not_valid_after(NOW + datetime.timedelta(days=3650)))
    if issuer is None:
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(s) for s in sans]),
                            critical=False)
    return b.sign(key if issuer is None else issuer[1], hashes.SHA256())


def _pem(obj: Any) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    return bytes(obj.private_bytes(serialization.Encoding.PEM,
                                   serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))


class Pki:
    """A CA, and certificates it signs, written as PEM files under `root`."""

    def __init__(self, root: Path, name: str) -> None:
        self.root, self.name = root, name
        self.key = _key()
        self.cert = _cert(f"{name} CA", self.key, issuer=None, sans=[])
        self.ca_file = self.write(f"{name}-ca.pem", self.cert)

    def write(self, file: str, obj: Any) -> Path:
        path = self.root / file
        path.write_bytes(_pem(obj))
        return path

    def issue(self, label: str, san: str) -> tuple[Path, Path, x509.Certificate]:
        key = _key()
        cert = _cert(san, key, issuer=(self.cert, self.key), sans=[san])
        return (self.write(f"{self.name}-{label}-cert.pem", cert),
                self.write(f"{self.name}-{label}-key.pem", key), cert)


def _server_cert_seen(port: int, ca: Path) -> bytes:
    """The DER certificate the server presents to a TLS handshake trusting `ca` (raises
    ssl.SSLCertVerificationError when `ca` did not sign it)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


async def _serving(options: ServeOptions) -> tuple[asyncio.Task[int], asyncio.Event, int]:
    stop = asyncio.Event()
    ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(options, on_ready=ready.set_result, stop=stop))
    listening = await ready
    return task, stop, int(listening["grpc_port"])


async def test_a_certificate_renamed_over_the_old_one_is_served_without_a_restart(
        tmp_path: Path) -> None:
    first, second = Pki(tmp_path, "first"), Pki(tmp_path, "second")
    cert, key, cert1 = first.issue("server", "localhost")
    new_cert, new_key, cert2 = second.issue("server", "localhost")
    task, stop, port = await _serving(ServeOptions(
        config=POLICIES, http_port=None, grpc_port=0, grace=0.1,
        grpc_tls_cert=cert, grpc_tls_key=key))
    try:
        seen = await asyncio.to_thread(_server_cert_seen, port, first.ca_file)
        assert seen == cert1.public_bytes(serialization.Encoding.DER)
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.to_thread(_server_cert_seen, port, second.ca_file)
        # A rotation as the Go test does it: the new certificate, then its key, renamed over.
        os.rename(new_cert, cert)
        os.rename(new_key, key)
        seen = await asyncio.to_thread(_server_cert_seen, port, second.ca_file)
        assert seen == cert2.public_bytes(serialization.Encoding.DER)
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.to_thread(_server_cert_seen, port, first.ca_file)
    finally:
        stop.set()
        assert await task == 0


async def test_a_key_that_does_not_match_keeps_the_previous_certificate(
        tmp_path: Path) -> None:
    first, second = Pki(tmp_path, "first"), Pki(tmp_path, "second")
    cert, key, cert1 = first.issue("server", "localhost")
    new_cert, _, _ = second.issue("server", "localhost")
    task, stop, port = await _serving(ServeOptions(
        config=POLICIES, http_port=None, grpc_port=0, grace=0.1,
        grpc_tls_cert=cert, grpc_tls_key=key))
    try:
        os.rename(new_cert, cert)  # half a rotation: the key is still the old one's
        seen = await asyncio.to_thread(_server_cert_seen, port, first.ca_file)
        assert seen == cert1.public_bytes(serialization.Encoding.DER)
    finally:
        stop.set()
        assert await task == 0


async def _should_rate_limit(port: int, ca: Path, client: tuple[Path, Path]) -> int:
    creds = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes(),
                                         private_key=client[1].read_bytes(),
                                         certificate_chain=client[0].read_bytes())
    async with grpc.aio.secure_channel(f"localhost:{port}", creds) as ch:
        call = ch.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                              request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                              response_deserializer=rls_pb2.RateLimitResponse.FromString)
        entry = ratelimit_pb2.RateLimitDescriptor.Entry(key="user", value="tls")
        resp = await call(rls_pb2.RateLimitRequest(
            domain="t", descriptors=[ratelimit_pb2.RateLimitDescriptor(entries=[entry])]))
        return int(resp.overall_code)


async def test_a_client_certificate_without_the_configured_san_is_refused(
        tmp_path: Path) -> None:
    servers, clients = Pki(tmp_path, "servers"), Pki(tmp_path, "clients")
    cert, key, _ = servers.issue("server", "localhost")
    good = clients.issue("good", "envoy.internal")[:2]
    wrong = clients.issue("wrong", "someone.else")[:2]
    task, stop, port = await _serving(ServeOptions(
        config=POLICIES, http_port=None, grpc_port=0, grace=0.1,
        grpc_tls_cert=cert, grpc_tls_key=key, grpc_tls_client_ca=clients.ca_file,
        grpc_tls_client_san="envoy.internal"))
    try:
        assert await _should_rate_limit(port, servers.ca_file, good) == \
            rls_pb2.RateLimitResponse.OK
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await _should_rate_limit(port, servers.ca_file, wrong)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "'envoy.internal'" in (e.value.details() or "")
        assert "someone.else" in (e.value.details() or "")
    finally:
        stop.set()
        assert await task == 0


async def test_a_san_without_a_client_ca_and_a_mismatched_key_are_refused_at_start(
        tmp_path: Path) -> None:
    pki = Pki(tmp_path, "p")
    cert, key, _ = pki.issue("server", "localhost")
    with pytest.raises(TlsConfigError, match="--grpc-tls-client-san needs"):
        await serve(ServeOptions(config=POLICIES, http_port=None, grpc_port=0,
                                 grpc_tls_cert=cert, grpc_tls_key=key,
                                 grpc_tls_client_san="x"))
    other_key = pki.write("other-key.pem", _key())
    with pytest.raises(TlsConfigError, match="is not the private key of"):
        await serve(ServeOptions(config=POLICIES, http_port=None, grpc_port=0,
                                 grpc_tls_cert=cert, grpc_tls_key=other_key))


def test_the_go_services_tls_settings_are_read() -> None:
    parser = argparse.ArgumentParser()
    add_serve(parser)
    args = parser.parse_args([])
    go_settings(args, {"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c.pem",
                       "GRPC_SERVER_TLS_KEY": "/k.pem", "GRPC_CLIENT_TLS_CACERT": "/ca.pem",
                       "GRPC_CLIENT_TLS_SAN": "envoy.internal"})
    assert (args.grpc_tls_cert, args.grpc_tls_key, args.grpc_tls_client_ca,
            args.grpc_tls_client_san) == (Path("/c.pem"), Path("/k.pem"), Path("/ca.pem"),
                                          "envoy.internal")
    args = parser.parse_args([])  # without GRPC_SERVER_USE_TLS the Go service reads none
    go_settings(args, {"GRPC_SERVER_TLS_CERT": "/c.pem"})
    assert args.grpc_tls_cert is None
    with pytest.raises(ValueError, match="GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT"):
        go_settings(parser.parse_args([]), {"GRPC_SERVER_USE_TLS": "true"})
