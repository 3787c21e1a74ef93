"""The ``serve`` and ``check-config`` subcommands, which `ratekeeper.cli` imports and offers.

    ratekeeper serve [--config FILE | --example] [--store URL] [--host H]
                     [--http-port N] [--grpc-port N] [--no-http] [--no-grpc] [--watch SECONDS]
                     [--max-body BYTES] [--grace SECONDS] [--require-store]
                     [--key-prefix P] [--max-keys N] [--store-timeout SECONDS]
                     [--log-format json|text] [--log-level LEVEL] [--access-log]
                     [--grpc-tls-cert PEM --grpc-tls-key PEM [--grpc-tls-client-ca PEM]]
                     [--http-unix PATH] [--grpc-unix PATH] [--workers N]
    ratekeeper check-config FILE_OR_DIR [...] [--quiet] [--json] [--import-hooks]

This module imports nothing heavy: `serve` imports uvicorn, grpcio and Starlette only when it
runs, and says which extra to install when they are missing; `check-config` needs only the
standard library for TOML (plus tomli on Python 3.10), and PyYAML for envoyproxy/ratelimit's
YAML.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from ..policy._loader import check_file
from ..policy._model import ConfigIssue

__all__ = ["add_check", "add_serve", "run_check", "run_serve"]

_SERVE_HELP = """\
Run the decision service: an HTTP JSON API (POST /v1/check, GET /v1/policies, /healthz,
/readyz, /healthcheck, /metrics) and Envoy's rate limit gRPC protocol
(envoy.service.ratelimit.v3.RateLimitService, with grpc.health.v1.Health and server
reflection), deciding with the policies file.
SIGHUP reloads the policies; SIGTERM/SIGINT shut down gracefully. See docs/service.md."""


def _port(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535 (0: any free port), got {n}")
    return n


def _seconds(text: str, *, zero: bool = False) -> float:
    """A finite number of seconds, above 0 (or at least 0 when `zero`)."""
    try:
        f = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (f < math.inf and (f >= 0 if zero else f > 0)):
        raise argparse.ArgumentTypeError(
            f"must be a finite number of seconds {'>= 0' if zero else 'above 0'}, got {text}")
    return f


def _seconds_or_zero(text: str) -> float:
    return _seconds(text, zero=True)


#: RFC 9110's token characters: what a header field name may be made of.
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _header_name(text: str) -> str:
    if not text or not set(text) <= _TCHAR:
        raise argparse.ArgumentTypeError(
            f"not an HTTP header name: {text!r} (letters, digits and !#$%&'*+-.^_`|~ only)")
    return text


#: envoyproxy/ratelimit's settings behind the --limit-* flags, and their defaults.
_LIMIT_HEADER_ENV = (("limit_limit_header", "LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
                     ("limit_remaining_header", "LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
                     ("limit_reset_header", "LIMIT_RESET_HEADER", "RateLimit-Reset"))


def _limit_header_names(args: argparse.Namespace,
                        env: Mapping[str, str]) -> tuple[str, str, str] | None:
    """The names of envoyproxy/ratelimit's three headers when they are on (a flag, else its
    environment variable, else its default), or None; ValueError says which setting is bad."""
    raw = env.get("LIMIT_RESPONSE_HEADERS_ENABLED", "")
    if raw not in _GO_BOOLS:
        raise ValueError(f"LIMIT_RESPONSE_HEADERS_ENABLED={raw!r} is not a boolean "
                         "(true or false)")
    if not (args.limit_response_headers or _GO_BOOLS[raw]):
        return None
    names = []
    for attr, var, default in _LIMIT_HEADER_ENV:
        name = getattr(args, attr) or env.get(var) or default
        try:
            names.append(_header_name(name))
        except argparse.ArgumentTypeError as e:
            raise ValueError(f"{var}: {e}") from None
    return names[0], names[1], names[2]


#: ``--failure``'s choices (``ServeOptions.failure``).
FAILURES = ("open", "closed", "local", "error")


def _failure_choice(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """``--failure``, else ``RATEKEEPER_FAILURE``, else None (the policies decide);
    ValueError names a bad environment value and the choices."""
    if args.failure is not None:
        return str(args.failure)
    raw = env.get("RATEKEEPER_FAILURE", "")
    if not raw:
        return None
    if raw not in FAILURES:
        raise ValueError(f"RATEKEEPER_FAILURE={raw!r} is not a failure policy: choose one of "
                         f"{', '.join(FAILURES)}")
    return raw


#: Go's strconv.ParseBool forms (envoyproxy/ratelimit reads its settings with it); unset: false.
_GO_BOOLS = {"": False, **dict.fromkeys(("1", "t", "T", "true", "TRUE", "True"), True),
             **dict.fromkeys(("0", "f", "F", "false", "FALSE", "False"), False)}


def _go_bool(env: Mapping[str, str], name: str) -> bool:
    """envoyproxy/ratelimit's boolean setting `name` (unset: false); ValueError if it is not
    one of Go's forms."""
    raw = env.get(name, "")
    if raw not in _GO_BOOLS:
        raise ValueError(f"{name}={raw!r} is not a boolean (true or false)")
    return _GO_BOOLS[raw]


