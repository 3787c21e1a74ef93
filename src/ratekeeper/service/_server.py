"""Running the service: uvicorn (HTTP) and grpc.aio (Envoy's protocol) on one asyncio loop.

`serve` loads the policies (refusing to start on a bad file), opens the store, starts both
servers, then waits for a signal:

- SIGHUP reloads the policies (a bad file is logged and the old policies stay);
- SIGTERM or SIGINT shuts down gracefully: ``/readyz`` and ``/healthz`` turn 503 (and the
  gRPC health service NOT_SERVING), the listeners stop accepting, calls in flight get up to
  `grace` seconds to finish, the store is closed. A second SIGTERM/SIGINT stops at once.

With ``watch > 0`` the policies file is also polled every `watch` seconds (mtime, size,
inode) and reloaded when it changes. Ports may be 0 (the OS picks); the ``listening`` log line
says which ports were bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import inspect
import logging
import math
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import uvicorn

from .. import _compiled
from .._errors import RateKeeperError
from ..core import FailurePolicy
from ..policy._holder import PolicyHolder, Watcher
from ..policy._loader import is_envoy_config, load_policies
from ..policy._model import Policies
from ..stores._base import AsyncStore
from ..stores._url import open_store as open_any_store
from ..stores._urlforms import redact
from ..stores.memory import MemoryStore
from ._gostats import GoNamedStats, GoStats, GoStatsEngine, GoStatsOptions, start_prometheus
from ._grpc import LimitHeaders, grpc_address, start_grpc_server
from ._grpc_ops import SERVING, ClientSanCheck, Health, TlsConfigError, server_credentials
from ._http import JSON_CODEC, create_app
from ._service import DEFAULT_MAX_BODY, Service
from ._stats import PrometheusStats

__all__ = ["ServeOptions", "StoreConfigError", "new_event_loop", "open_store", "run", "serve"]

log = logging.getLogger("ratekeeper.service")

#: The bundled example policies (``ratekeeper serve`` without ``--config``).
EXAMPLE_POLICIES = Path(__file__).with_name("example_policies.toml")


class StoreConfigError(ValueError):
    """The ``--store`` URL cannot be used."""


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """Everything ``ratekeeper serve`` takes. Ports of None disable a listener.

    Defaults mirror envoyproxy/ratelimit: HTTP on 8080, gRPC on 8081; but on 127.0.0.1, not
    every interface (pass ``host="0.0.0.0"`` to listen on all of them).
    """

    config: Path = EXAMPLE_POLICIES
    store: str | None = None
    host: str = "127.0.0.1"
    http_port: int | None = 8080
    grpc_port: int | None = 8081
    watch: float = 0.0
    max_body: int = DEFAULT_MAX_BODY
    grace: float = 10.0
    access_log: bool = False
    key_prefix: str = "rk:"
    max_keys: int = 1_000_000
    require_store: bool = False
    #: Seconds one store call may take before the failure policy decides (None: the
    #: store's default, 0.25 s for Redis: a decision is on the request path).
    store_timeout: float | None = None
    #: gRPC TLS: the server's certificate chain and key (PEM); with `grpc_tls_client_ca`,
    #: mTLS (clients must present a certificate that CA signed).
    grpc_tls_cert: Path | None = None
    grpc_tls_key: Path | None = None
    grpc_tls_client_ca: Path | None = None
    #: With `grpc_tls_client_ca`: a client certificate must name this among its subject
    #: alternative names (envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN); a call without it is
    #: refused (UNAUTHENTICATED).
    grpc_tls_client_san: str | None = None
    #: Unix socket paths to listen on as well as (or, with the port None, instead of) TCP.
    http_unix: Path | None = None
    grpc_unix: Path | None = None
    #: Seconds between the store probes behind the gRPC health service's status.
    health_interval: float = 1.0
    #: envoyproxy/ratelimit's response headers, by name, instead of ours (None: ours).
    limit_headers: LimitHeaders | None = None
    #: Share the TCP ports with other processes (SO_REUSEPORT): one of ``--workers N``.
    reuse_port: bool = False
    #: Once listening, move everything start-up made (modules, grpc, the policies) out of
    #: the cyclic GC's sight (`gc.freeze`): each full collection then scans only what was
    #: made since -- the memos and the store -- and pauses the loop for less. The CLI sets
    #: it (it owns its process); off for a `serve` run inside another program.
    freeze_heap: bool = False
    #: What a store failure is answered with, whatever the policies say (None: their
    #: ``[service] failure``, "open" for envoyproxy/ratelimit's YAML): "open", "closed" or
    #: "local" decide as that failure policy; "error" answers the call with an error (gRPC
    #: UNAVAILABLE, HTTP 503), envoyproxy/ratelimit's behaviour, so that Envoy's
    #: ``failure_mode_deny`` decides. ``--failure`` / ``RATEKEEPER_FAILURE``.
    failure: Literal["open", "closed", "local", "error"] | None = None
    #: The gRPC health service and ``/healthcheck`` follow the store (NOT_SERVING / 500 while
    #: it does not answer); off: SERVING until shutdown, envoyproxy/ratelimit's default.
    #: ``--health-checks-store`` / ``REDIS_HEALTH_CHECK_ACTIVE_CONNECTION``.
    health_checks_store: bool = False
    #: envoyproxy/ratelimit's SHADOW_MODE: every rule in shadow mode, whatever the policies.
    shadow_mode: bool = False
    #: envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG: a domain in several YAML files is joined.
    merge_domains: bool = False
    #: envoyproxy/ratelimit's stats under its names, as StatsD lines and/or a Prometheus
    #: page (`GoStatsOptions`; None: none). USE_STATSD, USE_PROMETHEUS and their settings.
    go_stats: GoStatsOptions | None = None


def open_store(url: str | None, *, prefix: str = "rk:", max_keys: int = 1_000_000,
               timeout: float | None = None) -> tuple[AsyncStore, str]:
    """``(store, description)`` for a ``--store`` URL (`ratekeeper.stores.open_store`'s
    forms; memory by default), on the server's clock. `timeout` bounds each store call
    (None: the store's default)."""
    options: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    try:
        store = open_any_store(url, asyncio=True, max_keys=max_keys, prefix=prefix,
                               client_clock=False, **options)
    except RateKeeperError as e:
        raise StoreConfigError(f"cannot use --store {redact(url or 'memory://')}: {e}") from None
    return store, "memory" if isinstance(store, MemoryStore) else redact(url or "")


async def close_store(store: object) -> None:
    for name in ("aclose", "close"):
        fn = getattr(store, name, None)
        if callable(fn):
            try:
                res = fn()
                if inspect.isawaitable(res):
                    await res
            except Exception:
                log.warning("closing the store failed", exc_info=True)
            return


def bind_tcp(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A bound TCP listening socket (port 0: any free port), made so that asyncio sets
    TCP_NODELAY on the connections it accepts.

    asyncio only sets TCP_NODELAY on sockets whose ``proto`` is IPPROTO_TCP; a socket built as
    ``socket.socket(AF_INET)`` (``uvicorn.Config.bind_socket``, ``socket.create_server``)
    has proto 0, and each keep-alive response then waits ~40 ms for a delayed ACK (Nagle).
    """
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                               proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE)
    family, type_, proto, _, addr = infos[0]
    sock = socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:  # the kernel spreads connections over every worker on the port
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen for HTTP on {grpc_address(host, port)}: {e}") from None
    return sock


def clear_stale_socket(path: Path) -> None:
    """Remove a socket file a previous run left at `path`. Refuse a live one (another process
    listens there: taking its path would silently cut it off) and any other file (it is not
    ours to delete)."""
    if path.is_socket():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # nobody listens: left behind
            return
        finally:
            probe.close()
        raise OSError(f"cannot listen on unix socket {path}: another process listens there")
    if path.exists():
        raise OSError(f"cannot listen on unix socket {path}: a file that is not a socket is "
                      "there; remove it or choose another path")


def bind_unix(path: Path) -> socket.socket:
    """A bound unix listening socket at `path` (see `clear_stale_socket`)."""
    clear_stale_socket(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on unix socket {path}: {e}") from None
    return sock


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop when it is installed, else asyncio's.

    The transport is most of a decision's cost: a bare Starlette endpoint costs about a third
    of the CPU on uvloop + httptools that it costs on asyncio + h11 (docs/service.md, Speed).
    Both are optional (the service extra installs them where they have wheels); without them
    the service runs the same on the standard library's loop and uvicorn's h11 parser.
    """
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(main: Any) -> Any:
    """Run the coroutine `main` to completion on `new_event_loop()`."""
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(main)
    loop = new_event_loop()  # pragma: no cover (Python 3.10)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _compiled_modules() -> str:
    """How many of the compiled modules run compiled, as "n/m" (`ratekeeper._compiled`); a
    warning names those edited since the install built them, which run from source."""
    status = _compiled.status()
    stale = sorted(m for m, s in status.items() if s == "source: stale")
    if stale:
        log.warning("%s edited since the install compiled them: running from source "
                    "(slower); rebuild with `pip install -e .`", ", ".join(stale),
                    extra={"event": "compiled_stale", "modules": stale})
    return f"{sum(s == 'compiled' for s in status.values())}/{len(status)}"


def http_parser() -> str:
    """uvicorn's HTTP/1.1 implementation: ``httptools`` (C, llhttp) when installed, else
    ``h11`` (pure Python), as uvicorn's ``http="auto"`` chooses."""
    try:
        import httptools  # noqa: F401, PLC0415
    except ImportError:
        return "h11"
    return "httptools"


def _loader(failure: str | None, *, shadow_mode: bool = False,
            merge_domains: bool = False) -> Callable[[Path], Policies]:
    """`load_policies`, with what the command line says over what the files say (a YAML
    file has no place to say it): `failure` (``ServeOptions.failure``) as every snapshot's
    ``[service] failure`` (under "error" the policies decide "open", no fallback store to
    keep, which the service then answers with an error), `shadow_mode` turning global shadow
    mode on, `merge_domains` joining a domain given in several YAML files."""
    if failure is None and not shadow_mode and not merge_domains:
        return load_policies
    # (`failure` is one of the CLI's choices)
    chosen: FailurePolicy | None = "open" if failure == "error" else failure  # type: ignore[assignment]

    def load(path: Path) -> Policies:
        if merge_domains and is_envoy_config(path):
            from ..policy._envoy_config import load_envoy_config  # noqa: PLC0415

            policies = load_envoy_config(path, merge_domains=True)
        else:
            policies = load_policies(path)
        settings = policies.settings
        if chosen is not None:
            settings = dataclasses.replace(settings, failure=chosen)
        if shadow_mode:
            settings = dataclasses.replace(settings, shadow_mode=True)
        return dataclasses.replace(policies, settings=settings)
    return load


class _UvicornServer(uvicorn.Server):
    """uvicorn without its own signal handling: `serve` owns SIGTERM/SIGINT/SIGHUP."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(options: ServeOptions, *,
                on_ready: Callable[[dict[str, Any]], None] | None = None,
                stop: asyncio.Event | None = None) -> int:
    """Run until `stop` is set or a SIGTERM/SIGINT arrives; returns the exit status.

    Raises `PolicyError` if the policies file is invalid and `StoreConfigError` /
    `OSError` if the store or a port cannot be used, before anything listens.
    `on_ready` receives the ``listening`` record (bound ports included) once both
    listeners accept connections.
    """
    go_stats = None if options.go_stats is None else GoStats(options.go_stats)
    stats = PrometheusStats() if go_stats is None else GoNamedStats(go_stats)
    holder = PolicyHolder(options.config, stats=stats, loader=_loader(
        options.failure, shadow_mode=options.shadow_mode, merge_domains=options.merge_domains))
    store, store_name = open_store(options.store, prefix=options.key_prefix,
                                   max_keys=options.max_keys, timeout=options.store_timeout)
    # The memory store's windows on Unix time (its own default is the monotonic clock), so
    # that a 1/minute window ends on the minute, as envoyproxy/ratelimit's `unit - now % unit`
    # and the Redis store (on the server's clock) have it: the same resets whatever the store.
    clock = time.time if isinstance(store, MemoryStore) else None
    service = Service(holder, store, stats=stats, max_body=options.max_body,
                      store_name=store_name, clock=clock,
                      store_failure="error" if options.failure == "error" else "decide",
                      health_checks_store=options.health_checks_store)
    if go_stats is not None:  # the same engine, each answered check also counted
        service.engine = GoStatsEngine(holder, store, clock=clock, stats=stats)
        service.engine.go_stats = go_stats
    await _check_store(service, options.require_store)
    credentials = None
    if options.grpc_tls_cert is not None or options.grpc_tls_key is not None:
        if options.grpc_tls_cert is None or options.grpc_tls_key is None:
            raise TlsConfigError("gRPC TLS needs both --grpc-tls-cert and --grpc-tls-key")
        credentials = server_credentials(options.grpc_tls_cert, options.grpc_tls_key,
                                         options.grpc_tls_client_ca)
    elif options.grpc_tls_client_ca is not None:
        raise TlsConfigError("--grpc-tls-client-ca needs --grpc-tls-cert and --grpc-tls-key "
                             "(client certificates are checked on a TLS listener)")
    interceptors: list[Any] = []
    if options.grpc_tls_client_san:
        if options.grpc_tls_client_ca is None:
            raise TlsConfigError("--grpc-tls-client-san needs --grpc-tls-client-ca (mTLS: "
                                 "the SAN is checked on a verified client certificate)")
        interceptors.append(ClientSanCheck(options.grpc_tls_client_san))
    health = Health(service, options.health_interval)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    http: _UvicornServer | None = None
    http_task: asyncio.Task[None] | None = None
    grpc_server: Any = None
    tasks: list[asyncio.Task[Any]] = []
    signals: list[signal.Signals] = []
    unix_paths: list[Path] = []
    closers: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []  # other listeners

    def on_stop_signal() -> None:
        if stop.is_set():  # a second signal: stop now
            log.warning("second stop signal: closing connections now", extra={"event": "force"})
            if http is not None:
                http.force_exit = True
            if grpc_server is not None:
                tasks.append(asyncio.ensure_future(grpc_server.stop(0)))
        stop.set()

    def on_hup() -> None:
        log.info("SIGHUP: reloading %s", holder.path, extra={"event": "sighup"})
        holder.reload()

    try:
        listening: dict[str, Any] = {"event": "listening", "policies": str(holder.path),
                                     "generation": holder.current.generation,
                                     "store": store_name,
                                     "store_timeout": options.store_timeout,
                                     "loop": type(loop).__module__.split(".")[0],
                                     "json": JSON_CODEC,
                                     "compiled": _compiled_modules()}
        if options.http_port is not None or options.http_unix is not None:
            config = uvicorn.Config(
                create_app(service, options.limit_headers), host=options.host,
                port=options.http_port or 0,
                log_config=None, access_log=options.access_log, lifespan="off",
                http=http_parser(),
                server_header=False, timeout_graceful_shutdown=max(1, math.ceil(options.grace)),
            )
            socks = []
            if options.http_port is not None:
                sock = bind_tcp(options.host, options.http_port,
                                reuse_port=options.reuse_port)
                socks.append(sock)
                host, port = sock.getsockname()[:2]
                listening["http"] = f"http://{grpc_address(host, port)}"
                listening["http_port"] = port
            listening["http_parser"] = config.http
            if options.http_unix is not None:
                socks.append(bind_unix(options.http_unix))
                unix_paths.append(options.http_unix)
                listening["http_unix"] = str(options.http_unix)
            http = _UvicornServer(config)
            http_task = asyncio.create_task(http.serve(sockets=socks))
        if options.grpc_port is not None or options.grpc_unix is not None:
            if options.grpc_unix is not None:
                clear_stale_socket(options.grpc_unix)
                unix_paths.append(options.grpc_unix)
            await health.update()
            grpc_server, gport = await start_grpc_server(
                service, options.host, options.grpc_port, max_message=options.max_body,
                limit_headers=options.limit_headers,
                health=health, credentials=credentials, reuse_port=options.reuse_port,
                interceptors=interceptors,
                unix=None if options.grpc_unix is None else str(options.grpc_unix))
            tasks.append(asyncio.create_task(health.run(stop)))
            listening["grpc_health"] = health.status == SERVING
            if options.grpc_port is not None:
                listening["grpc"] = grpc_address(options.host, gport)
                listening["grpc_port"] = gport
                listening["grpc_tls"] = ("mtls" if options.grpc_tls_client_ca is not None
                                         else "tls" if credentials is not None else "off")
            if options.grpc_unix is not None:
                listening["grpc_unix"] = str(options.grpc_unix)
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, on_stop_signal)
                signals.append(sig)
        if hasattr(signal, "SIGHUP"):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signal.SIGHUP, on_hup)
                signals.append(signal.SIGHUP)
        if options.watch > 0:
            tasks.append(asyncio.create_task(Watcher(holder, options.watch).run(stop)))
        if go_stats is not None and options.go_stats is not None:
            go = options.go_stats
            if go.statsd is not None:
                tasks.append(asyncio.create_task(go_stats.flush_task(stop)))
                listening["statsd"] = f"udp://{grpc_address(*go.statsd)}"
            if go.prometheus is not None:
                phost, pport, ppath = go.prometheus
                psock = bind_tcp(phost, pport)
                prom, prom_task = await start_prometheus(go_stats, psock, ppath)
                closers.append((prom, prom_task))
                listening["prometheus"] = \
                    f"http://{grpc_address(phost, psock.getsockname()[1])}{ppath}"
                listening["prometheus_port"] = psock.getsockname()[1]
        if http is not None and http_task is not None:
            while not http.started and not http_task.done():
                await asyncio.sleep(0.005)
            if http_task.done():
                http_task.result()  # raises what stopped it
                raise OSError("the HTTP server stopped during startup")
        log.info("listening: %s", ", ".join(
            f"{k} {listening[k]}" for k in ("http", "http_unix", "grpc", "grpc_unix")
            if k in listening), extra=listening)
        if options.freeze_heap:
            gc.collect()  # nothing to collect left behind in the frozen heap
            gc.freeze()
        if on_ready is not None:
            on_ready(listening)
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(stop.wait())]
        if http_task is not None:
            waiters.append(http_task)
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if http_task is not None and http_task.done() and not stop.is_set():
            log.error("the HTTP server stopped unexpectedly", extra={"event": "http_stopped"})
        return 0
    finally:
        service.stopping = True
        await health.shutdown()  # NOT_SERVING for good, before the listeners close
        log.info("shutting down (grace %gs)", options.grace,
                 extra={"event": "stopping", "grace": options.grace})
        closing: list[Any] = []
        if grpc_server is not None:
            closing.append(grpc_server.stop(options.grace))
        if http is not None and http_task is not None:
            http.should_exit = True
            closing.append(http_task)
        for server, task in closers:
            server.should_exit = True
            closing.append(task)
        for t in tasks:
            t.cancel()
        results = await asyncio.gather(*closing, *tasks, return_exceptions=True)
        for r in results:
            if isinstance(r, Exception) and not isinstance(r, asyncio.CancelledError):
                log.warning("error while stopping: %r", r, extra={"event": "stop_error"})
        for sig in signals:
            loop.remove_signal_handler(sig)
        await close_store(store)
        for path in unix_paths:
            with contextlib.suppress(OSError):
                path.unlink()
        log.info("stopped", extra={"event": "stopped"})


async def _check_store(service: Service, required: bool) -> None:
    """Ask the store once before listening. A store that is down is not fatal by default:
    the policies' failure mode exists for exactly that, Redis may be a moment behind the
    service in a deployment, and the connection is retried on every check. Say so loudly
    (``/readyz`` answers 503 meanwhile); with `required` refuse to start instead."""
    problem = await service.engine.probe()
    if problem is None:
        return
    name = service.store_name
    if required:
        await close_store(service.store)
        raise StoreConfigError(f"the store {name} does not answer ({problem}) and "
                               "--require-store is set")
    failure = service.holder.current.settings.failure
    log.warning(
        "the store %s does not answer (%s); starting anyway: /readyz answers 503 and "
        "failure policy %r decides until it answers (--require-store: refuse to start)",
        name, problem, failure,
        extra={"event": "store_unreachable", "store": name, "error": problem})
