# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, binding=False
"""Replay's hot path, compiled (optional: built at install time where a C compiler is there;
`ratekeeper.replay._hot` selects it, else the pure Python runs).

Two pieces, each the compiled twin of a pure function that stays the reference:

- `Parser(fmt).parse`: `LogFormat.parse` of a line, for a `LogFormat` exactly. The regex is
  the format's own (its lean ``fullmatch``); what is compiled is what surrounds it: the
  escapes, the time (the format's `TimeCache`, its dict read directly), the request line
  split, status and bytes, the headers, and the `LogEvent` allocated with its twelve items.
  A line off the common path (no match, a bad time, a status that is not a number) is handed
  to `LogFormat.parse` itself, so whatever it answers or raises is the answer; an unusual
  request line goes to the same `_request` the pure code calls.
- `parsed(...)` and `reorder(...)`: `LogReader._parsed` and `_order.reorder`, the same
  steps and the same `ReadStats` counts (`reorder` on the options `LogReader` checked).
- `remembering(...)`: `_replay._remembering`'s loop, the same steps in the same order
  (the mapping memo, `HTTPRules.map` on a miss, the one-limit fast path, `decide_mapped`
  otherwise), with the named tuples allocated directly.

Equal events, `ReadStats` and decisions on random logs: tests/replay/test_compiled_path.py.
"""

from cpython.float cimport PyFloat_FromString
from cpython.object cimport PyObject, PyTypeObject
from cpython.unicode cimport PyUnicode_FindChar

import heapq as _heapq
from collections import deque as _deque

from ..core import run as _run
from ..policy._decide import HTTPDecision as _HTTPDecision
from ..policy._decide import decide_mapped as _decide_mapped
from ..policy._decide import verdict_of as _verdict_of
from ..policy._http import HTTPCheck as _HTTPCheck
from ..policy._request import RequestInfo as _RequestInfo
from ._events import LogEvent as _LogEvent
from ._formats import BadLine as _BadLine
from ._formats import LogFormat as _LogFormat
from ._formats import _LineFields, _request, _split_target, _unescape_cached

cdef extern from *:
    """
    #include "structmember.h"  /* PyMemberDef (in descrobject.h from 3.12) */
    /* A tuple subclass instance with its n items, as tuple.__new__(tp, items) makes it,
       without the temporary tuple (the items are borrowed: each gets a reference). */
    static PyObject *rk_pack(PyTypeObject *tp, Py_ssize_t n, PyObject **items) {
        PyObject *o = tp->tp_alloc(tp, n);
        Py_ssize_t i;
        if (o == NULL) return NULL;
        for (i = 0; i < n; i++) {
            Py_INCREF(items[i]);
            PyTuple_SET_ITEM(o, i, items[i]);
        }
        return o;
    }
    /* int(s) of a str: ASCII digits only (up to 18: no overflow) in C, anything else
       (signs, spaces, underscores, other scripts' digits, a bad number) as int() does. */
    static PyObject *rk_int(PyObject *s) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(s), i;
        long long v = 0;
        if (n > 0 && n <= 18 && PyUnicode_IS_ASCII(s)) {
            const Py_UCS1 *c = PyUnicode_1BYTE_DATA(s);
            for (i = 0; i < n; i++) {
                if (c[i] < '0' || c[i] > '9') break;
                v = v * 10 + (c[i] - '0');
            }
            if (i == n) return PyLong_FromLongLong(v);
        }
        return PyLong_FromUnicodeObject(s, 10);
    }
    /* An instance of a Python class with __slots__ made without its __init__, as
       cls.__new__(cls) then one store per slot does (the offsets are the slots' member
       descriptors'); the values are borrowed: each gets a reference. */
    static PyObject *rk_slotted(PyTypeObject *tp, Py_ssize_t n, Py_ssize_t *offsets,
                                PyObject **values) {
        PyObject *o = tp->tp_alloc(tp, 0);
        Py_ssize_t i;
        if (o == NULL) return NULL;
        for (i = 0; i < n; i++) {
            Py_INCREF(values[i]);
            *(PyObject **)((char *)o + offsets[i]) = values[i];
        }
        return o;
    }
    static Py_ssize_t rk_slot_offset(PyObject *descr) {
        if (Py_TYPE(descr) != &PyMemberDescr_Type) return -1;
        return ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    #ifndef RK_SOURCE_SHA256
    #define RK_SOURCE_SHA256 ""
    #endif
    """
    object rk_pack(PyTypeObject *tp, Py_ssize_t n, PyObject **items)
    object rk_int(object s)
    object rk_slotted(PyTypeObject *tp, Py_ssize_t n, Py_ssize_t *offsets, PyObject **values)
    Py_ssize_t rk_slot_offset(object descr)
    const char *RK_SOURCE_SHA256

