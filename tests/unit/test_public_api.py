"""The public API: everything in ``__all__`` is importable, documented, and typed."""

from __future__ import annotations

import ast
import importlib
import importlib.resources
import inspect
from importlib.metadata import version

import pytest

import ratekeeper
import ratekeeper.algorithms as algos
from ratekeeper.testing import ManualClock

MODULES = ["ratekeeper", "ratekeeper.testing", "ratekeeper.stores", "ratekeeper.algorithms",
           "ratekeeper.limiter", "ratekeeper.cli"]


@pytest.mark.parametrize("module", MODULES)
def test_all_names_are_importable(module: str) -> None:
    mod = importlib.import_module(module)
    assert mod.__all__, module
    assert len(set(mod.__all__)) == len(mod.__all__)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.__all__ names {name!r}, which does not exist"
    ns: dict[str, object] = {}
    exec(f"from {module} import *", ns)  # the star import users write
    assert set(mod.__all__) <= set(ns)


def test_the_main_names() -> None:
    expected = {
        "Limit", "Limiter", "AsyncLimiter", "Decision", "Rate", "parse_rate", "MemoryStore",
        "Store", "AsyncStore", "Reservation", "AsyncReservation", "RateLimitExceeded",
        "InvalidRate", "InvalidLimit", "InvalidCost", "InvalidKey", "StoreError",
        "StoreUnavailable", "RateKeeperError", "ConfigError", "ALGORITHMS", "GLOBAL_KEY",
        "FailurePolicy", "__version__",
    }
    assert expected <= set(ratekeeper.__all__)
    assert ManualClock.__module__ == "ratekeeper.testing"


def test_public_names_are_documented() -> None:
    for name in ratekeeper.__all__:
        obj = getattr(ratekeeper, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, f"{name} has no docstring"


def test_errors_share_a_base_class() -> None:
    for name in ("InvalidRate", "InvalidLimit", "InvalidCost", "InvalidKey", "ConfigError",
                 "StoreError", "StoreUnavailable", "RateLimitExceeded"):
        assert issubclass(getattr(ratekeeper, name), ratekeeper.RateKeeperError)
    for name in ("InvalidRate", "InvalidLimit", "InvalidCost", "InvalidKey", "ConfigError"):
        assert issubclass(getattr(ratekeeper, name), ValueError)
    assert issubclass(ratekeeper.StoreUnavailable, ratekeeper.StoreError)


def test_version() -> None:
    assert ratekeeper.__version__ == version("ratekeeper")


def test_py_typed_is_shipped() -> None:
    marker = importlib.resources.files("ratekeeper") / "py.typed"
    assert marker.is_file()


def test_algorithms_import_nothing_of_ours_but_the_value_types() -> None:
    # The dependency direction of STYLE.md: the math does no I/O and imports no store.
    # (struct: the sliding-window counter's compact in-memory form, bytes arithmetic only)
    allowed = {"__future__", "math", "collections.abc", "typing", "_types", "_rates", "_errors",
               "_common", "", "struct"}
    for mod_name in ("token_bucket", "gcra", "leaky_bucket", "fixed_window",
                     "sliding_window_log", "sliding_window_counter", "_common"):
        mod = importlib.import_module(f"ratekeeper.algorithms.{mod_name}")
        assert mod.__doc__
        tree = ast.parse(inspect.getsource(mod))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [(node.module or "").lstrip(".")]
            else:
                continue
            for name in names:
                assert name in allowed, (mod_name, name)
    assert set(algos.ALGORITHMS) == set(ratekeeper.ALGORITHMS)
