"""What both TOML builders share (the policies' ``[service]``/``[domains]`` in `_loader`, the
``[http]`` part in `_http_loader`): the list of issues and the typed getters that report a
wrong type at its key path and carry on, so that every problem is reported, not the first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .._types import MAX_AMOUNT
from ..core import FailurePolicy
from ._model import SERVICE_FAILURES, ConfigIssue
from ._names import _closest

__all__ = ["Issues"]


def _typename(v: object) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "a table"
    return type(v).__name__


class Issues:
    """The issues found so far, and getters that add one instead of raising."""

    def __init__(self) -> None:
        self.issues: list[ConfigIssue] = []

    def err(self, loc: str, msg: str) -> None:
        self.issues.append(ConfigIssue(loc, msg))

    # typed getters: report and return None on a wrong type -------------------------

    def _unknown(self, loc: str, tbl: Mapping[str, Any], known: Sequence[str]) -> None:
        for k in tbl:
            if k not in known:
                hint = _closest(k, known)
                self.err(_join(loc, k), f"unknown key {k!r}"
                         + (f" (did you mean {hint!r}?)" if hint else "")
                         + f"; expected one of: {', '.join(known)}")

    def _bool(self, loc: str, tbl: Mapping[str, Any], key: str, default: bool = False) -> bool:
        v = tbl.get(key, default)
        if not isinstance(v, bool):
            self.err(_join(loc, key), f"must be true or false, got {_typename(v)} {v!r}")
            return default
        return v

    def _str(self, loc: str, tbl: Mapping[str, Any], key: str, *, required: bool = False,
             default: str | None = None) -> str | None:
        if key not in tbl:
            if required:
                self.err(loc, f"missing {key!r}")
            return default
        v = tbl[key]
        if not isinstance(v, str):
            self.err(_join(loc, key), f"must be a string, got {_typename(v)} {v!r}")
            return None
        return v

    def _positive(self, loc: str, v: object, what: str) -> float | None:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.err(loc, f"{what} must be a number, got {_typename(v)} {v!r}")
            return None
        try:
            f = float(v)
        except OverflowError:  # an int of hundreds of digits
            f = math.inf
        if not (f > 0 and math.isfinite(f)):
            self.err(loc, f"{what} must be a finite number above 0, got {v!r:.40}")
            return None
        if f > MAX_AMOUNT:
            self.err(loc, f"{what} must be at most {MAX_AMOUNT} (2**63 - 1, the largest "
                          f"integer a store counts), got {v!r:.40}")
            return None
        return f

    def _failure(self, loc: str, v: object) -> FailurePolicy | None:
        """A store failure policy: open, closed or local (never the library's raise)."""
        if v == "raise":
            self.err(loc, "'raise' is the library's policy of raising StoreError to the "
                          "caller; a check must get an answer: choose one of "
                          f"{', '.join(map(repr, SERVICE_FAILURES))} (Envoy's "
                          "failure_mode_deny decides what a service error means)")
            return None
        if v not in SERVICE_FAILURES:
            hint = _closest(str(v), list(SERVICE_FAILURES))
            self.err(loc, f"must be one of {', '.join(map(repr, SERVICE_FAILURES))}, got {v!r}"
                     + (f" (did you mean {hint!r}?)" if hint else ""))
            return None
        return v

    def _table(self, loc: str, v: object) -> Mapping[str, Any] | None:
        if not isinstance(v, dict):
            self.err(loc, f"must be a table, got {_typename(v)} {v!r:.60}")
            return None
        return v


def _join(loc: str, key: str) -> str:
    return f"{loc}.{_key_path(key)}" if loc else _key_path(key)


def _key_path(key: str) -> str:
    """A TOML key as it appears in a table path (quoted unless bare)."""
    if key and re.fullmatch(r"[A-Za-z0-9_-]+", key):
        return key
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
