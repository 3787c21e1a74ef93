"""redis-py clients for the stores: URL -> client, the fail-fast cluster classes, and which
client exceptions mean "unavailable".

Imported first by the package: a missing redis-py says what to install."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple
from urllib.parse import unquote

try:
    import redis
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.asyncio.retry
    import redis.asyncio.sentinel
    import redis.cluster
    import redis.exceptions as rex
    import redis.sentinel
    from redis.backoff import NoBackoff
    from redis.retry import Retry
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"the Redis store needs redis-py ({e}); install it with: pip install 'ratekeeper[redis]' "
        "(or 'ratekeeper[hiredis]' for the faster parser)"
    ) from e

try:  # redis-py's own hiredis packer (its sync connections use it when hiredis is there)
    import hiredis
    from redis.connection import HiredisRespSerializer as _HiredisRespSerializer
    _HIREDIS_PACK = callable(getattr(hiredis, "pack_command", None))
except ImportError:  # pragma: no cover - depends on the environment
    _HIREDIS_PACK = False

from ..._errors import ConfigError
from .._urlforms import VALID_FORMS, redact

# redis-py leaves these untyped; called through Any so mypy --strict accepts them.
_SyncSentinel: Any = redis.sentinel.Sentinel
_AsyncSentinel: Any = redis.asyncio.sentinel.Sentinel


class ClusterDownReply(rex.ResponseError):
    """``-CLUSTERDOWN`` / ``-MASTERDOWN`` from a node of the store's own cluster client.

    redis-py's cluster client sleeps 0.25 s on a `ClusterDownError` and then retries, so
    during a failover a call on a *healthy* primary's slot took 0.51 s although the node
    had answered in a millisecond. Re-raised under this class it is neither slept on nor
    retried: the call fails at once as unavailable, and the breaker and the failure
    policy decide.
    """


def _fail_fast_read(cls: type[Any]) -> type[Any]:
    """`cls` (a redis-py connection class) whose CLUSTERDOWN/MASTERDOWN replies raise
    `ClusterDownReply` instead."""

    def read_response(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super(sub, self).read_response(*args, **kwargs)
        except rex.ClusterDownError as e:  # MasterDownError too
            code = "MASTERDOWN" if isinstance(e, rex.MasterDownError) else "CLUSTERDOWN"
            raise ClusterDownReply(f"{code} {e}") from None

    sub: type[Any] = type(cls.__name__, (cls,), {"read_response": read_response})
    return sub


_FAIL_FAST: dict[type[Any], type[Any]] = {}


class _FailFastPool(redis.ConnectionPool):
    """The node pools of the store's cluster client (plain or TLS connections alike)."""

    def __init__(self, connection_class: type[Any] = redis.connection.Connection,
                 **kwargs: Any) -> None:
        sub = _FAIL_FAST.get(connection_class)
        if sub is None:
            sub = _FAIL_FAST[connection_class] = _fail_fast_read(connection_class)
        super().__init__(connection_class=sub, **kwargs)


class _StoreCluster(redis.cluster.RedisCluster):
    """The cluster client `from_url` builds: it retries (once, after refreshing the
    topology) only what fails at once, a refused or reset connection or a slot not in
    its table yet, never a timeout: so a call takes at most one timeout, not two."""

    # redis-py types it as its own default's tuple; any tuple of classes works
    ERRORS_ALLOW_RETRY = (rex.ConnectionError, rex.SlotNotCoveredError)  # type: ignore[assignment]


#: Client exceptions that mean "the server cannot serve this now", not "bad request".
#: Classified by type: redis-py strips the code of the replies it maps to a class
#: (``-OOM ...`` arrives as `OutOfMemoryError` with the text after "OOM").
_UNAVAILABLE_TYPES: tuple[type[BaseException], ...] = (
    rex.ConnectionError,  # includes BusyLoadingError (LOADING), AuthenticationError,
    rex.TimeoutError,     # MasterNotFoundError
    rex.ClusterDownError,  # CLUSTERDOWN, and MasterDownError (MASTERDOWN)
    rex.TryAgainError,  # TRYAGAIN
    rex.ReadOnlyError,  # READONLY (a replica, or a primary demoted by a failover)
    rex.OutOfMemoryError,  # OOM (maxmemory reached under noeviction)
    rex.AskError,  # ASK and MovedError (MOVED): redirects the client did not follow
    rex.SlotNotCoveredError,
    ClusterDownReply,
    rex.RedisClusterException,  # "cannot connect to any node", topology failures
    OSError,
    asyncio.TimeoutError,
    TimeoutError,
)
#: Reply codes of refusals that redis-py has no class for (the reply keeps its code):
#: a script of another client running too long, and too few replicas for a write.
_UNAVAILABLE_CODES = frozenset({"BUSY", "NOREPLICAS"})


