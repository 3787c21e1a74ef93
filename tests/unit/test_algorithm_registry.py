"""Each algorithm is one module that owns everything about itself (docs/architecture.md):
its math, its Redis codec and its Lua file beside it; the registry lists exactly the names a
`Limit` accepts, and the store reads the codec instead of switching on names."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

import ratekeeper
from ratekeeper import InvalidCost, InvalidLimit, Limit, Rate, _types, algorithms
from ratekeeper.algorithms import ALGORITHMS, _common, leaky_bucket
from ratekeeper.algorithms._common import Algorithm
from ratekeeper.stores import _lua

SRC = Path(__file__).resolve().parents[2] / "src" / "ratekeeper"
NAMES = list(ALGORITHMS)


def test_the_registry_lists_exactly_the_names_a_limit_accepts_in_order() -> None:
    # The registry fills the values' rule table (the values cannot import upward), so what a
    # Limit accepts and what ratekeeper.ALGORITHMS lists are the registry, in its order.
    assert list(_types.RULES) == NAMES == list(_types.ALGORITHMS) == list(ratekeeper.ALGORITHMS)
    assert NAMES == ["token-bucket", "gcra", "leaky-bucket", "fixed-window",
                     "sliding-window-log", "sliding-window-counter"]  # the documented order
    assert {n: a.reference for n, a in ALGORITHMS.items()} == ratekeeper.ALGORITHMS


@pytest.mark.parametrize("name", NAMES)
def test_each_algorithm_owns_its_parameter_rules(name: str) -> None:
    """`Limit` validates and derives its fields with the rules its algorithm's module
    declares on its record; the values keep only the table."""
    algo = ALGORITHMS[name]
    assert _types.RULES[name] is algo.rules
    assert ratekeeper.ALGORITHMS[name] == algo.rules.description == algo.reference


def test_shared_rule_families_are_written_once_in_common() -> None:
    params = {n: a.rules.params for n, a in ALGORITHMS.items()}
    assert params["token-bucket"] is params["gcra"] is _common.bucket_params
    assert (params["fixed-window"] is params["sliding-window-log"]
            is params["sliding-window-counter"] is _common.window_params)
    assert params["leaky-bucket"] is leaky_bucket.limit_params
    assert {n for n, a in ALGORITHMS.items() if a.rules.whole_costs} == {
        "leaky-bucket", "sliding-window-log"}


def test_a_limit_follows_whatever_rules_its_algorithm_registered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No name is special to `Limit`: a new algorithm's rules (a toy here) decide its burst,
    capacity and window, its errors and whether its costs must be whole."""
    seen: list[tuple[object, ...]] = []

    def params(algorithm: str, rate: Rate, burst: float | None, nodelay: bool, delay: int
               ) -> tuple[float | None, float, float]:
        seen.append((algorithm, str(rate), burst, nodelay, delay))
        if nodelay:
            raise InvalidLimit(f"{algorithm!r} never delays")
        return 2.0, 7.0, 2.5

    rules = _types.LimitRules("a toy", params, whole_costs=True)
    monkeypatch.setitem(_types.RULES, "toy", rules)
    monkeypatch.setitem(_types.ALGORITHMS, "toy", rules.description)
    lim = Limit("toy", "3/s", burst=9)
    assert (lim.burst, lim.capacity, lim.window, lim.per_second) == (2.0, 7.0, 2.5, 3.0)
    assert lim.name == "toy-3/s-b2"
    assert seen == [("toy", "3/s", 9, False, 0)]
    with pytest.raises(InvalidLimit, match=r"^'toy' never delays$"):
        Limit("toy", "3/s", nodelay=True)
    assert lim.check_cost(2) == 2.0
    with pytest.raises(InvalidCost, match=r"^toy counts whole requests"):
        lim.check_cost(0.5)


def test_registering_a_name_again_with_other_rules_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_types, "RULES", dict(_types.RULES))
    monkeypatch.setattr(_types, "ALGORITHMS", dict(_types.ALGORITHMS))
    gcra = ALGORITHMS["gcra"].rules
    _types.register("gcra", gcra)  # the same record again: harmless
    with pytest.raises(ValueError, match="'gcra' is already registered with other rules"):
        _types.register("gcra", gcra._replace(whole_costs=True))
    assert _types.RULES["gcra"] is gcra and list(_types.RULES) == NAMES


