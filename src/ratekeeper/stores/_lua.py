"""The Lua scripts of the Redis store, assembled from the package's ``.lua`` files.

Lua in Redis cannot ``require``, so each script sent to the server is one text: the helpers
every algorithm uses (``algorithms/_common.lua``, beside the ``_common.py`` it mirrors), every
algorithm's functions (``algorithms/<name>.lua``,
beside the Python module it mirrors; the registry names the files), then the entry point
(``stores/lua/check.lua``, ``refund.lua``; ``one.lua`` with a single algorithm, for one
limit). An algorithm with a straight-line single-limit script (``algorithms/one_<name>.lua``)
gets that one as its `ONE` script. ``stores/lua/state.lua`` reads a key's raw state for
inspection. The files in ``stores/lua/`` are the store's protocol; the algorithm files are
the algorithms'.

Each file states its KEYS, ARGV (with units) and reply at the top. `Script` carries the text
and its SHA1, which is what EVALSHA sends; the store falls back to EVAL (which also caches
the script on the server) when the server answers NOSCRIPT.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import NamedTuple

from .. import algorithms
from ..algorithms import ALGORITHMS

__all__ = ["CHECK", "ONE", "REFUND", "STATE", "Script", "lua_source"]


class Script(NamedTuple):
    """A script's name, full text and SHA1 hex digest (what EVALSHA sends).

    `straight` marks a straight-line single-limit script (its algorithm's ``fast_script``):
    it takes the short ARGV (cost, p1, p2[, min expiry, now, grace]) and answers an
    admission with the algorithm's short reply when its codec has one
    (`RedisCodec.fast_reset`), else with one.lua's.
    """

    name: str
    text: str
    sha: str
    straight: bool = False


def lua_source(filename: str) -> str:
    """The text of one of the store's files, under ``ratekeeper/stores/lua/``."""
    path = resources.files(__package__).joinpath("lua").joinpath(filename)
    return path.read_text(encoding="utf-8")


def algorithm_source(filename: str) -> str:
    """The text of an algorithm's file, beside its module in ``ratekeeper/algorithms/``."""
    return resources.files(algorithms).joinpath(filename).read_text(encoding="utf-8")


def _script(name: str, *texts: str, straight: bool = False) -> Script:
    text = "\n".join(texts)
    # Redis names a cached script by the SHA1 of its text.
    return Script(name, text, hashlib.sha1(text.encode()).hexdigest(), straight)


_COMMON = algorithm_source("_common.lua")
_ALGORITHM_TEXTS = {name: algorithm_source(a.redis.script) for name, a in ALGORITHMS.items()}

#: Any number of limits of any algorithms, all-or-nothing (composite checks).
CHECK = _script("check", _COMMON, *_ALGORITHM_TEXTS.values(), lua_source("check.lua"))
#: One limit: one script per algorithm, the single-limit hot path. An algorithm's
#: straight-line script (``one_<name>.lua``) has the same arithmetic as ``one.lua`` with that
#: algorithm, with no function definitions, because Redis runs a script's whole body
#: (defining every helper again) on each EVALSHA; a test proves it decides as ``CHECK``.
ONE: dict[str, Script] = {
    name: _script(f"one-{name}", algorithm_source(a.redis.fast_script), straight=True)
    if a.redis.fast_script is not None
    else _script(f"one-{name}", _COMMON, _ALGORITHM_TEXTS[name], lua_source("one.lua"))
    for name, a in ALGORITHMS.items()
}
REFUND = _script("refund", _COMMON, *_ALGORITHM_TEXTS.values(), lua_source("refund.lua"))
STATE = _script("state", lua_source("state.lua"))