class LoopInUse(RuntimeError):
    """An asyncio store called on one event loop while the loop it runs on is running too
    (`_Wire.refuse_other_loop`): a mistake in the program, raised to the caller whatever
    the failure policy, not a store failure."""


#: What a call raises as it is, whatever the failure policy: the program's own mistakes.
_MISUSE: tuple[type[BaseException], ...] = (LoopInUse,)


class _Target(NamedTuple):
    kind: Literal["standalone", "cluster", "sentinel"]
    url: str  # for standalone / cluster: a URL redis-py understands
    sentinels: list[tuple[str, int]]
    service: str
    db: int
    username: str | None
    password: str | None
    ssl: bool


def _parse_target(url: str, cluster: bool | None) -> _Target:
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            f"not a Redis URL: {url!r}; use redis://host:port/db, rediss://..., unix:///path, "
            "redis+cluster://host:port or redis+sentinel://host:port/mastername"
        )
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme in ("redis+cluster", "rediss+cluster"):
        if cluster is False:
            raise ConfigError(f"{url!r} names a cluster but cluster=False was given")
        return _Target("cluster", scheme.split("+")[0] + "://" + rest, [], "", 0, None, None,
                       scheme.startswith("rediss"))
    if scheme in ("redis+sentinel", "rediss+sentinel"):
        userinfo, _, hostpart = rest.rpartition("@")
        username = password = None
        if userinfo:
            user, _, pw = userinfo.partition(":")
            username, password = unquote(user) or None, unquote(pw) or None
        hostpart = hostpart.split("?", 1)[0]
        hosts, _, path = hostpart.partition("/")
        parts = [p for p in path.split("/") if p]
        if not parts:
            raise ConfigError(
                f"a sentinel URL needs the master's name: redis+sentinel://host:port/mymaster, "
                f"got {url!r}"
            )
        try:
            db = int(parts[1]) if len(parts) > 1 else 0
            sentinels = []
            for h in hosts.split(","):
                host, _, port = h.rpartition(":") if ":" in h else (h, "", "26379")
                sentinels.append((host.strip("[]"), int(port)))
        except ValueError:
            raise ConfigError(
                f"cannot parse sentinel URL {url!r}: ports and the db are numbers"
            ) from None
        return _Target("sentinel", url, sentinels, unquote(parts[0]), db, username, password,
                       scheme.startswith("rediss"))
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            f"unsupported URL scheme {scheme!r} in {redact(url)!r}; use {VALID_FORMS}")
    if cluster:
        if scheme == "unix":
            raise ConfigError("Redis Cluster does not work over unix sockets")
        return _Target("cluster", url, [], "", 0, None, None, scheme == "rediss")
    return _Target("standalone", url, [], "", 0, None, None, scheme == "rediss")




def _client_kwargs(timeout: float, connect_timeout: float | None,
                   options: Mapping[str, Any] | None) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": connect_timeout if connect_timeout is not None else timeout,
    }
    kw.update(options or {})
    return kw


def _check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not 0 < timeout < math.inf:
        raise ConfigError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    return float(timeout)


def _describe_client(client: Any) -> str:
    try:
        if isinstance(client, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)):
            nodes = client.get_nodes() if hasattr(client, "get_nodes") else []
            first = nodes[0].name if nodes else "?"
            return f"cluster {first}"
        kw = client.connection_pool.connection_kwargs
        if "path" in kw:
            return f"unix://{kw['path']}"
        if "service_name" in getattr(client.connection_pool, "__dict__", {}):
            return f"sentinel master {client.connection_pool.service_name}"
        return f"redis://{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"
    except Exception:
        return type(client).__name__


