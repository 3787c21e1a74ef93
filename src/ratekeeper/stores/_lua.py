"""The Lua scripts of the Redis store, assembled from the package's ``lua/*.lua`` files.

Lua in Redis cannot ``require``, so each script sent to the server is one text: the shared
helpers (``_common.lua``), every algorithm's functions (``<algorithm>.lua``, one file per
algorithm, each mirroring ``ratekeeper.algorithms.<algorithm>``), then the entry point
(``check.lua``, ``refund.lua``; ``one.lua`` with a single algorithm, for one limit).
``state.lua`` reads a key's raw state for inspection.

Each file states its KEYS, ARGV (with units) and reply at the top. `Script` carries the text
and its SHA1, which is what EVALSHA sends; the store falls back to EVAL (which also caches
the script on the server) when the server answers NOSCRIPT.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import NamedTuple

__all__ = ["ALGORITHM_IDS", "ALGORITHM_TAGS", "CHECK", "ONE", "ONE_FAST", "REFUND", "STATE",
           "Script", "lua_source"]

#: Algorithm id passed in ARGV (see check.lua), by `Limit.algorithm`.
ALGORITHM_IDS: dict[str, int] = {
    "token-bucket": 1,
    "gcra": 2,
    "leaky-bucket": 3,
    "fixed-window": 4,
    "sliding-window-log": 5,
    "sliding-window-counter": 6,
}

#: The short name of each algorithm that ends its state's Redis key
#: (``{prefix}{<key>}:<limit name>:<tag>``): a limit whose algorithm changes under the same
#: name (a reloaded policy) starts on a key of its own instead of the old algorithm's state.
ALGORITHM_TAGS: dict[str, str] = {
    "token-bucket": "tb",
    "gcra": "gcra",
    "leaky-bucket": "lb",
    "fixed-window": "fw",
    "sliding-window-log": "swl",
    "sliding-window-counter": "swc",
}

#: The Lua file of each algorithm, by `Limit.algorithm`.
ALGORITHM_FILES: dict[str, str] = {
    "token-bucket": "token_bucket.lua",
    "gcra": "gcra.lua",
    "leaky-bucket": "leaky_bucket.lua",
    "fixed-window": "fixed_window.lua",
    "sliding-window-log": "sliding_window_log.lua",
    "sliding-window-counter": "sliding_window_counter.lua",
}
_ALGORITHM_FILES = tuple(ALGORITHM_FILES.values())


class Script(NamedTuple):
    """A script's name, full text and SHA1 hex digest (what EVALSHA sends)."""

    name: str
    text: str
    sha: str


def lua_source(filename: str) -> str:
    """The text of one file under ``ratekeeper/stores/lua/``."""
    path = resources.files(__package__).joinpath("lua").joinpath(filename)
    return path.read_text(encoding="utf-8")


def _script(name: str, *files: str) -> Script:
    text = "\n".join(lua_source(f) for f in files)
    # Redis names a cached script by the SHA1 of its text.
    return Script(name, text, hashlib.sha1(text.encode()).hexdigest())


#: Any number of limits of any algorithms, all-or-nothing (composite checks).
CHECK = _script("check", "_common.lua", *_ALGORITHM_FILES, "check.lua")
#: Straight-line single-limit scripts (``one_<algorithm>.lua``): the same arithmetic as
#: ``one.lua`` with that algorithm, with no function definitions, because Redis runs a
#: script's whole body (defining every helper again) on each EVALSHA. Their ARGV is shorter
#: (cost, p1, p2, then min expiry, now and grace, trailing defaults left off) and an
#: admission is answered as just ``{remaining, reset_after}``; see the files.
_ONE_FAST = {"gcra": "one_gcra.lua", "token-bucket": "one_token_bucket.lua"}
#: The algorithms whose `ONE` script is a straight-line one (the short ARGV and reply).
ONE_FAST: frozenset[str] = frozenset(_ONE_FAST)
#: One limit: one script per algorithm, the single-limit hot path.
ONE: dict[str, Script] = {
    name: _script(f"one-{name}", _ONE_FAST[name]) if name in _ONE_FAST
    else _script(f"one-{name}", "_common.lua", file, "one.lua")
    for name, file in ALGORITHM_FILES.items()
}
REFUND = _script("refund", "_common.lua", *_ALGORITHM_FILES, "refund.lua")
STATE = _script("state", "state.lua")
