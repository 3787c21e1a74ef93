"""django-ratelimit's own tests (jsocol/django-ratelimit ``django_ratelimit/tests.py``),
ported onto ``ratekeeper.http.django`` with only the imports and settings changed. Each
test names the peer's test it ports; where ratekeeper differs on purpose, the test shows
the difference and docs/migration.md (django-ratelimit) gives the reason."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.test import RequestFactory, override_settings
from django.utils.decorators import method_decorator
from django.views.generic import View

from ratekeeper.http.django import Ratelimited, get_usage, is_ratelimited, ratelimit
from tests.http.conftest import DownStore

rf = RequestFactory()


class MockUser:
    def __init__(self, authenticated: bool = False) -> None:
        self.pk = 1
        self.is_authenticated = authenticated


def callable_rate(group: str, request: Any) -> Any:
    if request.user.is_authenticated:
        return None
    return (0, 1)


def mykey(group: str, request: Any) -> str:
    return str(request.META["REMOTE_ADDR"][::-1])


class CustomRatelimitedException(Exception):
    pass


def limited(request: Any) -> bool:
    return bool(request.limited)


# -- RateParsingTests -------------------------------------------------------------------

@pytest.mark.parametrize(("rate", "expected"), [
    ("100/s", (100, 1)), ("100/10s", (100, 10)), ("100/10", (100, 10)),
    ("100/m", (100, 60)), ("400/10m", (400, 600)), ("1000/h", (1000, 3600)),
    ("800/d", (800, 24 * 60 * 60)),
])
def test_simple(rate: str, expected: tuple[int, int]) -> None:
    """django-ratelimit django_ratelimit/tests.py::RateParsingTests::test_simple (its
    private ``_split_rate``, read here from the limit the decorator builds)."""
    view = ratelimit(key="ip", rate=rate)(limited)
    lim = view._ratekeeper_view.spec.limits[0]  # type: ignore[attr-defined]
    assert (lim.rate.amount, lim.rate.period) == expected


# -- RatelimitTests ---------------------------------------------------------------------

def test_no_key() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_no_key

    Differs on purpose: `key` defaults to ``"ip"`` (django-ratelimit has no default and
    raises ImproperlyConfigured at the first request); the view is limited by address."""
    @ratelimit(rate="1/m", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert [view(rf.get("/")) for _ in range(2)] == [False, True]


# -- RatelimitTests (continued) ------------------------------------------------------------

def test_ip() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_ip"""
    @ratelimit(key="ip", rate="1/m", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert not view(rf.get("/")), "First request works."
    assert view(rf.get("/")), "Second request is limited"


def test_block() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_block

    Differs on purpose: blocked is a 429 response (with Retry-After), not a raised
    ``Ratelimited`` (a 403), unless ``RATELIMIT_EXCEPTION_CLASS`` names it (second half)."""
    @ratelimit(key="ip", rate="1/m")
    def blocked(request: Any) -> bool:
        return bool(request.limited)

    assert not blocked(rf.get("/")), "First request works."
    assert blocked(rf.get("/")).status_code == 429  # type: ignore[attr-defined]
    with override_settings(RATELIMIT_EXCEPTION_CLASS=Ratelimited), \
            pytest.raises(Ratelimited):
        blocked(rf.get("/"))


def test_ratelimit_custom_string_exception_class() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::
    test_ratelimit_custom_string_exception_class"""
    @ratelimit(key="ip", rate="1/m")
    def view(request: Any) -> bool:
        return bool(request.limited)

    with override_settings(RATELIMIT_EXCEPTION_CLASS=(
            "tests.compat.django_ratelimit.test_tests.CustomRatelimitedException")):
        req = rf.get("")
        assert not view(req)
        with pytest.raises(CustomRatelimitedException):
            view(req)


def test_ratelimit_custom_exception_class() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::
    test_ratelimit_custom_exception_class"""
    @ratelimit(key="ip", rate="1/m")
    def view(request: Any) -> bool:
        return bool(request.limited)

    with override_settings(RATELIMIT_EXCEPTION_CLASS=CustomRatelimitedException):
        req = rf.get("")
        assert not view(req)
        with pytest.raises(CustomRatelimitedException):
            view(req)


def test_method() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_method"""
    @ratelimit(key="ip", method="POST", rate="1/m", group="a", block=False)
    def limit_post(request: Any) -> bool:
        return bool(request.limited)

    assert not limit_post(rf.post("/")), "Do not limit first POST."
    assert limit_post(rf.post("/")), "Limit second POST."
    assert not limit_post(rf.get("/")), "Do not limit GET."


def test_unsafe_methods() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_unsafe_methods"""
    @ratelimit(key="ip", method=ratelimit.UNSAFE, rate="0/m",  # type: ignore[attr-defined]
               block=False)
    def limit_unsafe(request: Any) -> bool:
        return bool(request.limited)

    assert not limit_unsafe(rf.get("/"))
    assert not limit_unsafe(rf.head("/"))
    assert not limit_unsafe(rf.options("/"))
    assert limit_unsafe(rf.delete("/"))
    assert limit_unsafe(rf.post("/"))
    assert limit_unsafe(rf.put("/"))
    assert limit_unsafe(rf.patch("/"))


def test_key_get() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_key_get"""
    @ratelimit(key="get:foo", rate="1/m", method="GET", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert not view(rf.get("/", {"foo": "a"}))
    assert view(rf.get("/", {"foo": "a"}))
    assert not view(rf.get("/", {"foo": "b"}))
    assert view(rf.get("/", {"foo": "b"}))


def test_key_post() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_key_post"""
    @ratelimit(key="post:foo", rate="1/m", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert not view(rf.post("/", {"foo": "a"}))
    assert view(rf.post("/", {"foo": "a"}))
    assert not view(rf.post("/", {"foo": "b"}))
    assert view(rf.post("/", {"foo": "b"}))


def test_key_header() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_key_header"""
    def _req() -> HttpRequest:
        req = rf.post("/")
        req.META["HTTP_X_REAL_IP"] = "1.2.3.4"
        return req

    @ratelimit(key="header:x-real-ip", rate="1/m", block=False)
    @ratelimit(key="header:x-missing-header", rate="1/m", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert not view(_req())
    assert view(_req())


def test_rate() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_rate"""
    @ratelimit(key="ip", rate="2/m", block=False)
    def twice(request: Any) -> bool:
        return bool(request.limited)

    assert not twice(rf.post("/")), "First request is not limited."
    assert not twice(rf.post("/")), "Second request is not limited."
    assert twice(rf.post("/")), "Third request is limited."


def test_zero_rate() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_zero_rate"""
    @ratelimit(key="ip", rate="0/m", block=False)
    def never(request: Any) -> bool:
        return bool(request.limited)

    assert never(rf.post("/"))


def test_none_rate() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_none_rate"""
    @ratelimit(key="ip", rate=None, block=False)
    def always(request: Any) -> bool:
        return bool(request.limited)

    for _ in range(7):
        assert not always(rf.post("/"))


def test_callable_rate() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_callable_rate"""
    def _req(auth: bool) -> HttpRequest:
        req = rf.post("/")
        req.user = MockUser(authenticated=auth)
        return req

    def get_rate(group: str, request: Any) -> tuple[int, int]:
        if request.user.is_authenticated:
            return (2, 60)
        return (1, 60)

    @ratelimit(key="user_or_ip", rate=get_rate, block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert not view(_req(auth=False))
    assert view(_req(auth=False))
    assert not view(_req(auth=True))
    assert not view(_req(auth=True))
    assert view(_req(auth=True))


def test_callable_rate_none() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_callable_rate_none"""
    def _req(never_limit: bool = False) -> HttpRequest:
        req = rf.post("/")
        req.never_limit = never_limit
        return req

    def get_rate(g: str, r: Any) -> str | None:
        return None if r.never_limit else "1/m"

    @ratelimit(key="ip", rate=get_rate, block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert not view(_req())
    assert view(_req())
    assert not view(_req(never_limit=True))
    assert not view(_req(never_limit=True))


def test_callable_rate_zero() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_callable_rate_zero"""
    def _req(auth: bool) -> HttpRequest:
        req = rf.post("/")
        req.user = MockUser(authenticated=auth)
        return req

    def get_rate(group: str, request: Any) -> str:
        if request.user.is_authenticated:
            return "1/m"
        return "0/m"

    @ratelimit(key="ip", rate=get_rate, block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert view(_req(auth=False))
    assert not view(_req(auth=True))
    assert view(_req(auth=True))


def test_callable_rate_import() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_callable_rate_import"""
    def _req(auth: bool) -> HttpRequest:
        req = rf.post("/")
        req.user = MockUser(authenticated=auth)
        return req

    @ratelimit(key="user_or_ip", rate="tests.compat.django_ratelimit.test_tests.callable_rate",
               block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert view(_req(auth=False))
    assert not view(_req(auth=True))


def test_user_or_ip() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_user_or_ip"""
    def _req(auth: bool) -> HttpRequest:
        req = rf.post("/")
        req.user = MockUser(authenticated=auth)
        return req

    @ratelimit(key="user_or_ip", rate="1/m", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert not view(_req(auth=False))
    assert view(_req(auth=False))
    assert not view(_req(auth=True))
    assert view(_req(auth=True))


def test_callable_key_path() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_callable_key_path"""
    @ratelimit(key="tests.compat.django_ratelimit.test_tests.mykey", rate="1/m", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert not view(rf.post("/"))
    assert view(rf.post("/"))


def test_callable_key() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_callable_key"""
    @ratelimit(key=mykey, rate="1/m", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert not view(rf.post("/"))
    assert view(rf.post("/"))


def test_stacked_decorator() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_stacked_decorator"""
    @ratelimit(rate="1/m", block=False, key=lambda x, y: "min")
    @ratelimit(rate="10/d", block=False, key=lambda x, y: "day")
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert not view(rf.post("/"))
    assert view(rf.post("/"))


def test_stacked_methods() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_stacked_methods

    Differs on purpose: decorators stacked on one view are one decision with one `method`;
    different methods are refused when applied (give each method its own view, or one
    decorator with ``method=[...]``)."""
    with pytest.raises(ValueError, match="differ in method or block"):
        @ratelimit(rate="1/m", key="ip", method="GET", block=False)
        @ratelimit(rate="1/m", key="ip", method="POST", block=False)
        def view(request: Any) -> bool:
            return bool(request.limited)


def test_sorted_methods() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_sorted_methods"""
    @ratelimit(rate="1/m", key="ip", method=["GET", "POST"], group="a", block=False)
    def get_post(request: Any) -> bool:
        return bool(request.limited)

    @ratelimit(rate="1/m", key="ip", method=["POST", "GET"], group="a", block=False)
    def post_get(request: Any) -> bool:
        return bool(request.limited)

    assert not get_post(rf.get("/"))
    assert post_get(rf.get("/"))


def _addr(addr: str) -> HttpRequest:
    req = rf.get("/")
    req.META["REMOTE_ADDR"] = addr
    return req


def test_ratelimit_full_mask_v4() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_ratelimit_full_mask_v4"""
    @ratelimit(rate="1/m", key="ip", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    with override_settings(RATELIMIT_IPV4_MASK=32):
        req = _addr("10.1.1.1")
        assert not view(req)
        assert view(req)
        assert not view(_addr("10.1.1.2"))


def test_ratelimit_full_mask_v6() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_ratelimit_full_mask_v6"""
    @ratelimit(rate="1/m", key="ip", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    with override_settings(RATELIMIT_IPV6_MASK=128):
        req = _addr("2001:db8::1000")
        assert not view(req)
        assert view(req)
        assert not view(_addr("2001:db8::1001"))


def test_ratelimit_mask_v4() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_ratelimit_mask_v4"""
    @ratelimit(rate="1/m", key="ip", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    with override_settings(RATELIMIT_IPV4_MASK=16):
        req = _addr("10.1.1.1")
        assert not view(req)
        assert view(req)
        assert view(_addr("10.1.0.1"))
        assert not view(_addr("192.168.1.1"))


def test_ratelimit_mask_v6() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitTests::test_ratelimit_mask_v6"""
    @ratelimit(rate="1/m", key="ip", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    with override_settings(RATELIMIT_IPV6_MASK=64):
        req = _addr("2001:db8::1000")
        assert not view(req)
        assert view(req)
        assert view(_addr("2001:db8::1001"))
        assert not view(_addr("2001:db9::1000"))


# -- RatelimitCBVTests ------------------------------------------------------------------

def test_method_decorator() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitCBVTests::test_method_decorator"""
    class TestView(View):
        @method_decorator(ratelimit(key="ip", rate="1/m", block=False))
        def post(self, request: Any) -> bool:
            return bool(request.limited)

    view = TestView.as_view()
    assert not view(rf.post("/"))
    assert view(rf.post("/"))


def test_class_decorator() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitCBVTests::test_class_decorator"""
    @method_decorator(ratelimit(key="ip", rate="1/m", block=False), name="get")
    class TestView(View):
        def get(self, request: Any) -> bool:
            return bool(request.limited)

    view = TestView.as_view()
    assert not view(rf.get("/"))
    assert view(rf.get("/"))


def test_wrap_view() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitCBVTests::test_wrap_view"""
    class TestView(View):
        def get(self, request: Any) -> bool:
            return bool(request.limited)

    view = TestView.as_view()
    wrapped = ratelimit(key="ip", rate="1/m", block=False)(view)
    assert not wrapped(rf.get("/"))
    assert wrapped(rf.get("/"))


def test_methods_counted_separately() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitCBVTests::
    test_methods_counted_separately"""
    class TestView(View):
        @method_decorator(ratelimit(key="ip", rate="1/m", method="GET", block=False))
        def get(self, request: Any) -> bool:
            return bool(request.limited)

        @method_decorator(ratelimit(key="ip", rate="1/m", method="POST", block=False))
        def post(self, request: Any) -> bool:
            return bool(request.limited)

    view = TestView.as_view()
    assert not view(rf.get("/"))
    assert view(rf.get("/"))
    assert not view(rf.post("/"))


def test_views_counted_separately() -> None:
    """django-ratelimit django_ratelimit/tests.py::RatelimitCBVTests::
    test_views_counted_separately"""
    class TestView(View):
        @method_decorator(ratelimit(key="ip", rate="1/m", method="GET", block=False))
        def get(self, request: Any) -> bool:
            return bool(request.limited)

    class AnotherTestView(View):
        @method_decorator(ratelimit(key="ip", rate="1/m", method="GET", block=False))
        def get(self, request: Any) -> bool:
            return bool(request.limited)

    test_view = TestView.as_view()
    another_view = AnotherTestView.as_view()
    assert not test_view(rf.get("/"))
    assert test_view(rf.get("/"))
    assert not another_view(rf.get("/"))


# -- CacheFailTests (an unreachable cache: a store that fails) --------------------------

def test_limit_on_cache_connection_error() -> None:
    """django-ratelimit django_ratelimit/tests.py::CacheFailTests::
    test_limit_on_cache_connection_error

    Differs on purpose without a setting: ratekeeper fails open by default (a store outage
    does not take the site down); ``RATELIMIT_FAIL_OPEN = False`` (or ``"failure":
    "closed"``) is django-ratelimit's default, and then the request is limited."""
    @ratelimit(key="ip", rate="10/m", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    with override_settings(RATEKEEPER={"store": DownStore()}):
        assert not view(rf.post("/"))
        with override_settings(RATELIMIT_FAIL_OPEN=False):
            assert view(rf.post("/"))


def test_fail_open_setting() -> None:
    """django-ratelimit django_ratelimit/tests.py::CacheFailTests::test_fail_open_setting"""
    @ratelimit(key="ip", rate="1/m", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    with override_settings(RATEKEEPER={"store": DownStore()}, RATELIMIT_FAIL_OPEN=True):
        assert not view(rf.get("/"))
        assert not view(rf.get("/"))


# -- IpMetaTests (its private ``_get_ip``, through a view keyed by ``"ip"``) ---------------

def test_empty_ip() -> None:
    """django-ratelimit django_ratelimit/tests.py::IpMetaTests::test_empty_ip"""
    @ratelimit(key="ip", rate="1/m", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    with pytest.raises(ImproperlyConfigured, match="REMOTE_ADDR"):
        view(_addr(""))


def test_alternate_header() -> None:
    """django-ratelimit django_ratelimit/tests.py::IpMetaTests::test_alternate_header

    Differs on purpose: ``RATELIMIT_IP_META_KEY`` believes a header from anyone; ratekeeper
    refuses it, naming ``ClientIP(trusted_proxies=...)``, which believes the header only
    from your proxies."""
    @ratelimit(key="ip", rate="1/m", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    with override_settings(RATELIMIT_IP_META_KEY="HTTP_X_CLIENT_IP"), \
            pytest.raises(ImproperlyConfigured, match="trusted_proxies"):
        view(_addr("1.2.3.4"))


def test_default() -> None:
    """django-ratelimit django_ratelimit/tests.py::IpMetaTests::test_default (its private
    ``_get_ip``: the key a view keyed by ``"ip"`` counts under)."""
    req = _addr("1.2.3.4")
    assert get_usage(req, group="a", rate="1/m", increment=True) == {
        "count": 1, "limit": 1, "should_limit": False, "time_left": 60}
    assert is_ratelimited(_addr("1.2.3.4"), group="a", rate="1/m")
    assert not is_ratelimited(_addr("1.2.3.5"), group="a", rate="1/m")


@pytest.mark.parametrize("meta", ["fake", "tests.compat.django_ratelimit.test_tests.my_ip"])
def test_bad_config(meta: str) -> None:
    """django-ratelimit django_ratelimit/tests.py::IpMetaTests::test_bad_config, and
    ::test_path_to_ip_key_callable, ::test_callable_ip_key (differ on purpose, as
    test_alternate_header: refused, naming ``ClientIP(trusted_proxies=...)``)."""
    with override_settings(RATELIMIT_IP_META_KEY=meta), \
            pytest.raises(ImproperlyConfigured, match=r"RATELIMIT_IP_META_KEY.*trusted_proxies"):
        is_ratelimited(_addr("1.2.3.4"), group="a", rate="1/m")


def my_ip(req: Any) -> str:
    return str(req.META["MY_THING"])


# -- FunctionsTests ---------------------------------------------------------------------

def test_is_ratelimited() -> None:
    """django-ratelimit django_ratelimit/tests.py::FunctionsTests::test_is_ratelimited"""
    not_increment = partial(is_ratelimited, increment=False, rate="1/m",
                            method=is_ratelimited.ALL, key="ip", group="a")  # type: ignore[attr-defined]
    assert not not_increment(rf.get("/"))
    assert not not_increment(rf.get("/"))


def test_is_ratelimited_increment() -> None:
    """django-ratelimit django_ratelimit/tests.py::FunctionsTests::
    test_is_ratelimited_increment"""
    do_increment = partial(is_ratelimited, increment=True, rate="1/m",
                           method=is_ratelimited.ALL, key="ip", group="a")  # type: ignore[attr-defined]
    assert not do_increment(rf.get("/"))
    assert do_increment(rf.get("/"))


def test_get_usage() -> None:
    """django-ratelimit django_ratelimit/tests.py::FunctionsTests::test_get_usage"""
    _get_usage = partial(get_usage, method=get_usage.ALL, key="ip",  # type: ignore[attr-defined]
                         rate="1/m", group="a")
    usage = _get_usage(rf.get("/"))
    assert usage is not None
    assert usage["count"] == 0
    assert usage["limit"] == 1
    assert usage["time_left"] <= 60
    assert not usage["should_limit"]


def test_get_usage_increment() -> None:
    """django-ratelimit django_ratelimit/tests.py::FunctionsTests::test_get_usage_increment"""
    _get_usage = partial(get_usage, method=get_usage.ALL, key="ip",  # type: ignore[attr-defined]
                         rate="1/m", group="a", increment=True)
    _get_usage(rf.get("/"))
    usage = _get_usage(rf.get("/"))
    assert usage is not None
    assert usage["count"] == 2
    assert usage["limit"] == 1
    assert usage["time_left"] <= 60
    assert usage["should_limit"]


def test_not_increment_after_increment() -> None:
    """django-ratelimit django_ratelimit/tests.py::FunctionsTests::
    test_not_increment_after_increment

    Differs on purpose in `count`: the refused second request was not charged
    (all-or-nothing), so the counter holds 1, where django-ratelimit's holds 2."""
    _get_usage = partial(get_usage, method=get_usage.ALL, key="ip",  # type: ignore[attr-defined]
                         rate="1/m", group="a")
    _get_usage(rf.get("/"), increment=True)
    _get_usage(rf.get("/"), increment=True)
    usage = _get_usage(rf.get("/"))
    assert usage is not None
    assert usage["count"] == 1  # django-ratelimit: 2
    assert usage["limit"] == 1
    assert usage["time_left"] <= 60
    assert usage["should_limit"]


def test_get_usage_called_without_group_or_fn() -> None:
    """django-ratelimit django_ratelimit/tests.py::FunctionsTests::
    test_get_usage_called_without_group_or_fn"""
    with pytest.raises(ImproperlyConfigured):
        get_usage(rf.get("/"), key="ip")


def test_get_usage_shares_the_decorators_counters() -> None:
    """Not a peer test: `get_usage` with ``fn=`` reads the counters ``@ratelimit`` charges
    (django-ratelimit's group naming: the view's dotted name)."""
    def view(request: Any) -> bool:
        return bool(request.limited)

    limited_view = ratelimit(key="ip", rate="2/m", block=False)(view)
    limited_view(rf.get("/"))
    usage = get_usage(rf.get("/"), fn=view, rate="2/m")
    assert usage is not None and usage["count"] == 1 and not usage["should_limit"]


# -- CacheFailTests (continued) ---------------------------------------------------------

def test_bad_cache() -> None:
    """django-ratelimit django_ratelimit/tests.py::CacheFailTests::test_bad_cache

    Differs on purpose: counters live in ``settings.RATEKEEPER["store"]``, not a Django
    cache; ``RATELIMIT_USE_CACHE`` without a store is refused, naming the store setting
    (ignored, each process would count on its own)."""
    @ratelimit(key="ip", rate="1/m", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    with override_settings(RATELIMIT_USE_CACHE="fake-cache", RATEKEEPER={}), \
            pytest.raises(ImproperlyConfigured, match=r"RATELIMIT_USE_CACHE.*'store'"):
        view(rf.post("/"))


def test_is_ratelimited_cache_connection_error_without_increment() -> None:
    """django-ratelimit django_ratelimit/tests.py::CacheFailTests::
    test_is_ratelimited_cache_connection_error_without_increment"""
    def not_increment(request: Any) -> bool:
        return is_ratelimited(request, increment=False, method=is_ratelimited.ALL,  # type: ignore[attr-defined]
                              key="ip", rate="1/m", group="a")

    with override_settings(RATEKEEPER={"store": DownStore()}):
        assert not not_increment(rf.get("/"))
        assert not not_increment(rf.get("/"))


@pytest.mark.parametrize("store", ["memcached", "redis"])
def test_is_ratelimited_cache_connection_error_with_increment(store: str) -> None:
    """django-ratelimit django_ratelimit/tests.py::CacheFailTests::
    test_is_ratelimited_cache_connection_error_with_increment, and
    ::test_is_ratelimited_cache_connection_error_with_increment_redis (one store fails as
    any other). Differs on purpose by default (fail-open, as
    test_limit_on_cache_connection_error): django-ratelimit's closed default is
    ``RATELIMIT_FAIL_OPEN = False``."""
    def do_increment(request: Any) -> bool:
        return is_ratelimited(request, increment=True, method=is_ratelimited.ALL,  # type: ignore[attr-defined]
                              key="ip", rate="1/m", group="a")

    with override_settings(RATEKEEPER={"store": DownStore()}):
        assert not do_increment(rf.get("/"))
        with override_settings(RATELIMIT_FAIL_OPEN=False):
            assert do_increment(rf.get("/"))
            assert do_increment(rf.get("/"))


def test_cache_timeout() -> None:
    """django-ratelimit django_ratelimit/tests.py::CacheFailTests::test_cache_timeout

    Differs on purpose: there are no Django cache backends, so no ``DummyCache`` that
    forgets every count; a never-limited view is ``RATELIMIT_ENABLE = False``."""
    @ratelimit(key="ip", rate="1/m")
    def view(request: Any) -> bool:
        return True

    with override_settings(RATELIMIT_ENABLE=False):
        assert view(rf.get("/"))
        assert view(rf.get("/"))
