"""Stores keep algorithm state: `MemoryStore` in this process, `RedisStore` in Redis/Valkey."""

from __future__ import annotations

from ._base import AsyncStore, Check, Store
from .memory import MemoryStore

__all__ = ["AsyncStore", "Check", "MemoryStore", "Store"]