class GoSettings(NamedTuple):
    """What envoyproxy/ratelimit's environment says that no flag carries."""

    shadow_mode: bool
    merge_domains: bool


#: envoyproxy/ratelimit's settings that change behaviour ratekeeper does not have, with their
#: Go defaults (a value equal to it is accepted: it asks for what happens here anyway) and
#: why a different one is refused. docs/service.md's settings table lists every setting.
_GO_REFUSED: dict[str, tuple[str, str]] = {
    "QUOTA_MODE": ("false", "global quota mode is not implemented; set quota_mode: true on "
                            "the descriptors instead"),
    "RESPONSE_DYNAMIC_METADATA": ("false", "no dynamic metadata is sent"),
    "BACKEND_TYPE": ("redis", "the store is Redis or memory (--store); there is no memcache"),
    "CONFIG_TYPE": ("FILE", "configuration comes from files only (no xDS)"),
    "REDIS_TYPE": ("SINGLE", "pass --store with a redis+sentinel:// or redis+cluster:// URL"),
    "REDIS_PERSECOND": ("false", "one store serves every unit; per-second limits are not "
                                 "sent to a second Redis"),
    "LOCAL_CACHE_SIZE_IN_BYTES": ("0", "there is no local over-limit cache"),
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": ("false", "a rejected request is never "
                                                          "charged here anyway"),
    "TRACING_ENABLED": ("false", "no OpenTelemetry tracing"),
    "USE_DOG_STATSD": ("false", "no DogStatsD"),
    "FORCE_START_WITHOUT_INITIAL_CONFIG": ("false", "the service does not start without "
                                                    "valid policies"),
}

#: Go's LOG_LEVEL names (logrus, any case) as --log-level's.
_GO_LOG_LEVELS = {"trace": "debug", "debug": "debug", "info": "info", "warn": "warning",
                  "warning": "warning", "error": "error", "fatal": "error", "panic": "error"}


def go_settings(args: argparse.Namespace, env: Mapping[str, str]) -> GoSettings:
    """Fill what no flag gave from envoyproxy/ratelimit's environment (HOST, PORT,
    GRPC_PORT, GRPC_UDS, LOG_LEVEL, LOG_FORMAT, RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
    RUNTIME_APPDIRECTORY, REDIS_SOCKET_TYPE/REDIS_URL/REDIS_AUTH/REDIS_TLS), then the
    defaults; return SHADOW_MODE and MERGE_DOMAIN_CONFIG. ValueError names a setting that is
    malformed, or that asks for what cannot be honoured, and what to do instead."""
    for name, (default, why) in _GO_REFUSED.items():
        raw = env.get(name)
        if raw is not None and raw != "" and raw.lower() != default.lower():
            raise ValueError(f"{name}={raw!r} cannot be honoured: {why} (unset it, or set "
                             f"it to {default!r})")
    grpc_host = env.get("GRPC_HOST")
    if args.host is None:
        args.host = env.get("HOST") or "127.0.0.1"
    if grpc_host and grpc_host != args.host:
        raise ValueError(f"GRPC_HOST={grpc_host!r} differs from the address the service "
                         f"listens on ({args.host!r}): both listeners share --host (HOST); "
                         "set GRPC_HOST to the same address or unset it")
    ports: tuple[tuple[str, str, int], ...] = (("http_port", "PORT", 8080),
                                               ("grpc_port", "GRPC_PORT", 8081))
    for attr, var, port in ports:
        if getattr(args, attr) is None:
            raw = env.get(var)
            try:
                setattr(args, attr, _port(raw) if raw else port)
            except argparse.ArgumentTypeError as e:
                raise ValueError(f"{var}: {e}") from None
    if args.grpc_unix is None and env.get("GRPC_UDS"):
        args.grpc_unix = Path(env["GRPC_UDS"])
    if args.log_level is None:
        raw = env.get("LOG_LEVEL", "")
        if raw and raw.lower() not in _GO_LOG_LEVELS:
            raise ValueError(f"LOG_LEVEL={raw!r} is not a log level (debug, info, warn, "
                             "error)")
        args.log_level = _GO_LOG_LEVELS[raw.lower()] if raw else "info"
    if args.log_format is None:
        raw = env.get("LOG_FORMAT", "")
        if raw and raw not in ("text", "json"):
            raise ValueError(f"LOG_FORMAT={raw!r} is not a log format (text or json)")
        args.log_format = raw or "json"
    if args.config is None and not args.example and env.get("RUNTIME_ROOT"):
        args.config = Path(env["RUNTIME_ROOT"], env.get("RUNTIME_SUBDIRECTORY", ""),
                           env.get("RUNTIME_APPDIRECTORY") or "config")
    if args.store is None and env.get("REDIS_URL"):
        args.store = _go_redis_url(env)
    _go_tls(args, env)
    return GoSettings(_go_bool(env, "SHADOW_MODE"), _go_bool(env, "MERGE_DOMAIN_CONFIG"))


