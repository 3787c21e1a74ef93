"""The public surface of ratekeeper.http: __all__ is complete and the package imports
without any web framework installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import ratekeeper.http as rkhttp


def test_all_names_resolve() -> None:
    for name in rkhttp.__all__:
        assert getattr(rkhttp, name) is not None, name
    assert sorted(rkhttp.__all__) == sorted(set(rkhttp.__all__))


def test_unknown_attribute() -> None:
    try:
        rkhttp.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as e:
        assert "NoSuchThing" in str(e)
    else:
        raise AssertionError("expected AttributeError")


def test_imports_without_frameworks() -> None:
    """Block starlette, fastapi, flask, django and httpx: the core http modules still load."""
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {"starlette", "fastapi", "flask", "django", "httpx",
                                          "werkzeug", "uvicorn"}:
                    raise ImportError(f"blocked {name}")
                return None
        sys.meta_path.insert(0, Block())
        import ratekeeper.http as h
        from ratekeeper.http import RateLimitMiddleware, WSGIRateLimitMiddleware
        from ratekeeper.http import headers, asgi, wsgi
        print("ok", len(h.__all__))
        for adapter in ("fastapi", "django"):
            try:
                __import__("ratekeeper.http." + adapter)
            except ImportError as e:
                print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")
    assert "pip install 'ratekeeper[asgi]'" in out.stdout
    assert "pip install 'ratekeeper[django]'" in out.stdout