def test_an_empty_rule_table_refuses_every_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Were a Limit built before the algorithms registered (a partial import), it must fail
    loudly rather than accept any parameters, and say why."""
    monkeypatch.setattr(_types, "RULES", {})
    with pytest.raises(RuntimeError, match="no algorithm is registered"):
        Limit("gcra", "10/s", burst=-5)


def test_importing_only_the_values_module_still_validates_limits() -> None:
    """A fresh interpreter that imports ``ratekeeper._types`` and nothing else: Python
    imports the package first, and the package imports the algorithms, which register."""
    code = "\n".join([
        "import sys",
        "from ratekeeper._types import RULES, Limit",
        "assert 'ratekeeper.algorithms' in sys.modules",
        "print(','.join(RULES))",
        "lim = Limit('leaky-bucket', '10r/s', burst=2)",
        "print(lim.burst, lim.capacity, round(lim.window, 9))",
        "try:",
        "    Limit('gcra', '10/s', nodelay=True)",
        "except Exception as e:",
        "    print(type(e).__name__, e)",
    ])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.splitlines()
    assert out == [",".join(NAMES), "2.0 3.0 0.3",
                   "InvalidLimit nodelay/delay apply to 'leaky-bucket' only, not 'gcra'"]


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
    if not codec.fast_script:
        assert codec.fast_reset is None
        assert text in _lua.ONE[name].text and not _lua.ONE[name].straight
    else:
        assert _lua.ONE[name].straight and _lua.ONE[name].name == f"one-{name}"


@pytest.mark.parametrize("name", [n for n, a in ALGORITHMS.items() if a.redis.fast_script])
def test_single_limit_script_runs_the_general_scripts_decide_text(name: str) -> None:
    """One text per algorithm for the arithmetic: the straight-line single-limit script holds
    its Lua file's `decide`, the very text check.lua runs, between the shared prologue and
    epilogue, and defines no other function (Redis defines them again on every call)."""
    text = resources.files(algorithms).joinpath(ALGORITHMS[name].redis.script).read_text(
        encoding="utf-8")
    decide = _lua._DECIDE.search(text)
    assert decide is not None
    one = _lua.ONE[name].text
    assert decide[0] in one and decide[0] in _lua.CHECK.text
    prologue = _lua.lua_source("one_prologue.lua")
    epilogue = _lua.lua_source("one_epilogue.lua")
    assert prologue.split("NUMBER_OF_PARAMS", 1)[1] in one  # (np: its decide's count)
    assert epilogue.split("WRITE_STATE", 1)[0].split("PARAMS", 1)[1] in one
    assert one.index(prologue[-200:]) < one.index(decide[0]) < one.index(epilogue[:200])
    # the tag's wrapping (_lua._TAGGED) and decide: no helper, no closure that captures
    code = re.sub(r"--[^\n]*", "", one)  # (comments may name functions)
    assert re.findall(r"\bfunction\b", code) == ["function", "function"]
    assert "local function decide(" in one


def test_the_store_keeps_only_its_protocol_in_stores_lua() -> None:
    """The algorithms' Lua lives beside them (with their shared helpers, `_common.lua`, beside
    `_common.py`); stores/lua holds the store's entry points."""
    assert sorted(p.name for p in (SRC / "stores" / "lua").glob("*.lua")) == [
        "check.lua", "one.lua", "one_epilogue.lua", "one_prologue.lua", "refund.lua",
        "state.lua"]
    beside = {p.name for p in (SRC / "algorithms").glob("*.lua")} - {"_common.lua"}
    assert beside == {a.redis.script for a in ALGORITHMS.values()}


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


def _names_in_code(path: Path) -> list[tuple[str, int, str]]:
    """Every string constant in `path` (docstrings aside; comments are not in the tree) that
    names an algorithm."""
    names = set(NAMES)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr)}
    return [(path.name, n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings
            and any(re.search(rf"\b{re.escape(a)}\b", n.value) for a in names)]


def test_no_store_switches_on_algorithm_names() -> None:
    """The Redis store reads each algorithm's codec: no algorithm name appears in its code
    (docstrings and comments aside)."""
    for path in [*(SRC / "stores" / "redis").glob("*.py"), SRC / "stores" / "_lua.py"]:
        found = _names_in_code(path)
        assert not found, found


def test_the_values_do_not_switch_on_algorithm_names() -> None:
    """`Limit` reads its algorithm's registered rules: no algorithm name appears in
    ``_types.py``'s code (its docstrings may still teach with them)."""
    found = _names_in_code(SRC / "_types.py")
    assert not found, found
