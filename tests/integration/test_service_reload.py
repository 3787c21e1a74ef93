"""A policy reload that changes a limit's algorithm under the same name: normal decisions at
once, on Redis, Valkey, a cluster and memory (the state key names the algorithm, so the new
algorithm never reads the old one's state as its own)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from ratekeeper import MemoryStore
from ratekeeper.service import PolicyHolder, Service, make_descriptor
from ratekeeper.stores._base import AsyncStore
from tests.integration.conftest import StoreTarget

POLICY = """
[service]
failure = "open"

[domains.api.limits.per-user]
algorithm = "{algorithm}"
rate = "2/minute"
{burst}

[[domains.api.descriptors]]
key = "user"
limits = ["per-user"]
"""


def write(path: Path, algorithm: str) -> None:
    burst = "burst = 2" if algorithm in ("gcra", "token-bucket") else ""
    path.write_text(POLICY.format(algorithm=algorithm, burst=burst), encoding="utf-8")
    # a new mtime even on a coarse file system: the holder reloads on a changed signature
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


async def three_checks(service: Service) -> list[tuple[bool, bool]]:
    """(allowed, degraded) of three checks by one user."""
    out = []
    for _ in range(3):
        r = await service.engine.check("api", [make_descriptor([("user", "alice")])])
        out.append((r.allowed, r.degraded))
    return out


async def reload_switching_algorithms(store: AsyncStore, tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    write(path, "gcra")
    holder = PolicyHolder(path)
    service = Service(holder, store)
    # Each algorithm, fresh after the switch: 2 admitted, the third rejected, never degraded.
    assert await three_checks(service) == [(True, False), (True, False), (False, False)]
    for algorithm in ("token-bucket", "fixed-window", "sliding-window-log",
                      "sliding-window-counter", "leaky-bucket", "gcra"):
        write(path, algorithm)
        assert holder.poll(), algorithm  # reloaded
        got = await three_checks(service)
        assert all(not degraded for _, degraded in got), (algorithm, got)
        if algorithm == "leaky-bucket":  # nginx burst 0: one admitted at once
            assert [a for a, _ in got] == [True, False, False], got
        elif algorithm == "gcra":  # back to a name whose old gcra state is still stored
            assert [a for a, _ in got] == [False, False, False], got
        else:
            assert [a for a, _ in got] == [True, True, False], (algorithm, got)


async def test_a_reload_that_changes_an_algorithm_decides_normally_on_redis(
        target: StoreTarget, tmp_path: Path) -> None:
    store = target.astore(prefix=f"rk-reload-{uuid.uuid4().hex[:8]}:")
    try:
        await reload_switching_algorithms(store, tmp_path)
    finally:
        await store.aclose()


async def test_a_reload_that_changes_an_algorithm_decides_normally_in_memory(
        tmp_path: Path) -> None:
    await reload_switching_algorithms(MemoryStore(), tmp_path)
