"""Hostile policies files (issue 28, items 7-10): each is refused with a clear `PolicyError`
in bounded time and memory, a failed reload keeps the old policies and says so, checking a
file never runs its code, and numbers are bounded to what a limit can mean."""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from ratekeeper import Limit
from ratekeeper._errors import InvalidCost, InvalidLimit
from ratekeeper._types import MAX_AMOUNT, check_cost
from ratekeeper.http.wsgi import WSGIRateLimitMiddleware
from ratekeeper.policy import PolicyError, PolicyHolder, check_file, load_policies
from ratekeeper.policy._loader import MAX_DEPTH, MAX_FILE_BYTES, parse_policies_text
from ratekeeper.policy._request import request_from_json
from ratekeeper.testing import ManualClock

ONE_RULE = '''
[http]
domain = "web"
descriptors = [["client_ip"]]

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-ip", rate = "100/minute" }]
'''


def _write(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))


def _issues(e: pytest.ExceptionInfo[PolicyError]) -> str:
    return "\n".join(str(i) for i in e.value.issues)


# item 7: size and depth are refused before parsing ---------------------------------------


@pytest.mark.parametrize("text", [
    "x = " + "[" * 2000 + "]" * 2000 + "\n",
    "x = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n",
    ".".join(["a"] * 20000) + " = 1\n",  # tomllib: quadratic memory in the parts
    "[" + ".".join(["a"] * 5000) + "]\n",
], ids=["arrays", "inline-tables", "dotted-key", "dotted-header"])
def test_a_deeply_nested_toml_file_is_refused_naming_the_depth_limit(
        tmp_path: Path, text: str) -> None:
    path = tmp_path / "deep.toml"
    path.write_text(text)
    with pytest.raises(PolicyError) as e:
        load_policies(path)
    assert f"at most {MAX_DEPTH}" in _issues(e) and str(path) in str(e.value)


