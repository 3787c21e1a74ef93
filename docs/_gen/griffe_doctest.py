"""A griffe extension for the API reference: doctest examples shown as code.

The docstrings show examples as doctest sessions (``>>> ...`` and the expected output), which
is what `help()` and an editor show well. In Markdown such a paragraph is prose, and an
expected output like ``[True, True, False]`` reads as a link. Each doctest paragraph (from a
``>>>`` line to the next blank line, outside code blocks) is fenced as ``pycon`` instead.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def fence_doctests(text: str) -> str:
    out: list[str] = []
    in_fence = in_doctest = False
    for line in text.splitlines():
        if in_doctest and not line.strip():
            out.append("```")
            in_doctest = False
        elif not in_doctest and _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and not in_doctest and line.startswith(">>>"):
            out.append("```pycon")
            in_doctest = True
        out.append(line)
    if in_doctest:
        out.append("```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(obj.docstring.value)
