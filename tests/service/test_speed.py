"""The service's fast stack and its pure-Python fallback.

`ratekeeper serve` runs on uvloop + httptools and encodes JSON with orjson when they are
installed (the service extra installs them where they have wheels); without them it runs the
same on asyncio + h11 and the standard library's json, and answers the same bytes.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper import _compiled
from ratekeeper.service import _http
from tests.service._proc import ServiceProcess

HERE = Path(__file__).parent
POLICIES = HERE / "policies" / "service.toml"
#: The install compiled `_compiled.MODULES` here (CI requires it: test_compiled_modules.py).
_BUILT = (Path(_compiled.__file__).with_name(_compiled.MANIFEST).exists()
          and not _compiled._pure())

#: JSON values as /v1/check answers hold them: names (any text), counts, floats of every
#: magnitude (1e-07 is where orjson and json print differently), booleans and nulls.
_floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=1e-9, max_value=1e-4).map(lambda x: round(x, 9)),
)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), _floats,
                     st.text())
_json_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(), inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(_json_values)
def test_fast_json_encoding_is_byte_for_byte_the_standard_librarys(obj: object) -> None:
    assert _http.orjson is not None, "the test extra installs orjson"
    assert _http.dumps(obj) == _http._stdlib_dumps(obj)


@pytest.mark.parametrize("x", [1e-07, 5e-05, 2.5e-09, 1e16, 1e-4, 0.1, 3600.000000001])
def test_small_and_large_floats_encode_as_the_standard_library_prints_them(x: float) -> None:
    body = {"decision": {"reset_after": x, "retry_after": x}}
    assert _http.dumps(body) == json.dumps(body, separators=(",", ":")).encode()


@pytest.mark.parametrize("x", [math.inf, -math.inf, math.nan])
def test_non_finite_numbers_are_refused_with_either_encoder(x: float) -> None:
    # The reference (Starlette's JSONResponse) refuses them; orjson alone would write null.
    with pytest.raises(ValueError, match="not JSON compliant"):
        _http.dumps({"reset_after": x})


def test_without_orjson_the_standard_library_encodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "orjson", None)
    body = {"a": [1, 1e-07, "é\u2028"], "b": None}
    assert _http.dumps(body) == json.dumps(body, ensure_ascii=False,
                                           separators=(",", ":")).encode()


def _no_accelerators(tmp_path: Path) -> Path:
    """A directory that, first on PYTHONPATH, makes uvloop, httptools and orjson
    unimportable, as on a platform without their wheels."""
    stubs = tmp_path / "no-accelerators"
    stubs.mkdir()
    for name in ("uvloop", "httptools", "orjson"):
        (stubs / f"{name}.py").write_text(
            f"raise ImportError('{name} is not installed here (test stub)')\n")
    return stubs


def test_service_runs_without_uvloop_httptools_or_orjson_and_answers_the_same_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with ServiceProcess(POLICIES, tmp_path / "fast.log") as fast:
        fast_ready = fast.wait_for(lambda r: r.get("event") == "listening")
        with httpx.Client(base_url=fast.http, timeout=10) as c:
            fast_bodies = [c.get("/v1/policies").content, c.get("/healthz").content]
    monkeypatch.setenv("PYTHONPATH", str(_no_accelerators(tmp_path)))
    monkeypatch.setenv(_compiled.PURE_PYTHON_ENV, "1")  # nor the compiled modules
    with ServiceProcess(POLICIES, tmp_path / "plain.log") as plain:
        plain_ready = plain.wait_for(lambda r: r.get("event") == "listening")
        with httpx.Client(base_url=plain.http, timeout=10) as c:
            plain_bodies = [c.get("/v1/policies").content, c.get("/healthz").content]
            r = c.post("/v1/check", json={"domain": "t", "descriptors": [{"user": "nofast"}]})
            assert r.status_code == 200 and r.json()["allowed"] is True
            assert r.json()["decision"]["limit"] == "t.user"
    assert (fast_ready["loop"], fast_ready["http_parser"], fast_ready["json"]) == (
        "uvloop", "httptools", "orjson")
    assert (plain_ready["loop"], plain_ready["http_parser"], plain_ready["json"]) == (
        "asyncio", "h11", "json")
    # How many of the compiled modules it imported run compiled (all, where they are built).
    used, imported = map(int, fast_ready["compiled"].split("/"))
    assert imported >= 6 and used == (imported if _BUILT else 0)
    assert plain_ready["compiled"] == f"0/{imported}"
    # The same bytes, but for the moment each process loaded its policies.
    loaded = re.compile(rb'"loaded_at":"[^"]*"')
    assert [loaded.sub(b"", b) for b in plain_bodies] == [loaded.sub(b"", b) for b in fast_bodies]
    assert b'"per_second":0.000833333' in fast_bodies[0]  # a float the encoders print alike
