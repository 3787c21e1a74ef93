"""Python and Lua agree: decision by decision, state by state, on random traces.

Each example draws one or two limits and a trace of operations (hits, composite hits, peeks,
refunds of earlier admissions) at instants that mostly move forward, sometimes stand still
and sometimes jump back, near 0 or at Unix-epoch scale. The same trace goes through a
`MemoryStore` (the pure functions) and a client-clock `RedisStore`; every decision must be
*equal* (same floats, not merely close), every state read back from Redis must equal the
pure function's state, and every key written must expire when the algorithm's ttl says.
"""

from __future__ import annotations

import math
import os
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ratekeeper import Limit, MemoryStore
from ratekeeper.algorithms import ALGORITHMS as REGISTRY
from ratekeeper.algorithms import get
from ratekeeper.stores.redis import RedisStore
from tests.integration.conftest import StoreTarget

ALGORITHMS = ["token-bucket", "gcra", "leaky-bucket", "fixed-window", "sliding-window-log",
              "sliding-window-counter"]
WHOLE = {"leaky-bucket", "sliding-window-log"}  # whole-number costs only
#: The algorithms with a straight-line one-limit script (`RedisCodec.fast_script`).
FAST = ["gcra", "token-bucket", "fixed-window", "sliding-window-counter", "leaky-bucket"]


def test_every_algorithm_and_straight_line_script_is_in_these_traces() -> None:
    """A new algorithm (or straight-line script) joins the traces below: add it here."""
    assert sorted(ALGORITHMS) == sorted(REGISTRY)
    assert sorted(FAST) == sorted(n for n, a in REGISTRY.items() if a.redis.fast_script)


@st.composite
def limits(draw: st.DrawFn, name: str) -> Limit:
    algorithm = draw(st.sampled_from(ALGORITHMS))
    if algorithm == "leaky-bucket":
        rate = draw(st.sampled_from(["1r/s", "2r/s", "3r/s", "10r/s", "30r/m", "7r/m", "100r/s"]))
        nodelay = draw(st.booleans())
        delay = 0 if nodelay else draw(st.sampled_from([0, 0, 1, 2]))
        burst = draw(st.sampled_from([0, 1, 2, 5]))
        return Limit(algorithm, rate, burst=burst, nodelay=nodelay, delay=delay, name=name)
    rate = draw(st.sampled_from(["1/s", "2/s", "3/2s", "10/s", "5/m", "2.5/s", "7/100ms",
                                 "100/h", "3/s"]))
    if algorithm in ("token-bucket", "gcra"):
        burst = draw(st.sampled_from([None, 1, 2.5, 3, 10]))
        return Limit(algorithm, rate, burst=burst, name=name)
    return Limit(algorithm, rate, name=name)


STEPS = [0.0, 0.0, 0.001, 0.013, 0.1, 0.25, 0.5, 1.0, 1.7, 7.0, 61.0, 3600.0,
         -0.004, -0.3, -2.0, -70.0]


@st.composite
def traces(draw: st.DrawFn) -> tuple[Limit, Limit, list[tuple[Any, ...]]]:
    l1 = draw(limits("one"))
    l2 = draw(limits("two"))
    whole = l1.algorithm in WHOLE or l2.algorithm in WHOLE
    costs = [1, 1, 1, 2, 3] if whole else [1, 1, 2, 0.5, 1.5, 3, 0.25]
    t = draw(st.sampled_from([0.0, 12.345, 1_764_000_000.0, 1_764_000_000.123456]))
    ops: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 40))):
        t += draw(st.sampled_from(STEPS))
        t = max(t, 0.0)
        kind = draw(st.sampled_from(["hit", "hit", "hit", "hit2", "peek", "refund"]))
        ops.append((kind, draw(st.sampled_from(["a", "b"])), draw(st.sampled_from(costs)), t))
    return l1, l2, ops


def normal(state: Any, limit: Limit) -> Any:
    """A pure-function state as RedisStore.state reports it: a sliding log's runs of one
    instant merged (Redis keeps one element per unit of cost), costs as floats."""
    if state is None or limit.algorithm != "sliding-window-log":
        return state
    out: list[tuple[float, float]] = []
    for ts, c in state:
        if out and out[-1][0] == ts:
            out[-1] = (ts, out[-1][1] + c)
        else:
            out.append((ts, float(c)))
    return tuple(out)


