"""The real-server fixtures themselves work: standalone redis/valkey, cluster, sentinel."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import redis.cluster
import redis.exceptions
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.integration.conftest import missing
from tests.servers import (
    RedisCluster,
    RedisServer,
    SentinelSetup,
    ServerKind,
    assert_all_keys_have_ttl,
    find_server_binary,
    server_version,
    wait_until,
)

NO_RETRY = Retry(NoBackoff(), 0)


def _major(version: str) -> int:
    return int(version.split(".", maxsplit=1)[0])


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a reaped child cannot be signalled; a zombie still can, so check its state
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@contextmanager
def sentinel_client(setup: SentinelSetup) -> Iterator[redis.sentinel.Sentinel]:
    client = redis.sentinel.Sentinel(
        setup.sentinels, socket_timeout=2.0, sentinel_kwargs={"socket_timeout": 2.0}
    )
    try:
        yield client
    finally:
        for conn in client.sentinels:
            conn.close()


# ------------------------------------------------------------------ standalone


def test_ping_and_set_get(any_server: RedisServer, any_client: redis.Redis) -> None:
    assert any_server.host == "127.0.0.1"
    assert any_server.url == f"redis://127.0.0.1:{any_server.port}/0"
    assert any_client.ping() is True
    assert any_client.set("k", "v", ex=10)
    assert any_client.get("k") == b"v"
    assert any_client.dbsize() == 1


def test_any_server_is_flushed_between_tests(any_client: redis.Redis) -> None:
    assert any_client.dbsize() == 0


def test_no_persistence(any_server: RedisServer) -> None:
    with any_server.admin() as c:
        assert c.config_get("save")["save"] == ""
        assert c.config_get("appendonly")["appendonly"] == "no"
        assert c.config_get("bind")["bind"] == "127.0.0.1"


def test_valkey_is_really_valkey_8(valkey_server: RedisServer) -> None:
    info = valkey_server.info("server")
    assert info.get("server_name") == "valkey", info
    assert _major(str(info["valkey_version"])) == 8, info
    assert server_version(valkey_server.binary) == ("valkey", str(info["valkey_version"]))


def test_redis_is_really_redis_7_or_newer(redis_server: RedisServer) -> None:
    info = redis_server.info("server")
    assert "valkey_version" not in info, info
    assert _major(str(info["redis_version"])) >= 7, info


@pytest.mark.parametrize("kind", ["redis", "valkey"])
def test_pause_makes_clients_time_out_then_recover(
    server_factory: Callable[..., RedisServer], kind: ServerKind
) -> None:
    server = server_factory(kind)
    with server.client(socket_timeout=0.2, socket_connect_timeout=0.2, retry=NO_RETRY) as c:
        assert c.ping()
        server.pause()
        assert server.paused
        started = time.monotonic()
        with pytest.raises(redis.exceptions.TimeoutError):
            c.ping()
        assert time.monotonic() - started < 2.0
        server.resume()
        assert not server.paused
        assert c.ping()


def test_kill_and_restart_on_same_port(server_factory: Callable[..., RedisServer]) -> None:
    server = server_factory("redis")
    port, pid = server.port, server.pid
    with server.client(socket_timeout=0.5, retry=NO_RETRY) as c:
        c.set("k", "v")
        server.kill()
        assert not server.running
        assert not _process_exists(pid)
        with pytest.raises(redis.exceptions.ConnectionError):
            c.ping()
        server.restart()
        assert (server.port, server.running) == (port, True)
        assert server.pid != pid
        assert c.ping()
        assert c.get("k") is None  # no RDB, no AOF: a restart loses everything


def test_stop_really_ends_the_process(server_factory: Callable[..., RedisServer]) -> None:
    server = server_factory("valkey")
    pid = server.pid
    server.pause()  # stop() must cope with a SIGSTOPped server
    server.stop()
    assert not _process_exists(pid)
    assert not server.dir.exists()


_DIES_WITH_PARENT = """
import sys
from tests.servers import RedisServer
if sys.argv[1] == "grpc":  # grpc's threads running: the server is started through the shim
    import grpc
    channel = grpc.insecure_channel("127.0.0.1:9")  # (grpc's core and threads start)
