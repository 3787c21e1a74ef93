"""The gRPC listener's operational surface: health, reflection and TLS.

- `Health`: the standard ``grpc.health.v1.Health`` service (grpcio-health-checking's
  servicer, Check and Watch), answering for ``""``, ``envoy.service.ratelimit.v3.RateLimitService``
  and ``ratelimit`` (the name envoyproxy/ratelimit registers, so its probes keep working).
  SERVING while the store answers; NOT_SERVING while it does not (the same probe as
  ``/readyz``, re-asked every `interval` seconds) and, for good, once shutdown begins.
- `add_reflection`: ``grpc.reflection.v1alpha.ServerReflection`` (grpcio-reflection), so
  ``grpcurl -plaintext HOST:PORT list`` and ``describe`` work without the .proto files.
- `server_credentials`: TLS from PEM files, and mTLS (client certificates required and
  verified against a CA) when a client CA is given.
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

__all__ = ["HEALTH_NAMES", "GenericOnly", "Health", "TlsConfigError", "add_reflection",
           "server_credentials"]

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


def server_credentials(cert: Path, key: Path, client_ca: Path | None = None) -> Any:
    """grpc server credentials: TLS with `cert`/`key` (PEM; the chain may follow the
    certificate), and with `client_ca` mTLS: a client must present a certificate that CA
    signed, or the handshake fails."""
    chain = _read_pem(cert, "the server's certificate chain", "--grpc-tls-cert")
    private = _read_pem(key, "the server's private key", "--grpc-tls-key")
    root = None if client_ca is None else _read_pem(
        client_ca, "the CA that signs client certificates", "--grpc-tls-client-ca")
    return grpc.ssl_server_credentials(
        [(private, chain)], root_certificates=root, require_client_auth=root is not None)
