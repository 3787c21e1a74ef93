"""What Flask's and FastAPI's ``@limiter.limit`` share (``http/_decorators.py``), through a
real app of each: the rate strings flask-limiter's and slowapi's docs write, a cost that is a
function of the request, and an exemption stacked with a limit (issue 29, defects 2, 3, 10)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI
from flask import Flask

from ratekeeper import Limit
from ratekeeper.http import HTTPPolicy, RequestInfo
from ratekeeper.http.fastapi import Limiter as FastAPILimiter
from ratekeeper.http.flask import Limiter as FlaskLimiter
from ratekeeper.http.wsgi import WSGIRateLimitMiddleware
from ratekeeper.testing import ManualClock
from tests.http.test_decorators_fastapi import POLICIES

PEER = "203.0.113.7"


def flask_statuses(app: Flask, path: str, n: int, heavy: bool = False) -> list[int]:
    c = app.test_client()
    headers = {"X-Heavy": "1"} if heavy else {}
    return [c.get(path, headers=headers, environ_base={"REMOTE_ADDR": PEER}).status_code
            for _ in range(n)]


async def fastapi_statuses(app: FastAPI, path: str, n: int, heavy: bool = False) -> list[int]:
    transport = httpx.ASGITransport(app=app, client=(PEER, 1234))
    headers = {"X-Heavy": "1"} if heavy else {}
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        return [(await c.get(path, headers=headers)).status_code for _ in range(n)]


def heavy(req: RequestInfo) -> float:
    """Charge 2 for a request with ``X-Heavy: 1``, else 1."""
    return 2.0 if req.headers.get("x-heavy") == "1" else 1.0


@pytest.mark.parametrize("rates", ["2 per minute", "2 per minute;10 per hour",
                                   "10 per hour, 2/minute", "2/minute|10/hour"])
def test_flask_rate_strings_with_spaces_and_separators_are_limits(rates: str) -> None:
    limiter = FlaskLimiter(clock=ManualClock())
    app = Flask(__name__)
    limiter.init_app(app)

    @app.get("/a")
    @limiter.limit(rates)
    def a() -> str:
        return "a"

    assert flask_statuses(app, "/a", 3) == [200, 200, 429]


@pytest.mark.parametrize("rates", ["2 per minute", "100 per hour;2/minute"])
async def test_fastapi_rate_strings_with_spaces_and_separators_are_limits(rates: str) -> None:
    limiter = FastAPILimiter(clock=ManualClock())
    app = FastAPI(dependencies=[Depends(limiter)])

    @app.get("/a")
    @limiter.limit(rates)
    async def a() -> str:
        return "a"

    assert await fastapi_statuses(app, "/a", 3) == [200, 200, 429]


def test_a_limit_written_with_spaces_is_named_with_underscores() -> None:
    limiter = FlaskLimiter(clock=ManualClock())

    @limiter.limit("1 per day;10 per  hour")
    def view() -> str:
        return "v"

    (route,) = limiter._registry.find(view) or ()
    assert [lim.name for lim in route.limits] == ["view:1_per_day", "view:10_per_hour"]


def test_flask_callable_cost_charges_what_it_returns() -> None:
    limiter = FlaskLimiter(clock=ManualClock())
    app = Flask(__name__)
    limiter.init_app(app)

    @app.get("/a")
    @limiter.limit("3/minute", cost=heavy)
    def a() -> str:
        return "a"

    # 2 + 1 = 3 of 3: the third request (cost 1) is refused, not a 500
    assert flask_statuses(app, "/a", 1, heavy=True) == [200]
    assert flask_statuses(app, "/a", 2) == [200, 429]


async def test_fastapi_callable_cost_charges_what_it_returns() -> None:
    limiter = FastAPILimiter(clock=ManualClock())
    app = FastAPI(dependencies=[Depends(limiter)])

    @app.get("/a")
    @limiter.limit("3/minute", cost=heavy)
    async def a() -> str:
        return "a"

    assert await fastapi_statuses(app, "/a", 2, heavy=True) == [200, 429]


def test_flask_callable_cost_with_a_policies_file(tmp_path: Any) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(POLICIES)
    limiter = FlaskLimiter(policy=path, clock=ManualClock())
    app = Flask(__name__)
    limiter.init_app(app)

    @app.get("/a")
    @limiter.limit("4/minute", cost=heavy, mode="replace")
    def a() -> str:
        return "a"

    assert flask_statuses(app, "/a", 3, heavy=True) == [200, 200, 429]


@pytest.mark.parametrize("exempt_first", [True, False])
def test_flask_exempt_stacked_with_a_limit_is_exempt(exempt_first: bool) -> None:
    limiter = FlaskLimiter(clock=ManualClock())
    app = Flask(__name__)
    limiter.init_app(app)

    def view() -> str:
        return "v"

    if exempt_first:  # @limiter.limit over @limiter.exempt
        wrapped = limiter.limit("1/minute")(limiter.exempt(view))
    else:
        wrapped = limiter.exempt(limiter.limit("1/minute")(view))
    app.add_url_rule("/v", "view", wrapped)
    assert flask_statuses(app, "/v", 3) == [200, 200, 200]


def header_cost(req: RequestInfo) -> float:
    """slowapi's own callable-cost example: the cost is what the client sends."""
    return float(req.headers.get("x-cost", "1"))


