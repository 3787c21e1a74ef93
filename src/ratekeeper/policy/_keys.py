"""Counter keys: the store key of a limit's counter for a descriptor's entries.

A limit keeps one counter per distinct combination of the descriptor's entries, so a default
rule ``key = "user"`` gives every user a counter of their own. ``by = ["user"]`` keys the
counter on some entries only, and ``scope = "global"`` keeps a single counter for the rule:
the library's `GLOBAL_KEY`, so a `Limiter` and ``ratekeeper inspect`` see the same one.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from .._types import GLOBAL_KEY

__all__ = ["MAX_COUNTER_KEY", "Shared", "counter_key"]

#: Longest counter key kept as text; longer ones are replaced by their SHA-256.
MAX_COUNTER_KEY = 256


_KEY_SAFE = "/:@!$&'()*+;.~-_"
_KEY_SAFE_RE = re.compile(r"[A-Za-z0-9/:@!$&'()*+;.~_-]*")


def _q(s: str) -> str:
    return s if _KEY_SAFE_RE.fullmatch(s) else quote(s, safe=_KEY_SAFE)


@dataclass(frozen=True, slots=True)
class Shared:
    """envoyproxy/ratelimit's ``share_threshold`` counter (its ``GenerateCacheKey``): every
    entry of the descriptor keys it, in order, but the entry at each shared position has
    its level's wildcard pattern in place of its value, so all the values the pattern
    matches share one counter while the other entries keep theirs apart.

    `patterns`: (position, the level's ``key_value`` pattern, as the Go service names it).
    """

    patterns: tuple[tuple[int, str], ...]

    def value(self, position: int, key: str, value: str) -> str:
        for i, pattern in self.patterns:
            if i == position:  # the pattern less "key_", as the Go service trims it
                return pattern[len(key) + 1:] if pattern.startswith(key + "_") else pattern
        return value


#: Which entries key a counter: all (None), those with these keys, or `Shared`.
By = tuple[str, ...] | Shared | None


def counter_key(entries: Sequence[tuple[str, str]], by: By) -> str:
    """The store key of a limit's counter for a descriptor's entries.

    ``key=value`` pairs joined by ``,``, every key and value %-encoded (so the mapping is
    one-to-one and the key is printable ASCII with no braces); the library's `GLOBAL_KEY`
    for a global counter (it has no ``=``, so no descriptor's key can be it, and
    ``ratekeeper inspect`` and a `Limiter` on the same store see the same counter); ``#``
    and a SHA-256 when longer than `MAX_COUNTER_KEY`. Remembered for the most recent
    descriptors, so that a returning client's key is not encoded again.
    """
    return _counter_key(entries if isinstance(entries, tuple) else tuple(entries), by)


@functools.lru_cache(maxsize=16384)
def _counter_key(entries: tuple[tuple[str, str], ...], by: By) -> str:
    if by is None:
        sel: Sequence[tuple[str, str]] = entries
    elif isinstance(by, Shared):
        sel = [(k, by.value(i, k, v)) for i, (k, v) in enumerate(entries)]
    else:
        sel = [e for e in entries if e[0] in by]
    if not sel:
        return GLOBAL_KEY
    s = ",".join(f"{_q(k)}={_q(v)}" for k, v in sel)
    if len(s) > MAX_COUNTER_KEY:
        return "#" + hashlib.sha256(s.encode()).hexdigest()
    return s
