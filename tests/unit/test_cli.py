"""`ratekeeper simulate`: the conformance contract, the summary, stdin, and clear errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import Decision, Limit, Limiter
from ratekeeper.cli import decision_json, main
from ratekeeper.testing import ManualClock


def write(tmp_path: Path, lines: list[Any]) -> Path:
    p = tmp_path / "trace.jsonl"
    p.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines),
                 encoding="utf-8")
    return p


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[Any], str, str]:
    rc = main(["simulate", *argv])
    out, err = capsys.readouterr()
    objs = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    return rc, objs, out, err


def test_one_object_per_event(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, [{"t": 0, "key": "a", "cost": 1}] * 4 + [{"t": 0.5, "key": "a"},
                                                                      {"t": 0, "key": "a",
                                                                       "cost": 5}])
    rc, objs, _, err = run(capsys, "token-bucket", "--rate", "1/s", "--burst", "3",
                           "--trace", str(trace))
    assert rc == 0 and err == ""
    assert [o["allowed"] for o in objs] == [True, True, True, False, False, False]
    assert objs[0] == {"t": 0, "key": "a", "allowed": True, "remaining": 2, "retry_after": 0,
                       "reset_after": 1.0, "delay": 0.0, "limit": "simulated"}
    assert objs[3]["retry_after"] == 1.0 and objs[3]["delay"] == 0.0
    assert objs[4]["retry_after"] == 0.5
    assert objs[5]["retry_after"] is None  # never: the cost exceeds the burst
    assert objs[5]["remaining"] == 0


def test_defaults_for_missing_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, [{"t": 1}, {}, {"key": 7}, {"key": "7"}, {"t": 2.5, "cost": 2}])
    rc, objs, _, _ = run(capsys, "fixed-window", "--rate", "3/s", "--trace", str(trace))
    assert rc == 0
    # key "default" at t=1 twice (no t: the clock stays), then key "7" (a number is a string)
    assert [o["remaining"] for o in objs] == [2, 1, 2, 1, 1]


def test_leaky_bucket_modes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, [{"t": 0, "key": "a"}] * 4)
    _, objs, _, _ = run(capsys, "leaky-bucket", "--rate", "1r/s", "--burst", "2",
                        "--trace", str(trace))
    assert [o["delay"] for o in objs[:3]] == [0.0, 1.0, 2.0] and not objs[3]["allowed"]
    _, objs, _, _ = run(capsys, "leaky-bucket", "--rate", "1r/s", "--burst", "2", "--nodelay",
                        "--trace", str(trace))
    assert [o["delay"] for o in objs[:3]] == [0.0, 0.0, 0.0]
    _, objs, _, _ = run(capsys, "leaky-bucket", "--rate", "1r/s", "--burst", "2", "--delay", "1",
                        "--trace", str(trace))
    assert [o["delay"] for o in objs[:3]] == [0.0, 0.0, 1.0]


def test_a_rejected_queued_request_has_delay_zero_as_the_library_says(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, [{"t": 0, "key": "a"}] * 3)
    _, objs, _, _ = run(capsys, "leaky-bucket", "--rate", "1r/s", "--burst", "1",
                        "--trace", str(trace))
    lib = Limiter(Limit("leaky-bucket", "1r/s", burst=1), clock=ManualClock())
    decisions = [lib.hit("a") for _ in range(3)]
    assert [o["delay"] for o in objs] == [d.delay for d in decisions] == [0.0, 1.0, 0.0]
    assert not objs[2]["allowed"] and not decisions[2].allowed


def test_each_event_line_names_its_instant_and_key(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, [{"t": 0.25, "key": "alice"}, {"t": 1, "key": "bob", "cost": 2},
                             {"key": "carol"}])
    _, objs, _, _ = run(capsys, "gcra", "--rate", "1/s", "--burst", "3", "--trace", str(trace))
    assert [(o["t"], o["key"]) for o in objs] == [(0.25, "alice"), (1, "bob"), (1.0, "carol")]


@pytest.mark.parametrize("url", ["memory://", "memory://?max_keys=10", "MEMORY://"])
def test_simulate_replays_through_a_memory_store_url(url: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, [{"t": t / 10, "key": k} for t in range(30) for k in "ab"])
    base = run(capsys, "token-bucket", "--rate", "2/s", "--burst", "2", "--trace", str(trace))
    via = run(capsys, "token-bucket", "--rate", "2/s", "--burst", "2", "--trace", str(trace),
              "--store", url)
    assert via[0] == 0 and via[3] == "" and via[1] == base[1]


@pytest.mark.parametrize(("url", "message"), [
    ("foo://x", "unknown store URL scheme 'foo'"),
    ("localhost:6379", "not a store URL"),
    ("memory://somewhere", "a memory store has no address"),
    ("memory://?max_keys=lots", "max_keys must be a whole number"),
    ("memory://?size=3", "unknown memory:// option"),
])
def test_a_bad_store_url_is_a_clear_error_not_a_traceback(
        url: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, [{"t": 0}])
    rc, objs, _, err = run(capsys, "gcra", "--rate", "1/s", "--trace", str(trace), "--store", url)
    assert rc == 2 and objs == []
    assert message in err and "Traceback" not in err
    if "scheme" in message or "not a store URL" in message:
        assert "memory://, redis://host:6379/0" in err  # the forms that do work


def test_stdin_trace(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    lines = "".join(json.dumps({"t": t, "key": "k"}) + "\n" for t in (0, 0, 0))
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    rc, objs, _, _ = run(capsys, "gcra", "--rate", "1/s", "--burst", "2", "--trace", "-")
    assert rc == 0 and [o["allowed"] for o in objs] == [True, True, False]


def test_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = [{"t": 0, "key": "alice"}] * 4 + [{"t": 0, "key": "bob"}]
    trace = write(tmp_path, events)
    rc, objs, out, _ = run(capsys, "leaky-bucket", "--rate", "1r/s", "--burst", "2",
                           "--trace", str(trace), "--summary")
    assert rc == 0 and objs == []  # the summary replaces the events
    lines = out.splitlines()
    assert lines[0] == "policy: leaky-bucket 1/s burst=2"
    for flag, shown in (("--nodelay", "nodelay"), ("--delay=1", "delay=1")):
        _, _, out, _ = run(capsys, "leaky-bucket", "--rate", "1r/s", "--burst", "2", flag,
                           "--trace", str(trace), "--summary")
        assert out.splitlines()[0] == f"policy: leaky-bucket 1/s burst=2 {shown}"
    assert lines[1].split() == ["key", "admitted", "delayed", "rejected"]
    rows = {ln.split()[0]: [int(x) for x in ln.split()[1:]] for ln in lines[2:]}
    assert rows == {"alice": [1, 2, 1], "bob": [1, 0, 0], "total": [2, 2, 1]}
    rc, objs, out, _ = run(capsys, "leaky-bucket", "--rate", "1r/s", "--burst", "2",
                           "--trace", str(trace), "--summary", "--events")
    assert len(objs) == 5 and "total" in out


def test_summary_of_a_window_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, [{"t": 0, "key": "a-long-key-name"}] * 3)
    rc, _, out, _ = run(capsys, "sliding-window-log", "--rate", "2/m", "--trace", str(trace),
                        "--summary")
    lines = out.splitlines()
    assert rc == 0 and lines[0] == "policy: sliding-window-log 2/m"  # no burst for a window
    assert lines[2].split() == ["a-long-key-name", "2", "0", "1"]
    assert len({len(ln) for ln in lines[1:]}) == 1  # columns line up


def test_summary_columns_line_up_with_short_keys(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, [{"t": 0, "key": "a"}])
    _, _, out, _ = run(capsys, "gcra", "--rate", "1/s", "--trace", str(trace), "--summary")
    assert len({len(ln) for ln in out.splitlines()[1:]}) == 1


def test_malformed_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, [
        {"t": 0, "key": "a"},  # 1
        "not json",  # 2
        "",  # 3: blank, skipped
        "# a comment",  # 4: skipped
        [1, 2],  # 5
        {"t": "soon"},  # 6
        {"t": True},  # 7
        {"t": 0, "cost": 0},  # 8
        {"t": 0, "cost": "1"},  # 9
        {"t": 0, "key": ""},  # 10
        {"t": 0, "key": None},  # 11
        {"t": 0, "key": "a\nb"},  # 12
        {"t": 0, "key": "a"},  # 13
    ])
    rc, objs, _, err = run(capsys, "gcra", "--rate", "1/s", "--burst", "5", "--trace", str(trace))
    assert rc == 1
    assert "9 event(s) could not be replayed" in err
    errors = [o["error"] for o in objs if "error" in o]
    decisions = [o for o in objs if "error" not in o]
    assert [d["remaining"] for d in decisions] == [4, 3]  # the good lines still count, in order
    assert "error" in objs[1] and "error" not in objs[-1]
    assert errors[0].startswith("line 2: not JSON") and "'not json'" in errors[0]
    assert errors[1].startswith("line 5: expected an object")
    assert errors[2].startswith("line 6:") and "'soon'" in errors[2]
    assert errors[3].startswith("line 7:") and "True" in errors[3]
    assert errors[4].startswith("line 8:") and "cost" in errors[4]
    assert errors[5].startswith("line 9:") and "'1'" in errors[5]
    assert errors[6].startswith("line 10:") and "empty" in errors[6]
    assert errors[7].startswith("line 11:") and "None" in errors[7]
    assert errors[8].startswith("line 12:") and "non-printable" in errors[8]


def test_non_finite_times_are_malformed(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, ['{"t": NaN, "key": "a"}', '{"t": Infinity, "key": "b"}',
                             {"t": 1, "key": "a"}])
    rc, objs, _, _ = run(capsys, "token-bucket", "--rate", "1/s", "--trace", str(trace))
    assert rc == 1
    assert "error" in objs[0] and "error" in objs[1]
    assert objs[2]["allowed"] is True


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gcra", "--rate", "0/s"], "'0/s'"),
        (["gcra", "--rate", "10/fortnight"], "'10/fortnight'"),
        (["gcra", "--rate", "ten per second"], "'ten per second'"),
        (["gcra", "--rate", "1/s", "--burst", "0"], "burst"),
        (["fixed-window", "--rate", "1/s", "--burst", "3"], "burst"),
        (["gcra", "--rate", "1/s", "--nodelay"], "leaky-bucket"),
        (["leaky-bucket", "--rate", "1/h"], "resolution"),
    ],
)
def test_invalid_policy_exits_2(argv: list[str], message: str, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, [{"t": 0}])
    rc, objs, out, err = run(capsys, *argv, "--trace", str(trace))
    assert rc == 2 and objs == [] and out == ""
    assert err.startswith("ratekeeper simulate: ") and message in err


@pytest.mark.parametrize(
    "argv",
    [
        ["nope", "--rate", "1/s", "--trace", "-"],  # unknown algorithm
        ["gcra", "--trace", "-"],  # no rate
        ["gcra", "--rate", "1/s"],  # no trace
        ["leaky-bucket", "--rate", "1/s", "--nodelay", "--delay", "2", "--trace", "-"],
        ["gcra", "--rate", "1/s", "--burst", "lots", "--trace", "-"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["simulate", *argv])
    assert e.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_missing_trace_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.jsonl"
    rc = main(["simulate", "gcra", "--rate", "1/s", "--trace", str(missing)])
    assert rc == 2 and str(missing) in capsys.readouterr().err


def test_decision_json_never_and_rounding() -> None:
    lim = Limit("gcra", "3/s", name="x")
    d = Decision(False, 0, 1 / 3, 2 / 3, 0.0, lim)
    assert decision_json(d) == {"allowed": False, "remaining": 0, "retry_after": 0.333333333,
                                "reset_after": 0.666666667, "delay": 0.0, "limit": "x"}
    d = Decision(False, 3, None, 0.0, 0.0, lim)
    assert decision_json(d)["retry_after"] is None


def test_console_script(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("ratekeeper")
    assert script.exists(), "the `ratekeeper` console script is installed with the package"
    lines = "".join(json.dumps({"t": 0, "key": "a"}) + "\n" for _ in range(3))
    p = subprocess.run(
        [str(script), "simulate", "token-bucket", "--rate", "2/s", "--trace", "-"],
        input=lines, capture_output=True, text=True, timeout=60, check=False,
    )
    assert p.returncode == 0, p.stderr
    assert [json.loads(ln)["allowed"] for ln in p.stdout.splitlines()] == [True, True, False]


def _cli_without(module: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh interpreter in which `module` cannot be imported (an extra
    that is not installed)."""
    code = (f"import sys; sys.modules[{module!r}] = None; from ratekeeper.cli import main; "
            f"sys.exit(main({list(argv)!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.mark.parametrize(("missing", "argv", "extra"), [
    ("redis", ["inspect", "k", "--store", "redis://127.0.0.1:9/0"], "redis"),
    ("uvicorn", ["serve", "--example", "--http-port", "0", "--grpc-port", "0"], "service"),
])
def test_a_subcommand_whose_extra_is_missing_says_what_to_install(
        missing: str, argv: list[str], extra: str) -> None:
    p = _cli_without(missing, *argv)
    assert p.returncode == 2, p.stderr
    assert f"needs the {extra} extra: pip install 'ratekeeper[{extra}]'" in p.stderr
    assert "Traceback" not in p.stderr
    # The other subcommands stay available.
    assert _cli_without(missing, "check-config", "--help").returncode == 0


def test_every_subcommand_is_offered() -> None:
    from ratekeeper.cli import build_parser  # noqa: PLC0415

    help_text = build_parser().format_help()
    for name in ("simulate", "inspect", "serve", "check-config"):
        assert name in help_text
