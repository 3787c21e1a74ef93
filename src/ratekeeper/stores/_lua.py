"""The Lua scripts of the Redis store, assembled from the package's ``.lua`` files.

Lua in Redis cannot ``require``, so each script sent to the server is one text: the helpers
every algorithm uses (``algorithms/_common.lua``, beside the ``_common.py`` it mirrors), every
algorithm's functions (``algorithms/<name>.lua``,
beside the Python module it mirrors; the registry names the files), then the entry point
(``stores/lua/check.lua``, ``refund.lua``; ``one.lua`` with a single algorithm, for one
limit). An algorithm whose codec has a straight-line single-limit script (``fast_script``)
gets, as its `ONE` script, its file's self-contained ``decide`` (the very text the others
run) between ``stores/lua/one_prologue.lua`` and ``one_epilogue.lua`` (`_straight`): Redis
runs a script's whole body on every call, so that one defines no other function (one.lua
with _common.lua builds about 15 closures per call). ``stores/lua/state.lua`` reads a key's
raw state for inspection. The files in ``stores/lua/`` are the store's protocol; the
algorithm files are the algorithms'.

Each file states its KEYS, ARGV (with units) and reply at the top. `Script` carries the text
and its SHA1, which is what EVALSHA sends; the store falls back to EVAL (which also caches
the script on the server) when the server answers NOSCRIPT.

The scripts that define functions (every one but the straight-line ones) are also the
functions of one Redis Functions library, `LIBRARY` (Redis >= 7, Valkey): Redis runs an
EVALSHA script's whole body on every call, so check.lua re-creates every helper and
algorithm closure each time (about 3 us of a 16 us composite here), while a library's
functions keep them. Each function builds its script's helpers on its first call, not at
load (Redis 7.0 lets a library's load run nothing but ``register_function``), and then runs
the script's entry point (``stores/lua/*.lua``) as a function of KEYS and ARGV: the same
text, the same arithmetic. The library's name carries a hash of its text, so two versions
of ratekeeper on one server each call their own.

Every script, in both forms, takes one more argument than its file states: a tag, the last
ARGV (an integer below 2**31 the caller picks per call), and answers ``{tag, the file's
reply}``. The caller checks the tag is its own: a reply that is another call's (a proxy that
answered a command twice shifts every later reply on its connection by one) is then
unavailability, not another key's numbers (`_core.untagged`). The file's ARGV is what it
sees: the tag is taken off first (`_TAGGED`).
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from typing import NamedTuple

from .. import algorithms
from ..algorithms import ALGORITHMS

__all__ = ["CHECK", "LIBRARY", "LIBRARY_NAME", "ONE", "REFUND", "STATE", "Script", "lua_source"]


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
    #: Its function's name in `LIBRARY` (what FCALL sends); "" = none (EVALSHA only).
    fn: str = ""


def lua_source(filename: str) -> str:
    """The text of one of the store's files, under ``ratekeeper/stores/lua/``."""
    path = resources.files(__package__).joinpath("lua").joinpath(filename)
    return path.read_text(encoding="utf-8")


def algorithm_source(filename: str) -> str:
    """The text of an algorithm's file, beside its module in ``ratekeeper/algorithms/``."""
    return resources.files(algorithms).joinpath(filename).read_text(encoding="utf-8")


#: A script's body (its file's text, as a function of KEYS and ARGV) run with the tag taken
#: off ARGV, and its reply answered with the tag first: ``{tag, reply}`` (first, because a
#: Lua table's reply ends at its first nil, and the files' replies may have one).
_TAGGED = """local tag = tonumber(ARGV[#ARGV])
ARGV[#ARGV] = nil
return {{tag, (function()
{body}
end)()}}"""


def _script(name: str, *texts: str, straight: bool = False) -> Script:
    text = _TAGGED.format(body="\n".join(texts))
    # Redis names a cached script by the SHA1 of its text.
    return Script(name, text, hashlib.sha1(text.encode()).hexdigest(), straight)


_COMMON = algorithm_source("_common.lua")

_ALGORITHM_TEXTS = {name: algorithm_source(a.redis.script) for name, a in ALGORITHMS.items()}
_ALL_ALGORITHMS = "\n".join(_ALGORITHM_TEXTS.values())

#: (script name, helpers, entry point) of each script that is also a library function.
_FUNCTIONS = [
    ("check", _COMMON + "\n" + _ALL_ALGORITHMS, lua_source("check.lua")),
    ("refund", _COMMON + "\n" + _ALL_ALGORITHMS, lua_source("refund.lua")),
    *[(f"one-{name}", _COMMON + "\n" + _ALGORITHM_TEXTS[name], lua_source("one.lua"))
      for name, a in ALGORITHMS.items() if not a.redis.fast_script],
]

_LAZY = """-- f(KEYS, ARGV) of `build()`, built on the first call (not at load: see _lua.py)
local function lazy(build)
  local f
  return function(keys, args)
    if not f then
      f = build()
    end
    return f(keys, args)
  end
end
"""