def _go_tls(args: argparse.Namespace, env: Mapping[str, str]) -> None:
    """--grpc-tls-* from envoyproxy/ratelimit's GRPC_SERVER_USE_TLS, GRPC_SERVER_TLS_CERT,
    GRPC_SERVER_TLS_KEY, GRPC_CLIENT_TLS_CACERT and GRPC_CLIENT_TLS_SAN (read only with
    GRPC_SERVER_USE_TLS=true, as the Go service) where no flag gave them."""
    if not _go_bool(env, "GRPC_SERVER_USE_TLS"):
        return
    for attr, var in (("grpc_tls_cert", "GRPC_SERVER_TLS_CERT"),
                      ("grpc_tls_key", "GRPC_SERVER_TLS_KEY"),
                      ("grpc_tls_client_ca", "GRPC_CLIENT_TLS_CACERT")):
        if getattr(args, attr) is None and env.get(var):
            setattr(args, attr, Path(env[var]))
    if args.grpc_tls_client_san is None and env.get("GRPC_CLIENT_TLS_SAN"):
        args.grpc_tls_client_san = env["GRPC_CLIENT_TLS_SAN"]
    if args.grpc_tls_cert is None or args.grpc_tls_key is None:
        raise ValueError("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and "
                         "GRPC_SERVER_TLS_KEY (PEM files: the certificate chain and its key)")


def _go_redis_url(env: Mapping[str, str]) -> str:
    """--store for envoyproxy/ratelimit's REDIS_SOCKET_TYPE, REDIS_URL, REDIS_AUTH and
    REDIS_TLS (a ``user:password`` REDIS_AUTH as its ``user:password``)."""
    from urllib.parse import quote  # noqa: PLC0415

    kind = env.get("REDIS_SOCKET_TYPE", "unix")
    address = env["REDIS_URL"]
    auth = env.get("REDIS_AUTH", "")
    cred = ""
    if auth:
        user, _, password = auth.rpartition(":")
        cred = f"{quote(user, safe='')}:{quote(password, safe='')}@"
    if kind == "unix":
        return f"unix://{cred}{address}"
    if kind != "tcp":
        raise ValueError(f"REDIS_SOCKET_TYPE={kind!r} is not tcp or unix")
    scheme = "rediss" if _go_bool(env, "REDIS_TLS") else "redis"
    return f"{scheme}://{cred}{address}"


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of processes: {text!r}") from None
    if not 1 <= n <= 256:
        raise argparse.ArgumentTypeError(f"--workers must be 1..256, got {n}")
    return n


