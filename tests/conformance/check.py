#!/usr/bin/env python3
"""Replay conformance cases through `ratekeeper simulate` and compare with the reference decisions.

A copy, for use from a clone, of the project's external checker (``shared/conformance/check.py``,
the same comparison and output), so the repository's own cases can be run without it::

    .venv/bin/python tests/conformance/check.py tests/conformance/cases \
        --cmd ".venv/bin/ratekeeper simulate" [--store redis://127.0.0.1:6379/0] [--verbose]

For each case it runs
    <cmd> ALGORITHM --rate RATE [--burst B] [--nodelay | --delay D] [--store URL] --trace FILE
feeding the case's events as JSON Lines, and reads one JSON object per event from stdout.
Compared per event: "allowed" exactly; "remaining" exactly where the case gives it;
"retry_after" and "delay" within 1 ms where the case gives them (null = never / not applicable:
the output may say null there, or omit the field for "delay" on a rejected request).
Prints one line per failing case and a final line "N passed, N failed" (events agreeing /
total). Exit 0 when every event of every case agrees, 1 otherwise (also when no case was found:
a mistyped path must not pass).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import subprocess
import sys
import tempfile
from typing import Any

TOL = 1e-3


def close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(float(a) - float(b)) <= TOL


def compare(exp: dict[str, Any], got: dict[str, Any]) -> list[str]:
    bad = []
    if bool(got.get("allowed")) != exp["allowed"] or not isinstance(got.get("allowed"), bool):
        bad.append(f"allowed {got.get('allowed')!r} != {exp['allowed']!r}")
    if "remaining" in exp and got.get("remaining") != exp["remaining"]:
        g = got.get("remaining")
        if not (isinstance(g, (int, float)) and int(g) == g and int(g) == exp["remaining"]):
            bad.append(f"remaining {g!r} != {exp['remaining']!r}")
    for f in ("retry_after", "delay"):
        if f in exp:
            g = got.get(f)
            if f == "delay" and exp[f] is None and g in (None, 0, 0.0) and not got.get("allowed"):
                continue
            if isinstance(g, str) and g.lower() in ("inf", "infinity"):
                g = None
            if not close(exp[f], g):
                bad.append(f"{f} {g!r} != {exp[f]!r}")
    return bad


def run_case(
    case: dict[str, Any], cmd: str, store: str | None, timeout: float
) -> tuple[list[dict[str, Any]] | None, str | None]:
    args = [*shlex.split(cmd), case["algorithm"], "--rate", case["rate"]]
    if case.get("burst") is not None:
        args += ["--burst", str(case["burst"])]
    mode = case.get("mode")
    if mode == "nodelay":
        args.append("--nodelay")
    elif mode and mode.startswith("delay="):
        args += ["--delay", mode.split("=", 1)[1]]
    if store:
        args += ["--store", store]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for e in case["events"]:
            f.write(json.dumps(e) + "\n")
        path = f.name
    try:
        p = subprocess.run([*args, "--trace", path], capture_output=True, text=True,
                           timeout=timeout, check=False)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        return None, f"exit {p.returncode}: {p.stderr.strip()[-300:]}"
    outs = []
    for raw in p.stdout.splitlines():
        line = raw.strip()
        if line.startswith("{"):
            try:
                outs.append(json.loads(line))
            except ValueError:
                return None, f"unparseable output line: {line[:120]}"
    return outs, None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--cmd", default="ratekeeper simulate")
    ap.add_argument("--store", default=None)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    files: list[str] = []
    for p in a.paths:
        files += sorted(glob.glob(os.path.join(p, "*.json"))) if os.path.isdir(p) else [p]
    ok_ev = bad_ev = bad_cases = 0
    for fn in files:
        with open(fn, encoding="utf-8") as fh:
            case = json.load(fh)
        outs, err = run_case(case, a.cmd, a.store, a.timeout)
        n = len(case["expected"])
        if outs is None or len(outs) != n:
            bad_cases += 1
            bad_ev += n
            got = f"{len(outs)} output lines for {n} events" if outs is not None else err
            print(f"FAIL {case['name']}: {got}")
            continue
        diffs = [(i, compare(e, g)) for i, (e, g) in enumerate(zip(case["expected"], outs,
                                                                     strict=True))]
        diffs = [(i, d) for i, d in diffs if d]
        ok_ev += n - len(diffs)
        bad_ev += len(diffs)
        if diffs:
            bad_cases += 1
            print(f"FAIL {case['name']} ({case['algorithm']} {case['rate']} "
                  f"burst={case.get('burst')} {case.get('mode') or ''}): "
                  f"{len(diffs)}/{n} events differ")
            for i, d in diffs[: (50 if a.verbose else 3)]:
                print(f"    event {i} {case['events'][i]}: {'; '.join(d)}")
        elif a.verbose:
            print(f"ok   {case['name']}")
    print(f"cases: {len(files) - bad_cases}/{len(files)} agree")
    print(f"{ok_ev} passed, {bad_ev} failed")
    return 0 if bad_ev == 0 and files else 1


if __name__ == "__main__":
    sys.exit(main())