#: The sha256 of this file when it was compiled (the build hook defines it): a build older
#: than its source is not used (`ratekeeper.replay._hot`).
SOURCE_SHA256 = RK_SOURCE_SHA256.decode()

cdef PyTypeObject *LOG_EVENT = <PyTypeObject *>_LogEvent
cdef PyTypeObject *LINE_FIELDS = <PyTypeObject *>_LineFields
cdef PyTypeObject *REQUEST_INFO = <PyTypeObject *>_RequestInfo
cdef PyTypeObject *HTTP_CHECK = <PyTypeObject *>_HTTPCheck
cdef PyTypeObject *HTTP_DECISION = <PyTypeObject *>_HTTPDecision
cdef str ALLOWED = "allowed"


cdef class Parser:
    """`LogFormat.parse` for one `LogFormat` (see the module docstring)."""

    cdef object fmt, pure, lean, lean_fast, times
    cdef dict clf
    cdef Py_ssize_t fields_at[3]  # _LineFields' slots: _format, _line, _d
    cdef int kind  # 0: $time_local, 1: $msec, 2: $time_iso8601
    cdef Py_ssize_t i_time, i_client, i_request, i_method, i_path, i_status, i_bytes, i_host
    cdef tuple headers, quoted

    def __init__(self, fmt):
        cdef Py_ssize_t i
        if type(fmt) is not _LogFormat:
            raise TypeError(f"a LogFormat, not {type(fmt).__name__}")
        self.fmt = fmt
        self.pure = fmt.parse
        self.lean, self.lean_fast = fmt._lean, fmt._lean_fast
        self.times = fmt._times
        self.clf = fmt._times._clf  # cleared in place when full: the same dict throughout
        self.kind = {"clf": 0, "msec": 1}.get(fmt._time_kind, 2)
        (self.i_time, self.i_client, self.i_request, self.i_method, self.i_path,
         self.i_status, self.i_bytes, self.i_host) = fmt._lean_index
        self.headers = fmt._lean_headers
        self.quoted = fmt._lean_quoted
        for i, name in enumerate(("_format", "_line", "_d")):
            self.fields_at[i] = rk_slot_offset(_LineFields.__dict__[name])
            if self.fields_at[i] < 0:
                raise TypeError(f"_LineFields.{name} is not a slot")

    def parse(self, str line, lineno):
        cdef Py_ssize_t n = len(line), a, b, q
        cdef bint escaped = PyUnicode_FindChar(line, 92, 0, n, 1) >= 0  # a backslash
        m = (self.lean if escaped and '\\"' in line else self.lean_fast)(line)
        if m is None:
            return self.pure(line, lineno)
        g = m.groups()
        cdef list gl
        cdef Py_ssize_t i
        if escaped:
            gl = list(g)
            for i in self.quoted:
                v = gl[i]
                if PyUnicode_FindChar(v, 92, 0, len(v), 1) >= 0:
                    gl[i] = _unescape_cached(v)
            g = tuple(gl)
        cdef tuple gt = <tuple>g
        ts = gt[self.i_time]
        if self.kind == 0:
            t = self.clf.get(ts)
            if t is None:
                try:
                    t = self.times.clf(ts)
                except ValueError:
                    return self.pure(line, lineno)
        elif self.kind == 1:
            try:
                t = PyFloat_FromString(ts)
            except ValueError:
                return self.pure(line, lineno)
        else:
            try:
                t = self.times.iso(ts)
            except ValueError:
                return self.pure(line, lineno)
        cdef str req, path
        host = None
        if self.i_request >= 0:
            req = gt[self.i_request]
            n = len(req)
            a = PyUnicode_FindChar(req, 32, 0, n, 1)
            b = PyUnicode_FindChar(req, 32, a + 1, n, 1) if a > 0 else -1
            if (b > a + 1 and req[a + 1] == "/"
                    and PyUnicode_FindChar(req, 32, b + 1, n, 1) < 0
                    and (method := req[:a]).isalpha()):
                path = req[a + 1:b]  # the usual "GET /a?b HTTP/1.1"
                q = PyUnicode_FindChar(path, 63, 0, len(path), 1)  # ?
                if q >= 0:
                    path = path[:q]
                q = PyUnicode_FindChar(path, 35, 0, len(path), 1)  # #
                if q >= 0:
                    path = path[:q]
            else:
                method, path, host = _request(req)
        else:
            method = gt[self.i_method] if self.i_method >= 0 else ""
            path = _split_target(gt[self.i_path])[0] if self.i_path >= 0 else ""
        if self.i_host >= 0:
            v = gt[self.i_host]
            if v is not None and v != "-" and v != "":
                host = v
        status = size = None
        try:
            if self.i_status >= 0:
                v = gt[self.i_status]
                if v != "-":
                    status = rk_int(v)
            if self.i_bytes >= 0:
                v = gt[self.i_bytes]
                size = 0 if v == "-" else rk_int(v)
        except (ValueError, TypeError):
            return self.pure(line, lineno)
        cdef dict headers = {}
        for i, h in self.headers:
            v = gt[i]
            if v != "-":
                headers[h] = v
        client = gt[self.i_client] if self.i_client >= 0 else ""
        ua = headers.get("user-agent")
        ref = headers.get("referer")
        cdef PyObject *items[12]
        items[0] = <PyObject *>self.fmt  # _LineFields(self.fmt, line)
        items[1] = <PyObject *>line
        items[2] = <PyObject *>None
        fields = rk_slotted(LINE_FIELDS, 3, self.fields_at, items)
        items[0] = <PyObject *>t
        items[1] = <PyObject *>client
        items[2] = <PyObject *>method
        items[3] = <PyObject *>path
        items[4] = <PyObject *>status
        items[5] = <PyObject *>size
        items[6] = <PyObject *>ua
        items[7] = <PyObject *>ref
        items[8] = <PyObject *>host
        items[9] = <PyObject *>headers
        items[10] = <PyObject *>fields
        items[11] = <PyObject *>lineno
        return rk_pack(LOG_EVENT, 12, items)