def add_serve(p: argparse.ArgumentParser) -> None:
    p.description = _SERVE_HELP
    src = p.add_mutually_exclusive_group()
    src.add_argument("--config", "-c", type=Path, default=None,
                     help="policies: a TOML file, or envoyproxy/ratelimit's YAML (a .yaml file "
                          "or its runtime config/ directory of them); default: the bundled "
                          "example policies")
    src.add_argument("--example", action="store_true",
                     help="serve the bundled example policies (examples/policies.toml)")
    p.add_argument("--store", default=None,
                   help="where counters live: memory:// (default, this process only) or "
                        "redis://host:6379/0 (shared by every replica)")
    p.add_argument("--host", default=None,
                   help="address to listen on (default 127.0.0.1; 0.0.0.0 for every "
                        "interface; env HOST)")
    p.add_argument("--http-port", type=_port, default=None,
                   help="HTTP API port (default 8080; env PORT)")
    p.add_argument("--grpc-port", type=_port, default=None,
                   help="gRPC (Envoy rate limit service) port (default 8081; env GRPC_PORT)")
    p.add_argument("--no-http", action="store_true", help="do not serve the HTTP API")
    p.add_argument("--no-grpc", action="store_true", help="do not serve gRPC")
    p.add_argument("--watch", type=_seconds_or_zero, default=0.0, metavar="SECONDS",
                   help="also reload the policies when the file changes (polled every SECONDS)")
    p.add_argument("--max-body", type=int, default=64 * 1024, metavar="BYTES",
                   help="largest HTTP body / gRPC message accepted (default 65536)")
    p.add_argument("--grace", type=_seconds_or_zero, default=10.0, metavar="SECONDS",
                   help="on SIGTERM, how long calls in flight may take to finish (default 10)")
    p.add_argument("--require-store", action="store_true",
                   help="exit 1 if the store does not answer at startup (default: start, "
                        "warn, and let the policies' failure mode decide until it answers)")
    p.add_argument("--failure", choices=FAILURES, default=None,
                   help="what a store failure is answered with, whatever the policies say: "
                        "open (admit), closed (reject), local (a memory store decides), or "
                        "error (gRPC UNAVAILABLE / HTTP 503, as envoyproxy/ratelimit: Envoy's "
                        "failure_mode_deny decides); default: the policies' [service] failure "
                        "(open for envoyproxy/ratelimit's YAML); env RATEKEEPER_FAILURE")
    p.add_argument("--health-checks-store", action="store_true",
                   help="the gRPC health service and /healthcheck say NOT_SERVING / 500 while "
                        "the store does not answer (default: SERVING until shutdown, as "
                        "envoyproxy/ratelimit; /readyz always asks the store); env "
                        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")
    p.add_argument("--key-prefix", default="rk:", help="Redis key prefix (default rk:)")
    p.add_argument("--store-timeout", type=_seconds, default=None, metavar="SECONDS",
                   help="how long one store call may take before the failure policy decides "
                        "(default: the store's, 0.25 for Redis); the budget of a decision")
    p.add_argument("--max-keys", type=int, default=1_000_000,
                   help="memory store: keys kept per limit before the least recently used "
                        "go (default 1000000)")
    p.add_argument("--log-format", choices=("json", "text"), default=None,
                   help="json (default): one JSON object per line on stderr (env LOG_FORMAT)")
    p.add_argument("--log-level", default=None,
                   choices=("debug", "info", "warning", "error"),
                   help="default info (env LOG_LEVEL)")
    p.add_argument("--access-log", action="store_true", help="log every HTTP request")
    p.add_argument("--grpc-tls-cert", type=Path, default=None, metavar="PEM",
                   help="serve gRPC over TLS with this certificate (chain) file; needs "
                        "--grpc-tls-key")
    p.add_argument("--grpc-tls-key", type=Path, default=None, metavar="PEM",
                   help="the private key of --grpc-tls-cert")
    p.add_argument("--grpc-tls-client-ca", type=Path, default=None, metavar="PEM",
                   help="mTLS: require client certificates signed by this CA")
    p.add_argument("--grpc-tls-client-san", default=None, metavar="NAME",
                   help="mTLS: a client certificate must name NAME among its subject "
                        "alternative names (env GRPC_CLIENT_TLS_SAN)")
    p.add_argument("--http-unix", type=Path, default=None, metavar="PATH",
                   help="also serve the HTTP API on this unix socket (with --no-http: only "
                        "there)")
    p.add_argument("--grpc-unix", type=Path, default=None, metavar="PATH",
                   help="also serve gRPC on this unix socket, plaintext (with --no-grpc: "
                        "only there)")
    # envoyproxy/ratelimit's custom response headers, under its option names; the defaults
    # come from its environment variables, so its deployment's settings carry over.
    p.add_argument("--limit-response-headers", action="store_true",
                   help="gRPC: send envoyproxy/ratelimit's three limit headers (names below) "
                        "instead of RateLimit-Policy/RateLimit (env "
                        "LIMIT_RESPONSE_HEADERS_ENABLED)")
    p.add_argument("--limit-limit-header", type=_header_name, metavar="NAME",
                   help="its limit header (default RateLimit-Limit; env LIMIT_LIMIT_HEADER)")
    p.add_argument("--limit-remaining-header", type=_header_name, metavar="NAME",
                   help="its remaining header (default RateLimit-Remaining; env "
                        "LIMIT_REMAINING_HEADER)")
    p.add_argument("--limit-reset-header", type=_header_name, metavar="NAME",
                   help="its reset header, in seconds (default RateLimit-Reset; env "
                        "LIMIT_RESET_HEADER)")
    p.add_argument("--workers", type=_workers, default=1, metavar="N",
                   help="N service processes on the same ports (SO_REUSEPORT; the kernel "
                        "spreads connections over them); needs a shared store (redis://...)")
    p.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # a worker


def run_serve(args: argparse.Namespace) -> int:
    try:
        from ..policy._model import PolicyError  # noqa: PLC0415
        from ._gostats import options_from_env  # noqa: PLC0415
        from ._grpc import LimitHeaders  # noqa: PLC0415
        from ._grpc_ops import TlsConfigError  # noqa: PLC0415
        from ._logging import setup_logging  # noqa: PLC0415
        from ._server import (  # noqa: PLC0415
            EXAMPLE_POLICIES,
            ServeOptions,
            StoreConfigError,
            run,
            serve,
        )
    except ImportError as e:
        print(f"ratekeeper serve needs the service extra: pip install 'ratekeeper[service]' "
              f"({e})", file=sys.stderr)
        return 2
    if args.no_http and args.no_grpc and args.http_unix is None and args.grpc_unix is None:
        print("ratekeeper serve: --no-http and --no-grpc leave nothing to serve",
              file=sys.stderr)
        return 2
    try:
        go = go_settings(args, os.environ)
        header_names = _limit_header_names(args, os.environ)
        failure = _failure_choice(args, os.environ)
        health_checks_store = args.health_checks_store or _go_bool(
            os.environ, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")
        go_stats = options_from_env(os.environ, args.host)
    except ValueError as e:
        print(f"ratekeeper serve: {e}", file=sys.stderr)
        return 2
    setup_logging(args.log_format, args.log_level)
    if args.workers > 1:
        return _run_workers(args)
    config = args.config if args.config is not None else EXAMPLE_POLICIES
    if args.config is None and not args.example:
        import logging  # noqa: PLC0415

        logging.getLogger("ratekeeper.service").warning(
            "no --config given: serving the bundled example policies (%s)", config,
            extra={"event": "example_policies"})
    options = ServeOptions(
        config=config, store=args.store, host=args.host,
        http_port=None if args.no_http else args.http_port,
        grpc_port=None if args.no_grpc else args.grpc_port,
        watch=args.watch, max_body=args.max_body, grace=args.grace,
        access_log=args.access_log, key_prefix=args.key_prefix, max_keys=args.max_keys,
        require_store=args.require_store, store_timeout=args.store_timeout,
        grpc_tls_cert=args.grpc_tls_cert, grpc_tls_key=args.grpc_tls_key,
        grpc_tls_client_ca=args.grpc_tls_client_ca, grpc_tls_client_san=args.grpc_tls_client_san,
        limit_headers=None if header_names is None else LimitHeaders(*header_names),
        http_unix=args.http_unix, grpc_unix=args.grpc_unix, reuse_port=args.reuse_port,
        health_checks_store=health_checks_store, shadow_mode=go.shadow_mode,
        merge_domains=go.merge_domains, freeze_heap=True, failure=failure,  # type: ignore[arg-type]
        go_stats=go_stats,
    )
    try:
        return int(run(serve(options)))
    except PolicyError as e:
        print(f"ratekeeper serve: not starting: {e}", file=sys.stderr)
        return 2
    except (StoreConfigError, TlsConfigError, OSError) as e:
        print(f"ratekeeper serve: not starting: {e}", file=sys.stderr)
        return 1


def _run_workers(args: argparse.Namespace) -> int:
    """``serve --workers N``: N ``serve`` processes sharing the TCP ports (SO_REUSEPORT),
    supervised here: signals are passed on to every worker (SIGHUP reloads each one's
    policies, SIGTERM/SIGINT stop them), and when one exits on its own the others are
    stopped and its status returned."""
    import logging  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import socket  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import time  # noqa: PLC0415
    from urllib.parse import urlsplit  # noqa: PLC0415

    from ._server import bind_tcp  # noqa: PLC0415

    n = args.workers
    if urlsplit(args.store or "memory://").scheme in ("", "memory"):
        print(f"ratekeeper serve: --workers {n} needs a shared store: with the memory store "
              f"each worker would keep counters of its own, so every limit would let up to "
              f"{n} times its rate through. Pass --store redis://HOST:6379/0, or run one "
              "worker", file=sys.stderr)
        return 2
    if args.http_unix is not None or args.grpc_unix is not None:
        print("ratekeeper serve: --workers shares TCP ports only; serve a unix socket "
              "(--http-unix, --grpc-unix) from a single process", file=sys.stderr)
        return 2
    if "serve" not in sys.argv[1:]:
        print("ratekeeper serve: --workers starts `ratekeeper serve` again: run it from the "
              "command line", file=sys.stderr)
        return 2
    # The ports are bound here first (port 0: the OS picks), with SO_REUSEPORT and never
    # listened on, so every worker binds the same ones and the port stays ours throughout.
    holders: list[socket.socket] = []
    ports: list[str] = []
    try:
        for flag, port, off in (("--http-port", args.http_port, args.no_http),
                                ("--grpc-port", args.grpc_port, args.no_grpc)):
            if not off:
                holders.append(bind_tcp(args.host, port, reuse_port=True))
                ports += [flag, str(holders[-1].getsockname()[1])]
    except OSError as e:
        for h in holders:
            h.close()
        print(f"ratekeeper serve: not starting: {e}", file=sys.stderr)
        return 1
    argv = [sys.executable, "-c", "import sys; from ratekeeper.cli import main; "
            "sys.exit(main())", *sys.argv[1:], *ports, "--workers", "1", "--reuse-port"]
    procs = [subprocess.Popen(argv) for _ in range(n)]
    logging.getLogger("ratekeeper.service").info(
        "started %d workers: %s", n, ", ".join(str(p.pid) for p in procs),
        extra={"event": "workers", "pids": [p.pid for p in procs]})
    stopping = False

    def forward(sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = stopping or sig != signal.SIGHUP
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)

    handled = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]
    previous = {s: signal.signal(s, forward) for s in handled}
    status = 0
    try:
        while any(p.poll() is None for p in procs):
            for p in procs:
                if p.returncode is not None and not stopping:
                    # One ended on its own (a startup error, a crash): stop the rest.
                    status = p.returncode or 1
                    forward(signal.SIGTERM, None)
            time.sleep(0.1)
        return status or max((p.returncode or 0) for p in procs)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for h in holders:
            h.close()


def add_check(p: argparse.ArgumentParser) -> None:
    p.description = ("Validate policies files: ratekeeper's TOML, or envoyproxy/ratelimit's "
                     "YAML (a .yaml/.yml file or a directory of them). Print every error with "
                     "its location (file, line where the parser gives it, key path) and exit "
                     "1 if there is any.")
    p.add_argument("files", nargs="+", type=Path, metavar="FILE_OR_DIR")
    p.add_argument("--quiet", "-q", action="store_true", help="print errors only")
    p.add_argument("--json", action="store_true",
                   help="print the policies as GET /v1/policies documents them (valid files)")
    p.add_argument("--import-hooks", action="store_true",
                   help="import the Python hooks the files name, which runs their modules' "
                        "code (default: check only how each is written and list them as "
                        "unchecked, so that checking an untrusted file runs none of it)")


def _located(path: Path, issue: ConfigIssue) -> str:
    """``file:line: key path: message`` (the compiler form editors jump to); ``file: key path:
    message`` when the parser gives no line (TOML)."""
    where = issue.file or str(path)
    if issue.line is not None:
        where += f":{issue.line}"
    rest = f"{issue.location}: {issue.message}" if issue.location else issue.message
    return f"{where}: {rest}"


def run_check(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        policies, issues = check_file(path, import_hooks=args.import_hooks)
        if issues:
            failed += 1
            for issue in issues:
                print(_located(path, issue))
            n = len(issues)
            print(f"{path}: {n} error{'s' if n != 1 else ''}", file=sys.stderr)
        elif policies is not None:
            if args.json:
                print(json.dumps(policies.describe(), indent=2))
            elif not args.quiet:
                print(f"{path}: OK ({policies.summary()})")
            if policies.unchecked_hooks and not args.quiet:
                print(f"{path}: hooks not imported, so unchecked: "
                      f"{', '.join(policies.unchecked_hooks)} (--import-hooks imports them, "
                      "running their code)", file=sys.stderr if args.json else sys.stdout)
    return 1 if failed else 0
