"""The gRPC listener's operational surface: health, reflection and TLS.

- `Health`: the standard ``grpc.health.v1.Health`` service (grpcio-health-checking's
  servicer, Check and Watch), answering for ``""``, ``envoy.service.ratelimit.v3.RateLimitService``
  and ``ratelimit`` (the name envoyproxy/ratelimit registers, so its probes keep working).
  SERVING while the store answers; NOT_SERVING while it does not (the same probe as
  ``/readyz``, re-asked every `interval` seconds) and, for good, once shutdown begins.
- `add_reflection`: ``grpc.reflection.v1alpha.ServerReflection`` (grpcio-reflection), so
  ``grpcurl -plaintext HOST:PORT list`` and ``describe`` work without the .proto files.
- `server_credentials`: TLS from PEM files, and mTLS (client certificates required and
  verified against a CA) when a client CA is given, the files read again when they change
  (`CertificateFiles`); `ClientSanCheck`: the client certificate must name a SAN.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
from grpc_health.v1 import health as _health  # type: ignore[import-untyped]
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import (  # type: ignore[import-untyped]
    reflection,
    reflection_pb2_grpc,
)

from ._service import Service

__all__ = ["HEALTH_NAMES", "CertificateFiles", "ClientSanCheck", "GenericOnly", "Health",
           "TlsConfigError", "add_reflection", "server_credentials"]

log = logging.getLogger("ratekeeper.service")

SERVING: int = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING: int = health_pb2.HealthCheckResponse.NOT_SERVING
#: The names the health service answers for ("" is the whole server, by the protocol).
HEALTH_NAMES = ("", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit")
#: The health service's own full name (for reflection).
HEALTH_SERVICE: str = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


class GenericOnly:
    """A grpc.aio server as the generated ``add_*Servicer_to_server`` functions see it:
    they add a generic handler and also register each method, and grpc.aio then waits on
    one more request-call task per registered method for every call it takes (an
    asyncio.wait over them all; with health's and reflection's three, ~5 % of a decision's
    CPU). The generic handlers alone answer the same calls, so no method is registered."""

    def __init__(self, server: Any) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        pass


class Health:
    """``grpc.health.v1.Health`` for `service`: SERVING until shutdown, or, with
    `Service.health_checks_store`, kept in step with the store's readiness.

    `update` asks the store once (as ``/readyz`` does) and sets every name; `run` does so
    every `interval` seconds until stopped; `shutdown` turns every name NOT_SERVING for good
    (the servicer ignores any later update), which Watch streams see at once."""

    def __init__(self, service: Service, interval: float = 1.0) -> None:
        self.service = service
        self.interval = interval
        self.servicer = _health.aio.HealthServicer()
        self.status: int | None = None

    def __repr__(self) -> str:
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(self.status or 0)
        return f"Health({name}, every {self.interval:g}s)"

    def add_to(self, server: Any) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, GenericOnly(server))

    async def update(self) -> int:
        service = self.service
        problem = "stopping" if service.stopping else \
            await service.engine.probe() if service.health_checks_store else None
        status = SERVING if problem is None else NOT_SERVING
        if status != self.status:
            if self.status is not None:  # the first answer is in the "listening" line
                log.info("gRPC health: %s%s",
                         health_pb2.HealthCheckResponse.ServingStatus.Name(status),
                         f" ({problem})" if problem else "",
                         extra={"event": "grpc_health", "serving": status == SERVING})
            self.status = status
        for name in HEALTH_NAMES:
            await self.servicer.set(name, status)
        return status

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.interval)
            except asyncio.TimeoutError:
                await self.update()

    async def shutdown(self) -> None:
        self.status = NOT_SERVING
        await self.servicer.enter_graceful_shutdown()


def add_reflection(server: Any, services: Sequence[str]) -> None:
    """Serve reflection for `services` (full names; the reflection service adds itself) on
    a grpc.aio `server`: `reflection.enable_server_reflection`, on a `GenericOnly` server
    (which that function would take for a sync one, by its type)."""
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        reflection.aio.ReflectionServicer((*services, reflection.SERVICE_NAME)),
        GenericOnly(server))


class TlsConfigError(ValueError):
    """The gRPC TLS files cannot be used."""


def _read_pem(path: Path, what: str, flag: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TlsConfigError(f"cannot read {flag} {path} ({what}): {e.strerror or e}") from None
    if b"-----BEGIN " not in data:
        raise TlsConfigError(f"{flag} {path} is not PEM ({what}): expected a "
                             "'-----BEGIN ...-----' block")
    return data


class CertificateFiles:
    """The gRPC listener's TLS from PEM files, read again when they change: a certificate
    and key renamed over the old ones (a rotation) are used from the next handshake on,
    without a restart, as envoyproxy/ratelimit's CertProvider (its
    TestReloadGRPCServerCerts).

    `credentials` are grpc's dynamic server credentials: grpc asks `fetch` at every
    handshake, which compares the files' (inode, size, mtime) with what it loaded and, when
    they changed, loads them again. A pair that does not load (a key that does not match the
    certificate, as between the two renames of a rotation, or a file being written) is
    logged and the previous pair kept; it is tried again at the next handshake. With
    `client_ca`, mTLS: a client must present a certificate that CA signed."""

    def __init__(self, cert: Path, key: Path, client_ca: Path | None = None) -> None:
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self._stamp = self._stat()
        self._config = self._load()  # TlsConfigError at start: nothing to fall back on
        self.loads = 1

    def __repr__(self) -> str:
        return (f"CertificateFiles({self.cert}, {self.key}, client_ca={self.client_ca}, "
                f"loads={self.loads})")

    def _stat(self) -> tuple[tuple[int, int, int], ...] | None:
        try:
            return tuple((st.st_ino, st.st_size, st.st_mtime_ns) for st in (
                p.stat() for p in (self.cert, self.key, self.client_ca) if p is not None))
        except OSError:
            return None

    def _load(self) -> Any:
        import ssl  # noqa: PLC0415

        chain = _read_pem(self.cert, "the server's certificate chain", "--grpc-tls-cert")
        private = _read_pem(self.key, "the server's private key", "--grpc-tls-key")
        root = None if self.client_ca is None else _read_pem(
            self.client_ca, "the CA that signs client certificates", "--grpc-tls-client-ca")
        try:  # the standard library's check that the key is the certificate's
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, OSError) as e:
            raise TlsConfigError(f"--grpc-tls-key {self.key} is not the private key of "
                                 f"--grpc-tls-cert {self.cert} ({e})") from None
        return grpc.ssl_server_certificate_configuration([(private, chain)],
                                                         root_certificates=root)

    def fetch(self) -> Any:
        """The new certificate configuration if the files changed since the last load,
        else None (grpc keeps the one it has)."""
        stamp = self._stat()
        if stamp == self._stamp or stamp is None:
            return None
        try:
            config = self._load()
        except TlsConfigError as e:
            log.warning("gRPC TLS files changed but cannot be used (%s); keeping the "
                        "previous certificate", e, extra={"event": "tls_reload_error"})
            return None
        self._stamp, self._config = stamp, config
        self.loads += 1
        log.info("gRPC TLS certificate reloaded from %s", self.cert,
                 extra={"event": "tls_reloaded", "cert": str(self.cert)})
        return config

    def credentials(self) -> Any:
        return grpc.dynamic_ssl_server_credentials(
            self._config, self.fetch,
            require_client_authentication=self.client_ca is not None)


def server_credentials(cert: Path, key: Path, client_ca: Path | None = None) -> Any:
    """grpc server credentials: TLS with `cert`/`key` (PEM; the chain may follow the
    certificate), and with `client_ca` mTLS: a client must present a certificate that CA
    signed, or the handshake fails. The files are read again when they change
    (`CertificateFiles`)."""
    return CertificateFiles(cert, key, client_ca).credentials()


class ClientSanCheck(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """envoyproxy/ratelimit's ``GRPC_CLIENT_TLS_SAN``: a call over TLS whose client
    certificate does not name `san` among its subject alternative names is refused
    (UNAUTHENTICATED, saying which name was expected). The Go service refuses the handshake;
    grpcio offers no hook there, so each call is checked (only when this is set). A call on
    the plaintext unix socket has no certificate and is not checked: the socket file's
    permissions are its access control."""

    def __init__(self, san: str) -> None:
        self.san = san
        self._want = san.encode()

    async def _check(self, context: Any) -> None:
        auth = context.auth_context()
        if auth.get("transport_security_type") != [b"ssl"]:
            return
        names = auth.get("x509_subject_alternative_name", [])
        if self._want not in names:
            shown = ", ".join(n.decode(errors="replace") for n in names[:10]) or "none"
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                f"the client certificate's subject alternative names ({shown}) "
                                f"do not include {self.san!r} (GRPC_CLIENT_TLS_SAN)")

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        check = self._check
        kw = {"request_deserializer": handler.request_deserializer,
              "response_serializer": handler.response_serializer}
        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            async def unary_unary(request: Any, context: Any) -> Any:
                await check(context)
                return await inner_uu(request, context)
            return grpc.unary_unary_rpc_method_handler(unary_unary, **kw)
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            async def unary_stream(request: Any, context: Any) -> Any:
                await check(context)
                async for item in inner_us(request, context):
                    yield item
            return grpc.unary_stream_rpc_method_handler(unary_stream, **kw)
        if handler.stream_stream is not None:
            inner_ss = handler.stream_stream

            async def stream_stream(requests: Any, context: Any) -> Any:
                await check(context)
                async for item in inner_ss(requests, context):
                    yield item
            return grpc.stream_stream_rpc_method_handler(stream_stream, **kw)
        inner_su = handler.stream_unary

        async def stream_unary(requests: Any, context: Any) -> Any:
            await check(context)
            return await inner_su(requests, context)
        return grpc.stream_unary_rpc_method_handler(stream_unary, **kw)