def remembering(policies, rules, engine, clock, events, inputs, one, list box, replayed,
                Py_ssize_t cache_size):
    """`_replay._remembering`'s loop: its arguments, plus its `_one_limit` decider `one` and
    that decider's clock `box`, the `Replayed` type and `MAP_CACHE_SIZE`."""
    cdef dict memo = {}
    cdef Py_ssize_t i
    cdef dict h
    cdef tuple key, fields, hit, fast
    cdef PyObject *items[7]
    cdef PyTypeObject *replayed_t = <PyTypeObject *>replayed
    by_method, by_path, names = inputs
    host_h, fwd_h = names[0], names[1]
    cdef tuple rest = tuple(names[2:])
    now = box[0]
    store = engine.store
    decide_one = getattr(store, "decide_one", None)  # used on a MemoryStore only
    set_clock = clock.set
    rules_map = rules.map
    cdef Py_ssize_t request_at[6]  # RequestInfo's slots, in its __init__'s order
    for i, name in enumerate(("method", "path", "headers", "peer", "native", "client_ip")):
        request_at[i] = rk_slot_offset(_RequestInfo.__dict__[name])
        if request_at[i] < 0:
            raise TypeError(f"RequestInfo.{name} is not a slot")
    cdef tuple e
    for ev in events:
        if type(ev) is _LogEvent:  # its items by position: no descriptor call each
            e = <tuple>ev
            t, client, method, path, ev_host, headers = e[0], e[1], e[2], e[3], e[8], e[9]
        else:
            t, client, method, path, ev_host, headers = \
                ev.t, ev.client, ev.method, ev.path, ev.host, ev.headers
        if t > now:  # a clamped late line keeps the clock where it is
            now = t
            set_clock(now)
            box[0] = now
        h = dict(headers)  # request_of(ev), inline
        if ev_host and "host" not in h:
            h["host"] = ev_host
        method = method or "GET"
        path = path or "/"
        peer = client or None
        # RequestInfo(method, path, h, peer): its __init__'s six stores, without its frame
        items[0] = <PyObject *>method
        items[1] = <PyObject *>path
        items[2] = <PyObject *>h
        items[3] = <PyObject *>peer
        items[4] = <PyObject *>None
        items[5] = <PyObject *>None
        req = rk_slotted(REQUEST_INFO, 6, request_at, items)
        key = (method if by_method else "", path if by_path else "", peer,
               h.get(host_h), h.get(fwd_h))
        if rest:
            key += tuple([h.get(n) for n in rest])
        got = memo.get(key)
        if got is None:
            check = rules_map(req, now)
            f = None if check is None or one is None else one(check)
            if len(memo) >= cache_size:
                memo.clear()
            memo[key] = (None if check is None else check[:6], req.client_ip, f)
        else:
            hit = <tuple>got
            req.client_ip = hit[1]
            f = hit[2]
            if hit[0] is None:
                check = None
            else:
                fields = <tuple>hit[0]
                for i in range(6):
                    items[i] = <PyObject *>fields[i]
                items[6] = <PyObject *>req
                check = rk_pack(HTTP_CHECK, 7, items)
        if check is None:
            decision = None
        elif f is None:
            decision = _run(_decide_mapped(engine, policies, check, now))
        else:  # decide_mapped's one-limit core.hit: decide_one, or the store's bound hit
            fast = <tuple>f
            bound, lim, ckey, cost, limits, failure = fast
            d = decide_one(lim, ckey, cost, now) if bound is None else bound(ckey, cost)
            if d.allowed and d.delay == 0.0:  # the common case, as verdict_of decides it
                items[0] = <PyObject *>check
                items[1] = <PyObject *>d
                items[2] = <PyObject *>ALLOWED
                items[3] = <PyObject *>limits
                items[4] = <PyObject *>failure
                items[5] = <PyObject *>None
                decision = rk_pack(HTTP_DECISION, 6, items)
            else:  # no ticket on this path, so no refund (as in decide_mapped)
                d, verdict, _ = _verdict_of(d, dry_run=check.dry_run,
                                            max_delay=check.max_delay)
                decision = _HTTPDecision(check, d, verdict, limits, failure, None)
        items[0] = <PyObject *>ev
        items[1] = <PyObject *>decision
        yield rk_pack(replayed_t, 2, items)