def _library() -> tuple[str, str, dict[str, str]]:
    """`LIBRARY`'s text, its name and each script's function name."""
    body = [_LAZY]
    for name, helpers, entry in _FUNCTIONS:
        body.append(f"redis.register_function('@{name}', lazy(function()\n{helpers}\n"
                    f"return function(KEYS, ARGV)\n{_TAGGED.format(body=entry)}\nend\nend))\n")
    text = "\n".join(body)
    tag = hashlib.sha1(text.encode()).hexdigest()[:12]
    names = {name: f"rk_{tag}_{name.replace('-', '_')}" for name, _, _ in _FUNCTIONS}
    for name, fn in names.items():
        text = text.replace(f"'@{name}'", f"'{fn}'")
    return f"#!lua name=ratekeeper_{tag}\n" + text, f"ratekeeper_{tag}", names


#: The Redis Functions library of every script that has a function (FUNCTION LOAD).
LIBRARY, LIBRARY_NAME, _FN = _library()

#: Any number of limits of any algorithms, all-or-nothing (composite checks).
CHECK = _script("check", _COMMON, *_ALGORITHM_TEXTS.values(),
                lua_source("check.lua"))._replace(fn=_FN["check"])
#: An algorithm file's ``decide``: its parameters, and its text to the ``end`` at its own
#: indentation.
_DECIDE = re.compile(r"^( *)local function decide\(key, now, cost, ([\w, ]+), brief\).*?^\1end\n",
                     re.MULTILINE | re.DOTALL)
#: The state `decide` reads: a string (GET), or a hash's fields (HMGET), in their order.
_READ = re.compile(r"redis\.call\('(GET|HMGET)', key((?:, '\w+')*)\)")
#: An algorithm file's single-limit admission reply, where shorter than one.lua's (its codec's
#: ``fast_reset`` parses it), in one_epilogue.lua's values.
_ADMITS = re.compile(r"^-- one-[\w-]+ admits with: (\{[^}]*\})", re.MULTILINE)


def _fmt(value: str) -> str:
    """Lua for _common.lua's ``fmt(value)``, written out (the script defines no helper)."""
    return f"{value} == 0 and '0' or string.format('%.17g', {value})"


def _straight(name: str) -> Script:
    """`name`'s single-limit script: one_prologue.lua, the algorithm's ``decide`` (the text
    `CHECK` runs) and one_epilogue.lua, which writes the state `decide` reads: its SET, or
    its HSET of the same fields and PEXPIRE."""
    decide = _DECIDE.search(_ALGORITHM_TEXTS[name])
    read = None if decide is None else _READ.search(decide[0])
    if decide is None or read is None:
        raise RuntimeError(f"{name}.lua: no self-contained decide to build one-{name} from")
    if read[1] == "GET":
        write = f"kept = {_fmt('s1')}\n  redis.call('SET', key, kept, 'PX', ms)"
    else:
        fields = re.findall(r"'(\w+)'", read[2])
        # (a value that is the client's `now` is written as the client gave it: one float
        # formatted less)
        texts = [f"local t{i} = s{i} == now and now_text or {_fmt(f's{i}')}\n  "
                 for i in range(1, len(fields) + 1)]
        pairs = ", ".join(f"'{f}', t{i}" for i, f in enumerate(fields, 1))
        write = (f"{''.join(texts)}redis.call('HSET', key, {pairs})\n"
                 f"  redis.call('PEXPIRE', key, ms)\n  kept = t1")
    params = len(decide[2].split(","))
    prologue = lua_source("one_prologue.lua").replace("NUMBER_OF_PARAMS", str(params))
    admits = _ADMITS.search(_ALGORITHM_TEXTS[name])
    epilogue = lua_source("one_epilogue.lua").replace("WRITE_STATE", write).replace(
        "PARAMS", ", ".join(f"p{i}" for i in range(1, params + 1))).replace(
        "ADMITTED_REPLY", admits[1] if admits else
        f"{{1, remaining, '0', {_fmt('reset')}, {_fmt('delay')}}}")
    return _script(f"one-{name}", prologue, decide[0], epilogue, straight=True)


#: One limit: one script per algorithm, the single-limit hot path. With a straight-line form
#: (its codec's ``fast_script``) it is `_straight`'s, whose arithmetic is `CHECK`'s own text;
#: else one.lua with that algorithm (also a library function). Both are proven to decide as
#: ``CHECK`` by tests/integration/test_redis_parity.py, decision by decision.
ONE: dict[str, Script] = {
    name: _straight(name) if a.redis.fast_script
    else _script(f"one-{name}", _COMMON, _ALGORITHM_TEXTS[name],
                 lua_source("one.lua"))._replace(fn=_FN[f"one-{name}"])
    for name, a in ALGORITHMS.items()
}
REFUND = _script("refund", _COMMON, *_ALGORITHM_TEXTS.values(),
                 lua_source("refund.lua"))._replace(fn=_FN["refund"])
STATE = _script("state", lua_source("state.lua"))
