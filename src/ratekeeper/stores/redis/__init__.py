"""Redis, Valkey, Redis Cluster and Sentinel stores: every decision is one atomic Lua script.

    from ratekeeper import Limit, Limiter
    from ratekeeper.stores.redis import RedisStore

    store = RedisStore.from_url("redis://127.0.0.1:6379/0")
    limiter = Limiter(Limit("gcra", "10/s", burst=20), store)

Theory of operation
-------------------
* **One script, one round trip.** A check runs ``check.lua`` (see ``stores/lua/``): it reads
  each limit's state, runs the algorithm (a line-by-line Lua mirror of the pure Python
  function), and, only if every limit admits, writes every state with a PEXPIRE taken from
  the algorithm's ``ttl``. It is sent with EVALSHA; a NOSCRIPT answer (server restarted,
  ``SCRIPT FLUSH``, failover) is followed by one EVAL, which also caches the script again.
* **Keys.** ``{prefix}{<key>}:<limit name>:<algorithm tag>``, e.g.
  ``rk:{user42}:gcra-10/s-b20:gcra``: a state means something only to its algorithm, so a
  limit whose algorithm changes under the same name starts fresh, as in memory. The
  braces are a hash tag: every per-key limit of one key lives in one cluster slot, so a
  composite check of them is one script. ``scope="global"`` limits are checked under the
  limiter's global key (``{*global*}``), a slot of their own. ``%`` and ``}`` in keys are
  written ``%25`` and ``%7D`` so a key can never end the tag early.
* **Cross-slot composites** (cluster only; a single server takes any keys in one script):
  the checks are grouped by slot and each group is *reserved* (checked and charged, all or
  nothing, by one script) in a fixed order: per-key groups first, ordered by slot, then the
  global group. If a group rejects, the groups already reserved are refunded (the
  algorithm's ``refund``, ``refund.lua``) and the rest are only looked at, so nothing stays
  charged. Concurrent requests may briefly see a reservation that is later refunded: this
  can reject a request that would have fitted (never admit one that does not). Later groups
  decide at the first group's time, so one ``at`` refunds them all.
* **Time.** By default the scripts read the server's clock (``TIME``), so application
  servers with skewed clocks agree and windows align to the Unix epoch. With
  ``client_clock=True`` the caller's ``now`` is used instead (simulation and tests): then
  a key is kept at least ``min_ttl`` seconds of real time (default 60 s), because the
  client's clock need not run at real speed.
* **Failures.** Connection errors, timeouts and "server not ready" answers (LOADING,
  READONLY, CLUSTERDOWN, MASTERDOWN, TRYAGAIN, OOM, BUSY, NOREPLICAS, an unfollowed
  MOVED/ASK; told apart by redis-py's exception class) raise `StoreUnavailable`; a
  reply the store cannot interpret (corrupt state, a foreign key under the prefix) raises
  `StoreError`. No raw client exception escapes. A `CircuitBreaker` (one per server; one
  per node on a cluster) fails fast after repeated unavailability, so that during an
  outage requests stop paying the timeout, and lets one probe through per cool-down so the
  store recovers without a restart. The limiter's failure policy decides what a failure
  means for the request.
* **Deny cache** (off by default): after a rejection with a known ``retry_after`` the store
  answers the same check locally until the earliest time it could pass, for any cost at
  least as large, without a round trip. See `RedisStore` for the trade.

`RedisStore` (sync) and `AsyncRedisStore` (asyncio) share everything but the I/O: the plans
below are generators that *yield* the calls to make and receive the replies, and each class
only drives them with its own client.
"""

from __future__ import annotations

from . import _client  # noqa: F401  (first: a missing redis-py says what to install)
from ._breaker import CircuitBreaker
from ._core import (
    CLIENT_CLOCK_MIN_TTL,  # noqa: F401  (public before the split)
    DEFAULT_PREFIX,
    DEFAULT_TIMEOUT,
    KeyState,
    RedisStoreStats,
    split_state_key,
)
from ._store import AsyncRedisStore, RedisStore

__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_TIMEOUT",
    "AsyncRedisStore",
    "CircuitBreaker",
    "KeyState",
    "RedisStore",
    "RedisStoreStats",
    "split_state_key",
]
