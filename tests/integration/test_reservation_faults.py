"""A reservation used as a context manager never hides the caller's own exception.

The block raises while the store is down: the refund that `__exit__` attempts fails too, and
that failure is logged, while the caller's exception propagates unchanged (sync and async).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from ratekeeper import AsyncLimiter, Limit, Limiter
from ratekeeper.stores.redis import AsyncRedisStore, RedisStore
from tests.servers import RedisServer

pytestmark = pytest.mark.redis

LIMIT = Limit("gcra", "10/s", burst=5, name="reserve")


def test_the_callers_exception_survives_a_failed_refund(
        server_factory: Callable[..., RedisServer], caplog: pytest.LogCaptureFixture) -> None:
    server = server_factory("redis")
    store = RedisStore.from_url(server.url, timeout=0.25)
    limiter = Limiter(LIMIT, store)
    with (pytest.raises(KeyError) as raised, caplog.at_level(logging.WARNING, "ratekeeper"),
          limiter.reserve("alice") as r):
        assert r.ok and not r.decision.degraded
        server.kill()
        raise KeyError("the caller's own")
    assert raised.value.args == ("the caller's own",)
    refunds = [rec for rec in caplog.records if "refund" in rec.getMessage()]
    assert len(refunds) == 1 and refunds[0].levelno == logging.WARNING, caplog.records
    store.close()


def test_a_reservation_is_settled_once_even_when_its_refund_fails(
        server_factory: Callable[..., RedisServer], caplog: pytest.LogCaptureFixture) -> None:
    server = server_factory("redis")
    store = RedisStore.from_url(server.url, timeout=0.25)
    limiter = Limiter(LIMIT, store)
    with limiter.reserve("bob") as r:
        assert r.ok and r.decision.remaining == 4
    assert limiter.peek("bob").remaining == 3  # a block without error keeps its charge
    r2 = limiter.reserve("bob")
    server.kill()
    with (pytest.raises(ValueError, match="own"), caplog.at_level(logging.WARNING, "ratekeeper"),
          r2):
        raise ValueError("own")
    assert sum("refund" in rec.getMessage() for rec in caplog.records) == 1
    # An explicit cancel() after that does nothing more: the reservation is settled.
    assert r2.cancel() is False
    store.close()


async def test_the_callers_exception_survives_a_failed_async_refund(
        server_factory: Callable[..., RedisServer], caplog: pytest.LogCaptureFixture) -> None:
    server = server_factory("redis")
    store = AsyncRedisStore.from_url(server.url, timeout=0.25)
    limiter = AsyncLimiter(LIMIT, store)
    with pytest.raises(KeyError) as raised, caplog.at_level(logging.WARNING, "ratekeeper"):
        async with await limiter.reserve("alice") as r:
            assert r.ok and not r.decision.degraded
            server.kill()
            raise KeyError("the caller's own")
    assert raised.value.args == ("the caller's own",)
    refunds = [rec for rec in caplog.records if "refund" in rec.getMessage()]
    assert len(refunds) == 1 and refunds[0].levelno == logging.WARNING, caplog.records
    await store.aclose()
