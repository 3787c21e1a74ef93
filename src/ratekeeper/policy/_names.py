"""Naming rules both policy loaders share (TOML and envoyproxy/ratelimit's YAML): how a
state or rule name is spelled, what makes one unusable, and the "did you mean" hint. A leaf
module, so neither loader imports the other for them."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

__all__ = ["_closest", "_name_part", "_name_problem"]

#: Characters a state or rule name may carry as they are (everything else is %-encoded).
_NAME_SAFE = "/:@!$&'()*+,;=.~-_#[]|^<>?`"


def _name_part(s: str) -> str:
    return quote(s, safe=_NAME_SAFE)


def _name_problem(name: str) -> str | None:
    if len(name) > 200:
        return f"is {len(name)} characters long (at most 200, domain prefix included)"
    if any(c in name for c in "{}\n\r\0 ") or not name.isprintable():
        return "may not contain spaces, braces or control characters"
    return None


def _closest(word: str, choices: Sequence[str]) -> str | None:
    import difflib  # noqa: PLC0415 (only on the error path)

    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.75)
    return found[0] if found else None
