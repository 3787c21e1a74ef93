"""Each algorithm is one module that owns everything about itself (docs/architecture.md):
its math, its Redis codec and its Lua file beside it; the registry lists exactly the names a
`Limit` accepts, and the store reads the codec instead of switching on names."""

from __future__ import annotations

import ast
import re
from importlib import resources
from pathlib import Path

import pytest

import ratekeeper
from ratekeeper import _types, algorithms
from ratekeeper.algorithms import ALGORITHMS
from ratekeeper.algorithms._common import Algorithm
from ratekeeper.stores import _lua

SRC = Path(__file__).resolve().parents[2] / "src" / "ratekeeper"
NAMES = list(ALGORITHMS)


def test_the_registry_lists_exactly_the_names_a_limit_accepts_in_order() -> None:
    # _types (the values) cannot import the algorithms; this keeps the two lists one.
    assert list(_types.ALGORITHMS) == NAMES, (
        "ratekeeper._types.ALGORITHMS (what Limit accepts) and ratekeeper.algorithms."
        "ALGORITHMS (the registry) must list the same algorithms in the same order")
    assert {n: a.reference for n, a in ALGORITHMS.items()} == ratekeeper.ALGORITHMS


@pytest.mark.parametrize("name", NAMES)
def test_each_algorithm_is_the_record_of_its_own_module(name: str) -> None:
    module = getattr(algorithms, name.replace("-", "_"))
    algo = ALGORITHMS[name]
    assert algo is module.ALGORITHM and isinstance(algo, Algorithm) and algo.name == name
    assert (algo.decide, algo.refund, algo.ttl) == (module.decide, module.refund, module.ttl)
    assert algorithms.get(name) is algo
    assert algo.reference  # a line of what it follows, for ratekeeper.ALGORITHMS


def test_lua_ids_and_key_tags_are_unique() -> None:
    ids = [a.redis.id for a in ALGORITHMS.values()]
    tags = [a.redis.tag for a in ALGORITHMS.values()]
    assert len(set(ids)) == len(ids), ids
    assert len(set(tags)) == len(tags), tags
    # a tag ends a Redis key after the limit's name: nothing that could be part of a name
    # (or of the key's hash tag) would split it back unambiguously
    assert all(re.fullmatch(r"[a-z]+", t) for t in tags), tags


@pytest.mark.parametrize("name", NAMES)
def test_each_lua_file_lies_beside_its_module_and_registers_the_modules_id(name: str) -> None:
    codec = ALGORITHMS[name].redis
    stem = name.replace("-", "_")
    assert codec.script == f"{stem}.lua"
    files = resources.files(algorithms)
    text = files.joinpath(codec.script).read_text(encoding="utf-8")
    registered = re.findall(r"^ALGOS\[(\d+)\] = function\(\)", text, re.MULTILINE)
    assert registered == [str(codec.id)], (codec.script, registered)
    assert f"-- {name} (algorithm id {codec.id})" in text.splitlines()[0]
    assert text in _lua.CHECK.text and text in _lua.REFUND.text
    if codec.fast_script is None:
        assert codec.fast_reset is None
        assert text in _lua.ONE[name].text and not _lua.ONE[name].straight
    else:
        assert codec.fast_script == f"one_{stem}.lua" and codec.fast_reset is not None
        fast = files.joinpath(codec.fast_script).read_text(encoding="utf-8")
        assert _lua.ONE[name].text == fast and _lua.ONE[name].straight
        assert f"ratekeeper one-{name}:" in fast.splitlines()[0]


def test_the_store_keeps_only_its_protocol_in_stores_lua() -> None:
    """The algorithms' Lua lives beside them (with their shared helpers, `_common.lua`, beside
    `_common.py`); stores/lua holds the store's entry points."""
    assert sorted(p.name for p in (SRC / "stores" / "lua").glob("*.lua")) == [
        "check.lua", "one.lua", "refund.lua", "state.lua"]
    beside = {p.name for p in (SRC / "algorithms").glob("*.lua")} - {"_common.lua"}
    declared = {a.redis.script for a in ALGORITHMS.values()} | {
        a.redis.fast_script for a in ALGORITHMS.values() if a.redis.fast_script}
    assert beside == declared


@pytest.mark.parametrize("name", NAMES)
def test_lua_params_are_what_the_lua_file_reads(name: str) -> None:
    """p1, p2 (and p3 for the leaky bucket only: one.lua gets no padding) as text that
    Lua's tonumber reads back as the Python value."""
    kwargs: dict[str, object] = {"burst": 3} if name != "leaky-bucket" else {
        "burst": 2, "delay": 1}
    if "window" in name:
        kwargs = {}
    limit = ratekeeper.Limit(name, "7/100ms" if name != "leaky-bucket" else "7r/s", **kwargs)
    params = ALGORITHMS[name].redis.params(limit)
    assert all(isinstance(p, str) for p in params)
    if name == "leaky-bucket":
        assert params == ("7000", "2000", "1000")
    elif name in ("token-bucket", "gcra"):
        assert tuple(map(float, params)) == (limit.per_second, limit.capacity) == (70.0, 3.0)
    else:
        assert tuple(map(float, params)) == (limit.capacity, limit.period) == (7.0, 0.1)


STATES = {
    "token-bucket": ("hash", {"tokens": "1.5", "last": "12.25"}, (1.5, 12.25)),
    "gcra": ("string", "3.0000000000000004", 3.0000000000000004),
    "leaky-bucket": ("hash", {"excess": "2000", "last": "1500"}, (2000, 1500)),
    "fixed-window": ("hash", {"k": "41", "used": "2.5"}, (41, 2.5)),
    "sliding-window-log": ("list", ["1.5", "1.5", "2.25"], ((1.5, 2.0), (2.25, 1.0))),
    "sliding-window-counter": ("hash", {"k": "7", "prev": "1", "curr": "0.5"}, (7, 1.0, 0.5)),
}


@pytest.mark.parametrize("name", NAMES)
def test_from_redis_reads_its_own_layout_and_refuses_any_other(name: str) -> None:
    from_redis = ALGORITHMS[name].redis.from_redis
    kind, value, state = STATES[name]
    assert from_redis(kind, value) == state
    for other, (okind, ovalue, _) in STATES.items():
        if okind != kind:
            with pytest.raises(ValueError):
                from_redis(okind, ovalue)
        elif other != name and okind == "hash":
            with pytest.raises(KeyError):
                from_redis(okind, ovalue)


def test_no_store_switches_on_algorithm_names() -> None:
    """The Redis store reads each algorithm's codec: no algorithm name appears in its code
    (docstrings and comments aside)."""
    names = set(NAMES)
    for path in [*(SRC / "stores" / "redis").glob("*.py"), SRC / "stores" / "_lua.py"]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)}
        found = [(path.name, n.lineno, n.value) for n in ast.walk(tree)
                 if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and id(n) not in docstrings
                 and any(re.search(rf"\b{re.escape(a)}\b", n.value) for a in names)]
        assert not found, found
