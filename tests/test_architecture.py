"""Dependencies point one way (docs/architecture.md, STYLE.md).

    values < algorithms < stores < core, limiter < policy < http, service, replay < cli
    < the package's API

Every module of ``src/ratekeeper`` is read (``ast``, not imported): every ``import`` and
``from ... import`` statement, relative or absolute, at module level or inside a function or
an ``if TYPE_CHECKING:`` block. An import of a module in a higher layer fails the test with
the file, the line and the arrow. Generated code (``service/proto``) is not read.

Within one layer, rooms do not import each other, except these arrows:

- ``limiter -> core``: the limiter is a driver of the core (never the other way round);
- ``service -> http.headers``: the response fields of a decision (``RateLimit``,
  ``Retry-After``, problem bodies) are one module of pure functions on a `Decision`, which
  the middleware and the service both send; a second copy would drift. Nothing else of
  ``http`` (the ASGI/WSGI middleware, its policy and client-key logic) is the service's,
  and ``http`` imports nothing of ``service``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "ratekeeper"
GENERATED = ("ratekeeper.service.proto",)

#: The room of each module prefix (the longest listed prefix of a module wins) ...
ROOMS: dict[str, str] = {
    "ratekeeper._types": "values", "ratekeeper._rates": "values",
    "ratekeeper._errors": "values", "ratekeeper._json": "values",
    "ratekeeper._compiled": "values", "ratekeeper._memo": "values",
    "ratekeeper.testing": "values",
    "ratekeeper.algorithms": "algorithms",
    "ratekeeper.stores": "stores",
    "ratekeeper.core": "core", "ratekeeper.limiter": "limiter",
    "ratekeeper.policy": "policy",
    "ratekeeper.http": "http", "ratekeeper.service": "service",
    "ratekeeper.replay": "replay",
    "ratekeeper.cli": "cli", "ratekeeper.__main__": "cli",
    "ratekeeper": "api",  # the package itself: the public API re-exports every layer
}
#: ... and the layer of each room, lowest first.
LAYERS: dict[str, int] = {
    "values": 0, "algorithms": 1, "stores": 2, "core": 3, "limiter": 3, "policy": 4,
    "http": 5, "service": 5, "replay": 5, "cli": 6, "api": 7,
}
#: Arrows allowed between two rooms of one layer: (importing room, imported module prefix).
ACROSS: frozenset[tuple[str, str]] = frozenset({
    ("limiter", "ratekeeper.core"),
    ("service", "ratekeeper.http.headers"),
})


def room_of(module: str) -> str:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        room = ROOMS.get(".".join(parts[:n]))
        if room is not None:
            return room
    raise AssertionError(f"{module} is in no room: add it to ROOMS in {__file__}")


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    base = SRC.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(tree: ast.AST, module: str, is_package: bool
                     ) -> list[tuple[int, str]]:
    """``(line, module)`` for every ratekeeper module `tree` imports."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for a in node.names:  # `from pkg import submodule` imports the submodule
                sub = f"{target}.{a.name}"
                out.append((node.lineno, sub if _is_module(sub) else target))
    return sorted({(line, m) for line, m in out
                   if m == "ratekeeper" or m.startswith("ratekeeper.")})


def upward_imports(source: str, module: str, path: str, *, is_package: bool = False
                   ) -> list[str]:
    """Every import in `source` (the text of `module`) that runs up the layers, as
    ``path:line: room -> room (module imports module)``."""
    src_room = room_of(module)
    problems: list[str] = []
    for line, target in imported_modules(ast.parse(source, path), module, is_package):
        dst_room = room_of(target)
        if dst_room == src_room:
            continue
        up, same = LAYERS[dst_room] > LAYERS[src_room], LAYERS[dst_room] == LAYERS[src_room]
        allowed = any(src_room == a and (target == b or target.startswith(b + "."))
                      for a, b in ACROSS)
        if up or (same and not allowed):
            why = "upward" if up else "across one layer"
            problems.append(f"{path}:{line}: {src_room} -> {dst_room} ({why}: {module} "
                            f"imports {target})")
    return problems


def package_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py")
                  if not module_name(p).startswith(GENERATED))


def test_no_import_runs_up_the_layers() -> None:
    problems: list[str] = []
    for path in package_modules():
        problems += upward_imports(path.read_text(encoding="utf-8"), module_name(path),
                                   str(path.relative_to(SRC.parent)),
                                   is_package=path.name == "__init__.py")
    assert not problems, "imports that run against the layer order:\n" + "\n".join(problems)


def test_every_module_is_read_and_placed() -> None:
    names = [module_name(p) for p in package_modules()]
    for must in ("ratekeeper.cli", "ratekeeper.core", "ratekeeper.stores._cli",
                 "ratekeeper.service._cli", "ratekeeper.service._http"):
        assert must in names
    assert all(room_of(n) for n in names)


@pytest.mark.parametrize(("module", "source", "arrow"), [
    ("ratekeeper.stores._x", "from ..cli import register\n", "stores -> cli (upward"),
    ("ratekeeper.stores._x", "def f():\n    from ratekeeper.limiter import Limiter\n",
     "stores -> limiter (upward"),
    ("ratekeeper.algorithms.x", "from .. import core\n", "algorithms -> core (upward"),
    ("ratekeeper.service._x", "from ..http import asgi\n", "service -> http (across"),
    ("ratekeeper.http.x", "from ratekeeper.service import Engine\n", "http -> service ("),
    ("ratekeeper.core", "import ratekeeper.limiter\n", "core -> limiter (across"),
    ("ratekeeper._types", "from . import Limit\n", "values -> api (upward"),
])
def test_the_checker_reports_a_synthetic_wrong_way_import(module: str, source: str,
                                                          arrow: str) -> None:
    (problem,) = upward_imports(source, module, "src/x.py")
    line = source.count("\n", 0, source.index("import")) + 1
    assert problem.startswith(f"src/x.py:{line}: {arrow}"), problem


def test_the_checker_allows_the_downward_and_the_named_arrows() -> None:
    ok = ("from .._types import Limit\nfrom ..core import decide\n"
          "from ..http.headers import ratelimit_headers\nimport json\n")
    assert upward_imports(ok, "ratekeeper.service._x", "src/x.py") == []
    assert upward_imports("from .core import run\n", "ratekeeper.limiter", "src/x.py") == []
    assert upward_imports("from ._errors import X\n", "ratekeeper._types", "src/x.py") == []
