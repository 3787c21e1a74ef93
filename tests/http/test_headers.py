"""The pure header functions: a table of decisions and the exact fields they produce."""

from __future__ import annotations

import json
import math

import pytest

from ratekeeper import Decision, Limit
from ratekeeper.http import (
    PROBLEM_CONTENT_TYPE,
    problem_body,
    ratelimit_headers,
    rejection_headers,
    retry_after_seconds,
    sf_string,
)

API = Limit("fixed-window", "100/minute", name="default")
TB = Limit("token-bucket", "10/s", burst=25, name="burst")  # window 2.5 s -> w=3


def allowed(remaining: int, reset: float, limit: Limit = API) -> Decision:
    return Decision(True, remaining, 0.0, reset, 0.0, limit)


def rejected(retry: float | None, reset: float, limit: Limit = API) -> Decision:
    return Decision(False, 0, retry, reset, 0.0, limit)


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (allowed(5, 1.0), 0),
        (rejected(0.0, 0.0), 1),  # a rejection never says "retry now"
        (rejected(1e-9, 1e-9), 1),
        (rejected(0.5, 0.5), 1),
        (rejected(1.0, 1.0), 1),
        (rejected(1.0000001, 2.0), 2),  # rounded UP: never earlier than allowed
        (rejected(59.2, 59.2), 60),
        (rejected(None, 60.0), None),  # never
        (rejected(math.inf, 1.0), 10**15),
    ],
)
def test_retry_after_seconds(decision: Decision, expected: int | None) -> None:
    assert retry_after_seconds(decision) == expected


def test_ratelimit_headers_draft_form() -> None:
    assert ratelimit_headers(allowed(42, 16.2)) == [
        ("RateLimit-Policy", '"default";q=100;w=60'),
        ("RateLimit", '"default";r=42;t=17'),
    ]


def test_window_rounded_up_and_quota_floor() -> None:
    h = dict(ratelimit_headers(allowed(3, 0.3, TB)))
    assert h["RateLimit-Policy"] == '"burst";q=25;w=3'
    assert h["RateLimit"] == '"burst";r=3;t=1'


def test_legacy_trio() -> None:
    h = ratelimit_headers(allowed(7, 30.01), legacy=True)
    assert h[2:] == [
        ("X-RateLimit-Limit", "100"),
        ("X-RateLimit-Remaining", "7"),
        ("X-RateLimit-Reset", "31"),
    ]


def test_policies_lists_every_limit_once() -> None:
    g = Limit("gcra", "1000/minute", name="all", scope="global")
    h = dict(ratelimit_headers(allowed(1, 1.0), policies=[API, g]))
    assert h["RateLimit-Policy"] == '"default";q=100;w=60, "all";q=1000;w=60'
    h = dict(ratelimit_headers(allowed(1, 1.0, g), policies=[API]))
    assert h["RateLimit-Policy"] == '"default";q=100;w=60, "all";q=1000;w=60'
    assert h["RateLimit"].startswith('"all";')


def test_no_limit_no_fields() -> None:
    assert ratelimit_headers(Decision(True, 1, 0.0, 0.0, 0.0)) == []


def test_rejection_headers() -> None:
    d = rejected(12.3, 40.0)
    assert rejection_headers(d) == [
        ("RateLimit-Policy", '"default";q=100;w=60'),
        ("RateLimit", '"default";r=0;t=40'),
        ("Retry-After", "13"),
        ("Cache-Control", "no-store"),
        ("Content-Type", PROBLEM_CONTENT_TYPE),
    ]


def test_rejection_reset_never_before_retry_after() -> None:
    h = dict(rejection_headers(rejected(12.3, 5.0)))
    assert h["Retry-After"] == "13"
    assert h["RateLimit"] == '"default";r=0;t=13'


def test_never_admitted_omits_retry_after() -> None:
    h = dict(rejection_headers(rejected(None, 60.0), content_type=False))
    assert "Retry-After" not in h
    assert "Content-Type" not in h
    assert h["Cache-Control"] == "no-store"
    body = json.loads(problem_body(rejected(None, 60.0)))
    assert body["retry_after"] is None
    assert "never" in body["detail"]


def test_problem_body() -> None:
    body = json.loads(problem_body(rejected(2.5, 3.0), instance="/search", extra={"x": 1}))
    assert body == {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": "Rate limit 'default' exceeded. Retry after 3 seconds.",
        "instance": "/search",
        "policy": "default",
        "retry_after": 3,
        "x": 1,
    }


def test_problem_body_is_ascii_json() -> None:
    lim = Limit("fixed-window", "1/s", name="café-\"q\"")
    raw = problem_body(rejected(1.0, 1.0, lim), status=503, title="Service Unavailable")
    raw.decode("ascii")
    assert json.loads(raw)["policy"] == 'café-"q"'
    assert json.loads(raw)["status"] == 503


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("default", '"default"'),
        ('a"b', '"a\\"b"'),
        ("a\\b", '"a\\\\b"'),
        ("café", '"caf%C3%A9"'),
        ("100%", '"100%25"'),
        ("tab\there", '"tab%09here"'),
    ],
)
def test_sf_string(name: str, expected: str) -> None:
    assert sf_string(name) == expected
    assert sf_string(name).isascii()


def test_headers_are_latin1_safe_for_any_name() -> None:
    lim = Limit("fixed-window", "1/s", name="日本-limit")
    for _, value in rejection_headers(rejected(1.0, 1.0, lim), legacy=True):
        value.encode("latin-1")
        assert value.isprintable()


def test_policy_items_of_limits_sharing_a_name_stay_their_own() -> None:
    # The RateLimit-Policy item is remembered per Limit object: a reloaded limit keeping its
    # name but not its numbers must advertise its own numbers, each time it is asked.
    old = Limit("fixed-window", "100/minute", name="api")
    new = Limit("fixed-window", "5/s", name="api")
    for _ in range(2):
        assert dict(ratelimit_headers(allowed(1, 1.0, old)))["RateLimit-Policy"] == \
            '"api";q=100;w=60'
        assert dict(ratelimit_headers(allowed(1, 1.0, new)))["RateLimit-Policy"] == \
            '"api";q=5;w=1'
        assert dict(ratelimit_headers(allowed(1, 1.0, new), policies=[new]))[
            "RateLimit-Policy"] == '"api";q=5;w=1'


def test_sf_string_quotes_the_same_way_when_asked_again() -> None:
    for _ in range(2):
        assert sf_string('a"b\\c%é') == '"a\\"b\\\\c%25%C3%A9"'