#: What a client can send a header cost function, and the answers to it and to three requests
#: of cost 1 after it (a quota of 2): 0 or less charges nothing (admitted, the quota untouched);
#: infinity, NaN and more than a store counts never fit (429, nothing charged); a fraction is
#: charged (rounded up where a limit counts whole requests).
CLIENT_COSTS = [("0", [200, 200, 200, 429]), ("-3", [200, 200, 200, 429]),
                ("inf", [429, 200, 200, 429]), ("nan", [429, 200, 200, 429]),
                ("1e300", [429, 200, 200, 429]), ("0.5", [200, 200, 429, 429])]


def flask_costs(app: Flask, costs: list[str]) -> list[int]:
    c = app.test_client()
    return [c.get("/a", headers={"X-Cost": v}, environ_base={"REMOTE_ADDR": PEER}).status_code
            for v in costs]


@pytest.mark.parametrize(("sent", "answers"), CLIENT_COSTS)
@pytest.mark.parametrize("with_file", [False, True])
def test_flask_a_cost_the_client_chose_is_never_a_500_nor_charged_when_it_cannot_be(
        sent: str, answers: list[int], with_file: bool, tmp_path: Any) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(POLICIES)
    limiter = (FlaskLimiter(policy=path, clock=ManualClock()) if with_file
               else FlaskLimiter(clock=ManualClock()))
    app = Flask(__name__)
    limiter.init_app(app)

    @app.get("/a")
    @limiter.limit("2/minute", cost=header_cost, mode="replace")
    def a() -> str:
        return "a"

    # the odd cost, then the whole quota (2 of cost 1) is still there, then a 429
    assert flask_costs(app, [sent, "1", "1", "1"]) == answers


@pytest.mark.parametrize(("sent", "answers"), CLIENT_COSTS)
async def test_fastapi_a_cost_the_client_chose_is_never_a_500_nor_charged_when_it_cannot_be(
        sent: str, answers: list[int]) -> None:
    limiter = FastAPILimiter(clock=ManualClock())
    app = FastAPI(dependencies=[Depends(limiter)])

    @app.get("/a")
    @limiter.limit("2/minute", cost=header_cost)
    async def a() -> str:
        return "a"

    transport = httpx.ASGITransport(app=app, client=(PEER, 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        got = [(await c.get("/a", headers={"X-Cost": v})).status_code
               for v in (sent, "1", "1", "1")]
    assert got == answers


@pytest.mark.parametrize(("sent", "answers"), CLIENT_COSTS)
def test_an_http_policys_cost_function_the_client_steers_is_never_a_500(sent: str,
                                                                        answers: list[int]) -> None:

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    policy = HTTPPolicy(limits=[Limit("fixed-window", "2/minute", name="per-client")],
                        cost=header_cost)
    mw = WSGIRateLimitMiddleware(app, policy, clock=ManualClock())
    status_lines: list[str] = []
    for v in (sent, "1", "1", "1"):
        mw({"REQUEST_METHOD": "GET", "PATH_INFO": "/a", "REMOTE_ADDR": PEER,
            "HTTP_X_COST": v, "wsgi.input": None},
           lambda s, h, *a: status_lines.append(s))
    assert [int(line.split()[0]) for line in status_lines] == answers


def test_a_cost_function_answering_no_number_names_itself() -> None:
    limiter = FlaskLimiter(clock=ManualClock())
    app = Flask(__name__)
    limiter.init_app(app)

    def wordy(req: RequestInfo) -> Any:
        return "two"

    @app.get("/a")
    @limiter.limit("2/minute", cost=wordy)
    def a() -> str:
        return "a"

    app.testing = True  # the exception, not Flask's 500 page
    with pytest.raises(TypeError, match=r"wordy.*returned 'two'.*must return a number"):
        app.test_client().get("/a")