def _sentinel_master(sentinel_class: Any, target: _Target, kw: dict[str, Any]) -> Any:
    sentinel = sentinel_class(
        target.sentinels,
        sentinel_kwargs={k: v for k, v in kw.items() if k.startswith("socket_")},
        **({"ssl": True} if target.ssl else {}),
        **{k: v for k, v in kw.items() if k != "retry"},
    )
    return sentinel.master_for(target.service, db=target.db, username=target.username,
                               password=target.password, retry=kw["retry"])


def sync_client(target: _Target, kw: dict[str, Any]
                ) -> tuple[redis.Redis | None, Callable[[], redis.cluster.RedisCluster] | None]:
    """``(client, None)``, or for a cluster ``(None, connect)``: redis-py's cluster client
    connects when built, so it is built on first use (a down cluster does not stop
    start-up). No retries but the cluster's one after a refused connection (see
    `_StoreCluster`)."""
    if target.kind == "cluster":
        kw.setdefault("retry", Retry(NoBackoff(), 1))
        url = target.url

        def connect() -> redis.cluster.RedisCluster:
            return _StoreCluster.from_url(url, connection_pool_class=_FailFastPool, **kw)

        return None, connect
    kw.setdefault("retry", Retry(NoBackoff(), 0))
    if target.kind == "sentinel":
        return _sentinel_master(_SyncSentinel, target, kw), None
    return redis.Redis.from_url(target.url, **kw), None


def async_client(target: _Target, kw: dict[str, Any]
                 ) -> redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster:
    """`sync_client` for asyncio (redis-py's asyncio cluster client connects lazily), its
    connections packing commands with hiredis where it is installed (`hiredis_packing`)."""
    # redis-py's asyncio Retry (redis 8 warns on a sync one and converts it)
    kw.setdefault("retry",
                  redis.asyncio.retry.Retry(NoBackoff(), 1 if target.kind == "cluster" else 0))
    if target.kind == "cluster":
        cluster = redis.asyncio.cluster.RedisCluster.from_url(target.url, **kw)
        # Nodes found later are built from these kwargs; the startup ones already exist.
        ckw = cluster.connection_kwargs
        ckw["connection_class"] = hiredis_packing(ckw["connection_class"])
        for node in cluster.nodes_manager.startup_nodes.values():
            node.connection_class = hiredis_packing(node.connection_class)
        return cluster
    if target.kind == "sentinel":
        client: redis.asyncio.Redis = _sentinel_master(_AsyncSentinel, target, kw)
    else:
        client = redis.asyncio.Redis.from_url(target.url, **kw)
    pool = client.connection_pool
    pool.connection_class = hiredis_packing(pool.connection_class)
    return client


_HIREDIS_PACKING: dict[type[Any], type[Any]] = {}


def hiredis_packing(cls: type[Any]) -> type[Any]:
    """`cls` (a redis-py asyncio connection class) packing commands with hiredis, as
    redis-py's sync connections do when hiredis is installed (its asyncio ones pack in
    Python, ~0.5 µs per argument, and a composite decision sends ~20); `cls` itself without
    hiredis. The bytes sent are the same and so is the type of the errors (`DataError`, with
    hiredis's message), tested on the store's kinds of server (tests/integration); a str is
    always sent as UTF-8, as by redis-py's sync connections, whatever the client's
    ``encoding`` (the store sends ASCII: %-encoded keys, numbers, its scripts)."""
    if not _HIREDIS_PACK:
        return cls
    sub = _HIREDIS_PACKING.get(cls)
    if sub is None:
        packer = _HiredisRespSerializer()  # type: ignore[no-untyped-call]
        pack = hiredis.pack_command

        def pack_command(self: Any, *args: Any) -> list[bytes]:
            # hiredis itself for the usual command (a one-word name, str/bytes/number
            # arguments); redis-py's packer, which first splits "SCRIPT LOAD"-like names on
            # whitespace and copies bytearrays, for the rest (and for its DataError on a bad
            # argument). Its own pack runs a generator over every argument: ~1k
            # instructions each.
            if args[0].isalpha():
                try:
                    return [pack(args)]
                except TypeError:
                    pass
            packed: list[bytes] = packer.pack(*args)
            return packed

        sub = _HIREDIS_PACKING[cls] = type(cls.__name__, (cls,),
                                           {"pack_command": pack_command})
    return sub