def test_a_policies_file_over_the_size_limit_is_refused_before_it_is_read_whole(
        tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    with path.open("w") as f:
        f.write(ONE_RULE)
        f.write("#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(PolicyError) as e:
        load_policies(path)
    assert f"{MAX_FILE_BYTES} bytes" in _issues(e)


def test_nesting_just_inside_the_depth_limit_still_loads() -> None:
    text = ONE_RULE + "\n[domains.web.limits.x]\nrate = \"1/s\"\ndescription = \"" \
        + "d" * 10 + "\"\n"
    assert parse_policies_text(text).rule_count == 1


@pytest.mark.parametrize("text", [
    "domain: x\ndescriptors: " + "[" * 900 + "]" * 900 + "\n",
    "domain: x\ndescriptors: &a\n  - key: k\n    descriptors: *a\n",  # a cycle
], ids=["nested", "cyclic-alias"])
def test_a_deeply_nested_or_cyclic_yaml_file_is_refused_naming_the_depth_limit(
        tmp_path: Path, text: str) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as e:
        load_policies(path)
    assert f"at most {MAX_DEPTH}" in _issues(e)


def test_yaml_aliases_that_expand_exponentially_are_refused(tmp_path: Path) -> None:
    lines = ["domain: x", "descriptors:", "  - key: z",
             "    descriptors: &l0 [{key: a, rate_limit: {unit: second, requests_per_unit: 1}}]"]
    for i in range(1, 24):  # each level lists the previous one twice: 2**23 descriptors,
        # nested 2 deep per level (inside MAX_DEPTH)
        lines += [f"  - key: k{i}", f"    descriptors: &l{i} [{{key: a, descriptors: *l{i - 1}}},"
                  f" {{key: b, descriptors: *l{i - 1}}}]"]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(PolicyError) as e:
        load_policies(path)
    assert "nodes" in _issues(e)


class _Recorder:
    def __init__(self) -> None:
        self.reloads: list[tuple[bool, int]] = []

    def decision(self, domain: str, rule: str, policy: str, outcome: str) -> None:
        pass

    def store_call(self, seconds: float, error: str | None) -> None:
        pass

    def failure_policy(self, policy: str) -> None:
        pass

    def request(self, transport: str, result: str, seconds: float) -> None:
        pass

    def reload(self, ok: bool, generation: int) -> None:
        self.reloads.append((ok, generation))


def test_a_failed_reload_keeps_the_old_policies_and_is_recorded_in_last_error_and_stats(
        tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    _write(path, ONE_RULE)
    stats = _Recorder()
    holder = PolicyHolder(path, stats=stats)
    path.write_text("x = " + "[" * 2000 + "]" * 2000 + "\n")
    assert holder.reload() is False
    assert holder.current.generation == 1 and holder.last_error is not None
    assert f"at most {MAX_DEPTH}" in holder.last_error
    assert stats.reloads == [(True, 1), (False, 1)]


def test_a_loader_that_raises_anything_is_a_failed_reload_not_an_exception(
        tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    _write(path, ONE_RULE)
    calls = []

    def loader(p: Path) -> Any:
        calls.append(p)
        if len(calls) > 1:
            raise RecursionError("maximum recursion depth exceeded")
        return load_policies(p)

    stats = _Recorder()
    holder = PolicyHolder(path, stats=stats, loader=loader)
    assert holder.reload() is False
    assert holder.last_error is not None and "RecursionError" in holder.last_error
    assert stats.reloads[-1] == (False, 1)


def _app(environ: Any, start_response: Any) -> Iterator[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    yield b"ok"


def _status(mw: WSGIRateLimitMiddleware) -> str:
    env = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "192.0.2.1"}
    got: dict[str, str] = {}

    def start_response(status: str, hdrs: list[tuple[str, str]], exc: Any = None) -> None:
        got["status"] = status

    b"".join(mw(env, cast(Any, start_response)))
    return got["status"]


def test_the_middlewares_watch_never_fails_a_request_on_a_hostile_file_and_logs_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "p.toml"
    _write(path, ONE_RULE)
    clock = ManualClock(1000.0)
    mw = WSGIRateLimitMiddleware(_app, path, clock=clock, watch=5.0)
    path.write_text("x = " + "[" * 2000 + "]" * 2000 + "\n")
    with caplog.at_level(logging.ERROR, logger="ratekeeper.policy"):
        for _ in range(4):
            clock.advance(6.0)
            assert _status(mw).startswith("200")
    failed = [r for r in caplog.records if getattr(r, "event", "") == "reload_failed"]
    assert len(failed) == 1
    assert mw.holder is not None and mw.holder.current.generation == 1


# item 8: check-config is linear in the limits of one rule --------------------------------


def _many_limits(n: int) -> str:
    inline = ", ".join(f'{{ name = "l{i}", rate = "1/s" }}' for i in range(n))
    return f'[[domains.d.descriptors]]\nkey = "k"\nlimits = [{inline}]\n'


def _calls_to_load(text: str) -> int:
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        parse_policies_text(text)
    finally:
        sys.setprofile(None)
    return count


def test_loading_a_rule_is_linear_in_the_limits_it_lists() -> None:
    small, large = _calls_to_load(_many_limits(500)), _calls_to_load(_many_limits(2000))
    # 4x the limits: linear work grows 4x; the quadratic duplicate check grew it ~13x.
    assert large < 6 * small, (small, large)


# item 9: checking a file never runs its code ------------------------------------------------


HOOKED = ONE_RULE.replace('descriptors = [["client_ip"]]', '''descriptors = [["client_ip"]]

[http.attributes.plan]
hook = "rk_marker_hook:plan_of"
''')


@pytest.fixture
def marker_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A hook module that writes a marker file when it is imported."""
    marker = tmp_path / "imported.marker"
    (tmp_path / "rk_marker_hook.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "def plan_of(request):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "rk_marker_hook", raising=False)
    return marker


def test_check_file_does_not_import_the_hooks_a_file_names(
        tmp_path: Path, marker_hook: Path) -> None:
    path = tmp_path / "p.toml"
    _write(path, HOOKED)
    policies, issues = check_file(path)
    assert issues == [] and policies is not None
    assert policies.unchecked_hooks == ("rk_marker_hook:plan_of",)
    assert not marker_hook.exists()


def test_check_file_imports_the_hooks_only_when_asked(tmp_path: Path, marker_hook: Path) -> None:
    path = tmp_path / "p.toml"
    _write(path, HOOKED)
    policies, issues = check_file(path, import_hooks=True)
    assert issues == [] and policies is not None and policies.unchecked_hooks == ()
    assert marker_hook.read_text() == "ran"


def test_check_config_reports_hooks_as_unchecked_without_running_them(
        tmp_path: Path, marker_hook: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ratekeeper.cli import main  # noqa: PLC0415

    path = tmp_path / "p.toml"
    _write(path, HOOKED)
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "rk_marker_hook:plan_of" in out and "--import-hooks" in out
    assert not marker_hook.exists()
    assert main(["check-config", "--import-hooks", str(path)]) == 0
    assert marker_hook.exists()


def test_an_unimported_hook_with_a_malformed_reference_is_still_an_error(
        tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    _write(path, HOOKED.replace("rk_marker_hook:plan_of", "not a module:f"))
    policies, issues = check_file(path)
    assert policies is None and any("not a module:f" in str(i) for i in issues)


# item 10: numbers a limit can mean, addresses ----------------------------------------------


@pytest.mark.parametrize("param", ["burst = 1e308", "burst = 1e19",
                                   'rate = "99999999999999999999/s"'])
def test_a_limit_number_beyond_what_a_store_can_count_is_refused(param: str) -> None:
    text = ONE_RULE.replace('rate = "100/minute" }', f'algorithm = "token-bucket", '
                            f'rate = "100/minute", {param} }}') if "burst" in param else \
        ONE_RULE.replace('rate = "100/minute"', param.replace("rate = ", "rate = "))
    with pytest.raises(PolicyError) as e:
        parse_policies_text(text)
    assert f"{MAX_AMOUNT}" in _issues(e)


def test_limit_bounds_are_stated_in_the_error() -> None:
    with pytest.raises(InvalidLimit, match=f"at most {MAX_AMOUNT}"):
        Limit("token-bucket", "10/s", burst=1e308)
    with pytest.raises(InvalidLimit, match="at most"):
        Limit("leaky-bucket", "10/s", burst=10, delay=10**20)
    assert Limit("token-bucket", "10/s", burst=2**62).burst == 2**62


@pytest.mark.parametrize("cost", [1e308, float(MAX_AMOUNT) * 2, float("nan"), float("inf"),
                                  10**400])
def test_a_cost_beyond_what_a_store_can_count_is_refused(cost: float) -> None:
    with pytest.raises(InvalidCost):
        check_cost(cost)


@pytest.mark.parametrize("field", ["cost = 1e308", "cost = nan", "cost = inf"])
def test_a_rule_cost_that_is_huge_or_not_a_number_is_a_located_error(field: str) -> None:
    text = ONE_RULE.replace('key = "client_ip"\n', f'key = "client_ip"\n{field}\n')
    with pytest.raises(PolicyError) as e:
        parse_policies_text(text)
    assert "cost" in _issues(e)


def test_a_huge_max_cost_is_refused_with_its_bound() -> None:
    text = "[service]\nmax_cost = 1e308\n" + ONE_RULE
    with pytest.raises(PolicyError) as e:
        parse_policies_text(text)
    assert f"{MAX_AMOUNT}" in _issues(e)


def test_a_very_long_descriptor_key_is_a_clear_error() -> None:
    text = ONE_RULE.replace('key = "client_ip"\nlimits', f'key = "{"k" * 100_000}"\nlimits')
    with pytest.raises(PolicyError) as e:
        parse_policies_text(text)
    assert "characters" in _issues(e) and len(_issues(e)) < 2000


@pytest.mark.parametrize("client", ["not-an-ip", "999.1.1.1", "::g", "1.2.3.4 5"])
def test_a_request_whose_client_is_not_an_ip_address_is_refused(client: str) -> None:
    with pytest.raises(ValueError, match="client must be an IP address"):
        request_from_json({"method": "GET", "path": "/", "client": client})


@pytest.mark.parametrize("client", ["203.0.113.7", "2001:db8::1", "[2001:db8::1]:443",
                                    "192.0.2.1:8080"])
def test_a_request_whose_client_is_an_ip_address_is_accepted(client: str) -> None:
    assert request_from_json({"path": "/", "client": client}).peer == client
