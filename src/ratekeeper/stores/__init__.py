"""Stores keep algorithm state: `MemoryStore` in this process, `RedisStore` in Redis/Valkey."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import AsyncStore, Check, Store
from ._url import open_store
from .memory import MemoryStore

if TYPE_CHECKING:
    from .redis import AsyncRedisStore as AsyncRedisStore
    from .redis import RedisStore as RedisStore

__all__ = ["AsyncStore", "Check", "MemoryStore", "Store", "open_store"]

_REDIS = ("RedisStore", "AsyncRedisStore")


def __getattr__(name: str) -> Any:
    # The Redis stores are imported on first use, so `import ratekeeper` never needs
    # redis-py (a missing extra raises ImportError saying what to install).
    if name in _REDIS:
        from . import redis as _redis  # noqa: PLC0415

        return getattr(_redis, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