def check_expiry(target: StoreTarget, store: RedisStore, limit: Limit, key: str,
                 state: Any, now: float) -> None:
    """The key just written expires ceil(ttl * 1000) ms + the clock grace from now (at
    least min_ttl)."""
    pttl = target.admin.pttl(store.state_key(limit, key))
    if state is None:
        assert pttl == -2, (limit, key, pttl)
        return
    want = max(math.ceil(get(limit.algorithm).ttl(state, now, limit) * 1000)
               + math.ceil(store.clock_grace * 1000), math.ceil(store.min_ttl * 1000))
    assert want - 2000 < pttl <= want, (limit, key, state, pttl, want)


#: RATEKEEPER_PARITY_EXAMPLES=5000 for a long run (CI keeps the default short).
EXAMPLES = int(os.environ.get("RATEKEEPER_PARITY_EXAMPLES", "120"))


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(trace=traces())
@example(trace=(  # one period after an admission, in decimals that floats do not subtract exactly
    Limit("sliding-window-log", "1/2s", name="one"), Limit("gcra", "1/s", name="two"),
    [("hit", "a", 1, 14.208), ("hit", "a", 1, 16.207), ("hit", "a", 1, 16.208),
     ("hit2", "a", 1, 18.208)]))
def test_python_and_lua_agree(standalone: StoreTarget,
                              trace: tuple[Limit, Limit, list[tuple[Any, ...]]]) -> None:
    l1, l2, ops = trace
    store = RedisStore(standalone.admin, client_clock=True, clock_grace=0.25,
                       prefix=f"rk-parity-{uuid.uuid4().hex[:8]}:")
    memory = MemoryStore()
    admitted: list[tuple[list[tuple[Limit, str, float]], float]] = []
    for kind, key, cost, t in ops:
        if kind == "refund":
            if not admitted:
                continue
            checks, at = admitted.pop(len(admitted) // 2)
            store.refund(checks, t, at)
            memory.refund(checks, t, at)
            touched = checks
        else:
            checks = [(l1, key, float(cost))]
            if kind == "hit2":
                checks.append((l2, key, float(cost)))
            if kind == "hit":
                got = [store.decide_one(l1, key, cost, t)]
                want = [memory.decide_one(l1, key, cost, t)]
                at = t
            else:
                got, at = store.decide(checks, t, consume=kind != "peek")
                want, _ = memory.decide(checks, t, consume=kind != "peek")
            assert got == want, (kind, key, cost, t)
            assert at == t
            if kind != "peek" and all(d.allowed for d in got):
                admitted.append((checks, t))
                touched = checks
            else:
                touched = []
        for lim in (l1, l2):
            for k in ("a", "b"):
                assert store.state(lim, k) == normal(memory.state(lim, k), lim), (kind, t, lim, k)
        for lim, k, _ in touched:
            check_expiry(standalone, store, lim, k, memory.state(lim, k), t)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_server_clock_agrees_with_python_at_the_servers_time(standalone: StoreTarget,
                                                           algorithm: str) -> None:
    """On the server clock (TIME, microseconds at Unix-epoch scale) the decisions are the
    pure function's at the `now` the script reports."""
    # Slow rates: a key expires once it is full again, and `state` reads it after its
    # decision at the server's time (at 50/s burst 5 that was 0.1 s: a loaded machine's
    # pause between the two read None: the suite run beside a callgrind benchmark).
    lim = (Limit(algorithm, "5r/s", burst=5) if algorithm == "leaky-bucket"
           else Limit(algorithm, "50/10s") if "window" in algorithm
           else Limit(algorithm, "5/s", burst=5))
    store = standalone.store(prefix=f"rk-parity-{uuid.uuid4().hex[:8]}:")
    memory = MemoryStore()
    for i in range(120):
        key = "ab"[i % 2]
        (got,), at = store.decide([(lim, key, 1.0)], 0.0)
        assert at > 1e9  # the server's Unix time, not our 0.0
        (want,), _ = memory.decide([(lim, key, 1.0)], at)
        assert got == want, (i, at)
        assert store.state(lim, key) == normal(memory.state(lim, key), lim)


def test_server_time_is_read_exactly_without_formatting_it(standalone: StoreTarget) -> None:
    """The one-gcra and one-token-bucket scripts turn TIME into seconds as (s * 10^6 + us) /
    10^6 instead of reading back the text '<s>.<us>': the same double, for any time."""
    script = """
    local bad, n = 0, 0
    for i = 1, 200000 do
      local s = tostring(1600000000 + (i * 7919) % 900000000)
      local us = (i * 104729) % 1000000
      if i % 1000 == 0 then us = 999999 elseif i % 1000 == 1 then us = 0 end
      local text = string.format('%s.%06d', s, us)
      if tonumber(text) ~= (tonumber(s) * 1000000 + tonumber(us)) / 1000000 then
        bad = bad + 1
      end
      n = n + 1
    end
    return {bad, n}
    """
    assert standalone.admin.eval(script, 0) == [0, 200000]


def test_general_scripts_answer_the_servers_time_as_whole_microseconds(
        standalone: StoreTarget) -> None:
    """check.lua and refund.lua on the server clock reply with TIME as an integer of
    microseconds (formatting '<s>.<us>' cost more than a decision); the store reads it as the
    `now` the pure functions decide at, and a refund at that instant gives everything back."""
    from ratekeeper.stores._lua import CHECK, REFUND  # noqa: PLC0415

    lim = Limit("sliding-window-counter", "5/s")
    store = standalone.store(prefix=f"rk-parity-{uuid.uuid4().hex[:8]}:")
    call = store._check_call([(lim, "a", 1.0)], "", True)
    reply = untag(standalone.admin.evalsha(CHECK.sha, 1, *call.keys, *call.args, 7)
                  if standalone.admin.script_exists(CHECK.sha)[0]
                  else standalone.admin.eval(CHECK.text, 1, *call.keys, *call.args, 7), 7)
    assert isinstance(reply[0], int) and reply[0] > 1_700_000_000 * 10**6, reply
    (got,), at, admitted = store._parse_check(reply, [(lim, "a", 1.0)])
    assert at == reply[0] / 1e6 and admitted
    (want,), _ = MemoryStore().decide([(lim, "a", 1.0)], at)
    assert got == want
    refund = store._refund_call([(lim, "a", 1.0)], "", at)
    back = untag(standalone.admin.eval(REFUND.text, 1, *refund.keys, *refund.args, 8), 8)
    assert isinstance(back, int) and back >= reply[0], back
    assert store._parse_now(back) == back / 1e6
    assert store.state(lim, "a") is None  # the refund at `at` gave the whole charge back


@pytest.mark.parametrize("algorithm", ["gcra", "token-bucket"])
def test_one_limit_server_clock_agrees_with_python(standalone: StoreTarget,
                                                  algorithm: str) -> None:
    """The straight-line one-limit scripts on the server clock: their raw reply carries the
    `now` the server used (gcra: microseconds, an admission's third value; token-bucket: the
    state's `last`; a rejection of either: microseconds, its last value), and the decision
    parsed from it is the pure function's at that time."""
    from ratekeeper.stores._lua import ONE  # noqa: PLC0415

    lim = Limit(algorithm, "50/s", burst=5)
    store = standalone.store(prefix=f"rk-parity-{uuid.uuid4().hex[:8]}:")
    memory = MemoryStore()
    client = standalone.admin
    client.script_load(ONE[algorithm].text)
    for i in range(60):
        key = "ab"[i % 2]
        call = store._one_call(lim, key, 1, 0.0)
        assert call.script is ONE[algorithm]
        assert len(call.args) == 3  # cost, r, b: the defaults are left off
        reply = untag(client.evalsha(call.script.sha, 1, *call.keys, *call.args, i), i)
        got = store._parse_one(reply, lim, 1.0)
        if algorithm == "gcra":
            # an admission {remaining, tat, now}, a rejection {tat, now}: now in microseconds
            assert len(reply) == (3 if got.allowed else 2) and isinstance(reply[-1], int)
            at = reply[-1] / 1e6
        elif got.allowed:
            state = store.state(lim, key)
            at = state[1] if state is not None else 0.0
        else:  # a rejection {tokens, last, now}, now in microseconds
            assert len(reply) == 3 and isinstance(reply[2], int)
            at = reply[2] / 1e6
        want = memory.decide_one(lim, key, 1, at)
        assert got == want, (i, at, reply)
        assert store.state(lim, key) == normal(memory.state(lim, key), lim)
    # and through the bound hot path of a limiter
    from ratekeeper import Limiter  # noqa: PLC0415

    limiter = Limiter(lim, store)
    assert [limiter.hit("c").allowed for _ in range(5)] == [True] * 5
    assert limiter.hit("c").allowed is False


# -----------------------------------------------------------------------------------------
# The straight-line one-limit scripts against the general one
# -----------------------------------------------------------------------------------------

#: Runs a script's text unchanged, as the body of a function whose KEYS, ARGV and `redis`
#: shadow the globals. This `redis` answers TIME with the instant in ARGV[1..2] (seconds and
#: microseconds, as TIME gives them; "" leaves TIME alone), notes the expiry (ms) of every
#: PEXPIRE and SET ... PX, and passes every command through; the script gets ARGV[3..].
#: The reply is {the script's reply, the last expiry set (nil: none)}. So the straight-line
#: and the general script can decide on the *server clock* at one chosen instant, and be
#: compared decision by decision, expiry by expiry.
HARNESS = """
local real, s, us = redis, ARGV[1], ARGV[2]
local expiry = false
local pinned = setmetatable({}, {__index = real})
pinned.call = function(cmd, ...)
  local args = {...}
  if cmd == 'TIME' and s ~= '' then
    return {s, us}
  elseif cmd == 'PEXPIRE' then
    expiry = args[2]
  elseif cmd == 'SET' then
    for i = 3, #args - 1 do
      if args[i] == 'PX' then
        expiry = args[i + 1]
      end
    end
  end
  return real.call(cmd, ...)
end
local argv = {}
for i = 3, #ARGV do
  argv[#argv + 1] = ARGV[i]
end
local function script(KEYS, ARGV, redis)
%s
end
local reply = script(KEYS, argv, pinned)
return {reply, expiry}
"""

def untag(reply: Any, tag: int) -> Any:
    """A script's own reply, out of the ``{tag, reply}`` every script answers (see _lua.py),
    checking the tag is the one sent."""
    assert isinstance(reply, list) and len(reply) == 2 and reply[0] == tag, (tag, reply)
    return reply[1]


#: Grace (ms) on every expiry, so that keys outlive the example in real time.
GRACE_MS = "60000"


@st.composite
def fast_traces(draw: st.DrawFn) -> tuple[Limit, bool, list[tuple[float, int]]]:
    """A limit of an algorithm with a straight-line script, a clock (server or client) and
    steps (cost, instant):
    the instant mostly moves forward and sometimes back; on the server clock it is whole
    microseconds at Unix-epoch scale, as TIME gives it."""
    algorithm = draw(st.sampled_from(FAST))
    rate = draw(st.sampled_from(["1/s", "2/s", "3/2s", "10/s", "5/m", "2.5/s", "7/100ms",
                                 "100/h", "3/s"]))
    burst = draw(st.sampled_from([None, 1, 2.5, 3, 10])) if algorithm in ("gcra", "token-bucket") \
        else None  # the windows take no burst
    options: dict[str, Any] = {}
    if algorithm == "leaky-bucket":  # nginx's: whole bursts and costs, nodelay or delay=D
        burst = draw(st.sampled_from([None, 1, 3, 10]))
        options = draw(st.sampled_from([{}, {"nodelay": True}, {"delay": 2}]))
    limit = Limit(algorithm, rate, burst=burst, name="fast", **options)
    server = draw(st.booleans())
    costs = [1, 1, 1, 2, 0.5, 1.5, 3, 0.25, 11, 101]  # 101: above every capacity
    if algorithm in WHOLE:
        costs = [1, 1, 1, 2, 3, 11, 101]
    if server:
        us = draw(st.sampled_from([1_764_000_000_000_000, 1_764_000_000_123_456,
                                   1_764_000_000_999_999]))
    else:
        us = round(draw(st.sampled_from([0.0, 12.345, 1_764_000_000.123456])) * 1e6)
    steps: list[tuple[float, int]] = []
    for _ in range(draw(st.integers(1, 40))):
        us = max(0, us + round(draw(st.sampled_from(STEPS)) * 1e6)
                 + draw(st.sampled_from([0, 0, 1, -1, 7])))
        steps.append((draw(st.sampled_from(costs)), us))
    return limit, server, steps


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(trace=fast_traces())
@example(trace=(  # server clock: admissions, a jump back (refill waits for `last`), cost > b
    Limit("token-bucket", "2/s", burst=2.5, name="fast"), True,
    [(1, 1_764_000_000_123_456), (1.5, 1_764_000_000_123_456), (1, 1_764_000_000_623_457),
     (0.25, 1_763_999_999_823_456), (11, 1_763_999_999_823_456),
     (1, 1_764_000_001_123_456)]))
@example(trace=(  # client clock near 0: GCRA's tat ahead of a clock that went back
    Limit("gcra", "3/2s", burst=3, name="fast"), False,
    [(3, 1_000_000), (0.5, 700_000), (1, 2_000_001), (11, 2_000_001), (1, 1_999_999)]))
@example(trace=(  # server clock: a window filled at its last microsecond, the next, back again
    Limit("fixed-window", "3/s", name="fast"), True,
    [(1, 1_764_000_000_999_999), (2, 1_764_000_000_999_999), (1, 1_764_000_000_999_999),
     (1, 1_764_000_001_000_000), (1, 1_763_999_999_500_000), (101, 1_764_000_001_000_000)]))
@example(trace=(  # client clock: the estimate across windows, a skipped window, back again
    Limit("sliding-window-counter", "3/2s", name="fast"), False,
    [(1, 1_000_000), (2, 1_500_000), (1, 2_100_000), (1, 3_900_000), (0.5, 4_000_001),
     (1, 1_000_000), (101, 5_000_000), (1, 9_000_000)]))
@example(trace=(  # server clock: a cost no idle bucket takes, a queue (delay=2), rejections
    # on a stored state, a clock back within the same ms and by more than a minute
    Limit("leaky-bucket", "2/s", burst=3, delay=2, name="fast"), True,
    [(11, 1_764_000_000_123_456), (1, 1_764_000_000_123_456), (3, 1_764_000_000_123_457),
     (1, 1_764_000_000_123_999), (2, 1_764_000_000_623_456), (1, 1_763_999_900_000_000),
     (1, 1_764_000_002_500_000)]))
def test_straight_line_scripts_decide_as_the_general_script(
        standalone: StoreTarget, trace: tuple[Limit, bool, list[tuple[float, int]]]) -> None:
    """one_<algorithm>.lua (gcra, token-bucket, fixed-window, sliding-window-counter,
    leaky-bucket) are the general script's arithmetic written out for speed: on one trace,
    the straight-line
    script (``ONE[algorithm]``) on one key and the general one (``CHECK``, charging) on
    another give equal decisions (same floats),
    equal states and equal expiries after every step, on the server clock and on a client
    clock, time going backwards included."""
    from ratekeeper.stores._lua import CHECK, ONE  # noqa: PLC0415

    limit, server, steps = trace
    client = standalone.admin
    store = standalone.store(prefix=f"rk-fast-{uuid.uuid4().hex[:8]}:")
    fast, general = ONE[limit.algorithm], CHECK
    assert fast.straight  # (a straight-line script of its own)
    fast_sha = client.script_load(HARNESS % fast.text)
    general_sha = client.script_load(HARNESS % general.text)
    fast_key, general_key = store.state_key(limit, "fast"), store.state_key(limit, "general")
    algo_id, p1, p2, p3 = store._limit_args(limit)
    params = store._one_params(limit)  # p1, p2[, p3]
    for i, (cost, us) in enumerate(steps):
        s, micro = divmod(us, 1_000_000)
        if server:
            pin, now_arg = [str(s), str(micro)], ""
        else:
            pin, now_arg = ["", ""], repr(us / 1e6)
        # one_<algorithm>.lua: cost, p1, p2[, p3], min expiry (ms), now ("" = TIME), grace
        fast_reply, fast_expiry = client.evalsha(
            fast_sha, 1, fast_key, *pin, repr(float(cost)), *params, "1", now_arg, GRACE_MS, i)
        fast_reply = untag(fast_reply, i)
        # check.lua: now, consume, min expiry, grace, then (id, cost, p1, p2, p3) per limit
        general_reply, general_expiry = client.evalsha(
            general_sha, 1, general_key, *pin, now_arg, "1", "1", GRACE_MS,
            algo_id, repr(float(cost)), p1, p2, p3, i)
        general_reply = untag(general_reply, i)
        got = store._parse_one(fast_reply, limit, float(cost))
        (want,), at, _ = store._parse_check(general_reply, [(limit, "general", float(cost))])
        where = (i, cost, us, fast_reply, general_reply)
        assert at == us / 1e6, where  # the general script decided at the pinned instant
        assert got == want, where
        assert store.state(limit, "fast") == store.state(limit, "general"), where
        # an admission writes the same expiry (from the same ttl), a rejection none
        assert fast_expiry == general_expiry, where
        assert (fast_expiry is not None) is want.allowed, where