server = RedisServer("redis").start()
print(server.pid, flush=True)
sys.stdin.read()  # until killed
"""


@pytest.mark.parametrize("loaded", ["grpc", "nothing"])
def test_a_server_dies_with_the_process_that_started_it(loaded: str) -> None:
    # PR_SET_PDEATHSIG, set by a preexec_fn, or (grpc loaded: its fork handlers can abort
    # a child between fork and exec) by a shim after exec: a test run killed outright
    # leaves no server behind either way.
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    with subprocess.Popen([sys.executable, "-c", _DIES_WITH_PARENT, loaded],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          cwd=Path(__file__).parents[2]) as starter:
        try:
            assert starter.stdout is not None
            pid = int(starter.stdout.readline())
            assert _process_exists(pid)
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                assert b"redis-server" in fh.read()  # the shim exec'd the server itself
        finally:
            starter.kill()
    wait_until(lambda: not _process_exists(pid) or None, timeout=10,
               what="the server to die with the process that started it")


def test_assert_all_keys_have_ttl(any_client: redis.Redis) -> None:
    any_client.set("with-ttl", 1, px=60_000)
    assert_all_keys_have_ttl(any_client)
    any_client.set("immortal", 1)
    with pytest.raises(AssertionError, match="immortal"):
        assert_all_keys_have_ttl(any_client)
    assert_all_keys_have_ttl(any_client, ignore=[b"immortal"])


def test_missing_binary_skips_locally_but_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        missing("no such server")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        missing("no such server")


def test_binaries_are_found() -> None:
    for kind in ("redis", "valkey"):
        if find_server_binary(kind) is None:
            missing(f"{kind}-server not installed")


# ------------------------------------------------------------------ cluster


def test_cluster_info_ok_with_3_masters(redis_cluster: RedisCluster) -> None:
    for node in redis_cluster.nodes:
        with node.admin() as c:
            info = c.cluster("INFO")
        assert info["cluster_state"] == "ok"
        assert int(info["cluster_slots_ok"]) == 16384
        assert int(info["cluster_size"]) == 3
        assert int(info["cluster_known_nodes"]) == 6
    topo = redis_cluster.topology()
    assert sum(n.is_master for n in topo) == 3
    assert sum(not n.is_master for n in topo) == 3
    assert len(redis_cluster.startup_nodes) == 6


def test_cluster_set_get_across_slots(
    redis_cluster: RedisCluster, cluster_client: redis.cluster.RedisCluster
) -> None:
    keys = [f"key:{i}" for i in range(60)]
    owners = {cluster_client.get_node_from_key(k).name for k in keys}
    assert len(owners) == 3  # the keys really span all three primaries
    for k in keys:
        assert cluster_client.set(k, k, ex=30)
    assert [cluster_client.get(k) for k in keys] == [k.encode() for k in keys]
    # hash-tagged keys share a slot, so a multi-key command works
    cluster_client.mset({"{user1}:a": 1, "{user1}:b": 2})
    assert cluster_client.mget("{user1}:a", "{user1}:b") == [b"1", b"2"]
    cluster_client.expire("{user1}:a", 30)
    cluster_client.expire("{user1}:b", 30)
    assert_all_keys_have_ttl(cluster_client)


@pytest.mark.slow
def test_cluster_primary_failover(
    redis_cluster: RedisCluster, cluster_client: redis.cluster.RedisCluster
) -> None:
    keys = [f"fo:{i}" for i in range(30)]
    try:
        started = time.monotonic()
        killed, promoted = redis_cluster.kill_primary()
        took = time.monotonic() - started
        assert took < 10, took
        assert not killed.running
        assert promoted in redis_cluster.primaries()
        assert killed not in redis_cluster.primaries()
        # the existing client follows the new topology (MOVED / reconnect)...
        for k in keys:
            assert cluster_client.set(k, "after", ex=30)
        # ...and so does a fresh one
        with redis_cluster.client() as fresh:
            assert [fresh.get(k) for k in keys] == [b"after"] * len(keys)
    finally:
        redis_cluster.restore()
    assert killed.running
    assert len(redis_cluster.primaries()) == 3
    assert len(redis_cluster.replicas()) == 3


# ------------------------------------------------------------------ sentinel


def test_sentinel_resolves_master(sentinel: SentinelSetup) -> None:
    assert sentinel.sentinel_url == f"redis+sentinel://127.0.0.1:{sentinel.sentinel.port}/mymaster"
    with sentinel_client(sentinel) as sc:
        assert sc.discover_master("mymaster") == sentinel.primary.address
        assert sentinel.replica.address in sc.discover_slaves("mymaster")
        with sc.master_for("mymaster", socket_timeout=2.0) as master:
            assert master.set("sentinel-key", "v", ex=30)
            assert master.wait(1, 2000) == 1
        with sc.slave_for("mymaster", socket_timeout=2.0) as replica:
            assert replica.get("sentinel-key") == b"v"


@pytest.mark.slow
def test_sentinel_failover() -> None:
    if find_server_binary("redis") is None:
        missing("redis-server not installed")
    with SentinelSetup("redis") as setup:
        old = setup.primary
        new = setup.failover()
        assert new is setup.replica
        assert not old.running
        with sentinel_client(setup) as sc:
            assert sc.discover_master("mymaster") == new.address
            with sc.master_for("mymaster", socket_timeout=2.0) as master:
                assert master.set("after-failover", 1, ex=30)
