"""Store URLs: the one parser behind the API, the ``ratekeeper`` command and the service.

Accepted forms::

    memory://                                   a MemoryStore in this process
    memory://?max_keys=100000                   ... with its bound
    redis://[user:password@]host:6379/0         Redis or Valkey (rediss:// for TLS)
    unix:///run/redis.sock?db=0                 over a unix socket
    redis+cluster://host:7000[,host:7001]       Redis Cluster (rediss+cluster:// for TLS)
    redis+sentinel://host:26379[,host2]/mymaster[/db]   Sentinel (rediss+sentinel://)

The Redis forms are handed to `RedisStore.from_url` / `AsyncRedisStore.from_url`, which
parse the rest; anything else is a `ConfigError` that lists these forms.
"""

from __future__ import annotations

from typing import Any, Literal, overload
from urllib.parse import parse_qsl

from .._errors import ConfigError
from ._base import AsyncStore, Store
from ._urlforms import REDIS_SCHEMES, VALID_FORMS, redact, scheme_of
from .memory import MemoryStore

__all__ = ["REDIS_SCHEMES", "VALID_FORMS", "open_store", "redact", "scheme_of"]


def _memory(url: str, max_keys: int | None) -> MemoryStore:
    rest = url.split("://", 1)[1]
    where, _, query = rest.partition("?")
    if where not in ("", "/"):
        raise ConfigError(f"a memory store has no address: use memory://, got {url!r}")
    options = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
    unknown = set(options) - {"max_keys"}
    if unknown:
        raise ConfigError(f"unknown memory:// option(s) {sorted(unknown)} in {url!r}; "
                          "the one option is max_keys=N")
    if "max_keys" in options:
        try:
            max_keys = int(options["max_keys"])
        except ValueError:
            raise ConfigError(f"max_keys must be a whole number, got {options['max_keys']!r}"
                              ) from None
    return MemoryStore() if max_keys is None else MemoryStore(max_keys=max_keys)


@overload
def open_store(url: str | None, *, asyncio: Literal[False] = False,
               max_keys: int | None = None, **redis_options: Any) -> Store: ...
@overload
def open_store(url: str | None, *, asyncio: Literal[True],
               max_keys: int | None = None, **redis_options: Any) -> AsyncStore: ...
def open_store(url: str | None, *, asyncio: bool = False, max_keys: int | None = None,
               **redis_options: Any) -> Store | AsyncStore:
    """The store a URL names (``None``: a new `MemoryStore`).

    `asyncio` picks `AsyncRedisStore` over `RedisStore` (a `MemoryStore` is both).
    `max_keys` bounds a memory store (a ``?max_keys=`` in the URL wins); `redis_options`
    (``prefix``, ``client_clock``, ``timeout``, ...) go to the Redis store's ``from_url``;
    a memory store ignores them (its state is its own, on whatever clock decides), so one
    call serves every URL.
    """
    if url is None:
        return _memory("memory://", max_keys)
    if scheme_of(url) == "memory":
        return _memory(url, max_keys)
    try:
        from . import redis  # noqa: PLC0415  (redis-py is an optional extra)
    except ImportError as e:
        raise ConfigError(
            f"{redact(url)} needs the Redis store: pip install 'ratekeeper[redis]' ({e})"
        ) from None
    cls = redis.AsyncRedisStore if asyncio else redis.RedisStore
    try:
        return cls.from_url(url, **redis_options)
    except ConfigError:
        raise
    except ValueError as e:  # redis-py's own URL parser: "Invalid value for 'db' ..."
        raise ConfigError(f"cannot use {redact(url)}: {e}") from None