def parsed(lines, parse, stats, too_long, str too_long_why, blanks):
    """`LogReader._parsed`: `lines` (a `_Lines`) through `parse`, counted in `stats`;
    `too_long` is `TOO_LONG`, `too_long_why` its message, `blanks` is `BLANKS`."""
    cdef Py_ssize_t n = 0
    try:
        for line in lines:
            if line is blanks:
                n += lines.blanks
                stats.lines = n
                stats.skip("blank", lines.blanks)
                continue
            n += 1
            stats.lines = n
            try:
                ev = parse(line, n)
            except _BadLine as b:
                if line is too_long:
                    stats.bad(n, "too-long", too_long_why, "")
                elif b.skip:
                    stats.skip(b.reason)
                else:
                    stats.bad(n, b.reason, b.why, line)
                continue
            if ev is None:
                stats.skip("blank")
                continue
            yield ev
        tail = lines.tail
        if tail:
            n += 1
            stats.lines = n
            try:
                ev = parse(tail, n)
            except _BadLine as b:
                stats.bad(n, "truncated", f"the last line has no newline and {b.why}", tail)
                ev = None
            if ev is not None:
                yield ev
        if lines.error is not None:
            stats.bad(n + 1, *lines.error, "")
    finally:
        stats.lines = n


def reorder(events, stats, window, bint drop, Py_ssize_t max_pending):
    """`_order.reorder(events, stats, window=window, late="drop" if drop else "clamp",
    max_pending=max_pending)`, its options already checked."""
    pending = _deque()
    cdef list heap = []
    push, pop, append, popleft = _heapq.heappush, _heapq.heappop, pending.append, \
        pending.popleft
    cdef Py_ssize_t seq = 0, n = 0
    hi = last = tail = float("-inf")
    try:
        for ev in events:
            t = ev.t
            if t < last:
                stats.late += 1
                if drop:
                    stats.dropped += 1
                    continue
                ev = ev._replace(t=last)
                t = last
            elif t < hi:
                stats.reordered += 1
            else:
                hi = t
            if t >= tail:
                append((t, seq, ev))
                tail = t
            else:
                push(heap, (t, seq, ev))
            seq += 1
            edge = hi - window
            while True:
                if heap and (not pending or heap[0] < pending[0]):
                    if heap[0][0] > edge and len(heap) + len(pending) <= max_pending:
                        break
                    last, _, out = pop(heap)
                elif pending:
                    if pending[0][0] > edge and len(pending) + len(heap) <= max_pending:
                        break
                    last, _, out = popleft()
                else:
                    break
                if n == 0:
                    stats.first_t = last
                n += 1
                yield out
        while heap or pending:
            if heap and (not pending or heap[0] < pending[0]):
                last, _, out = pop(heap)
            else:
                last, _, out = popleft()
            if n == 0:
                stats.first_t = last
            n += 1
            yield out
    finally:
        stats.events += n
        if n:
            stats.last_t = last
