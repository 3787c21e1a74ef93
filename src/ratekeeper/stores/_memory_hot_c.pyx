# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, binding=False
"""The memory store's hot path, compiled (optional: built at install time where a C
compiler is there; `ratekeeper.stores.memory` falls back to `_memory_hot` without it).

What it is: every algorithm's pure ``decide`` (in `ratekeeper.algorithms`) as a ``step`` in C
types on the store's compact state (each algorithm's `MemoryForm`), with the limit's numbers
bound once, and three drivers around it: `MemoryStore.bind_hit` (``hit``, the limiter's
clock), `MemoryStore.decide_one` (``at``, a caller's clock) and several charged checks
all-or-nothing (`decide_all`). The pure functions stay the reference: each step does the
same IEEE double operations in the same order, Python's floor division and rounding where
the pure function uses them, and hands anything outside its range (a cost that is not a
whole number from 1 to the capacity, a key that is not a str, a clock that does not return
a float, integers that could overflow 64 bits, a state in another form) to the general
path. Equal decisions and states, bit for bit, on random traces: tests/unit/test_memory_hot.py.

Where the time went in pure Python, and what replaces it here: the ``Decision`` (a tuple
subclass built with ``tuple.__new__``: about 40 % of a decision) is allocated directly with
its seven items; float arithmetic is unboxed; the mutex's token list is popped and appended
without method calls. The lock stays: the clock is a Python call and an allocation may run
the garbage collector, so a decision is not atomic under the GIL.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.complex cimport PyComplex_FromDoubles
from cpython.long cimport PyLong_FromDouble
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from libc.math cimport fabs, floor, rint
from libc.string cimport memcpy

from .._types import Decision as _DecisionType
from ..algorithms._common import (
    EPS as _EPS,
    TIME_EPS as _TIME_EPS,
    FLOAT_DRIFT as _FLOAT_DRIFT,
    NS_TOLERANCE as _NS_TOLERANCE,
)
from ..algorithms.leaky_bucket import params as _leaky_params

cdef extern from *:
    """
    /* A tuple subclass instance with its seven items, as tuple.__new__(tp, items) makes
       it, without the temporary tuple (the items are borrowed: each gets a reference). */
    static PyObject *rk_decision(PyTypeObject *tp, PyObject *allowed, PyObject *remaining,
                                 PyObject *retry, PyObject *reset, PyObject *delay,
                                 PyObject *limit) {
        PyObject *d = tp->tp_alloc(tp, 7);
        if (d == NULL) return NULL;
        Py_INCREF(allowed); PyTuple_SET_ITEM(d, 0, allowed);
        Py_INCREF(remaining); PyTuple_SET_ITEM(d, 1, remaining);
        Py_INCREF(retry); PyTuple_SET_ITEM(d, 2, retry);
        Py_INCREF(reset); PyTuple_SET_ITEM(d, 3, reset);
        Py_INCREF(delay); PyTuple_SET_ITEM(d, 4, delay);
        Py_INCREF(limit); PyTuple_SET_ITEM(d, 5, limit);
        Py_INCREF(Py_False); PyTuple_SET_ITEM(d, 6, Py_False);
        return d;
    }
    /* Python's a // b for 64-bit ints (floor, not C's truncation); b != 0. */
    static inline long long rk_floordiv(long long a, long long b) {
        long long q = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
        return q;
    }
    /* state[start:start + keep] + (last,): a sliding log's new state, reusing its entries
       as `(*log, entry)` does; a log of one entry in its compact form, one complex
       (sliding_window_log.pack). */
    static PyObject *rk_log_append(PyObject *state, Py_ssize_t start, Py_ssize_t keep,
                                   PyObject *last) {
        if (keep == 0) {
            double ts = PyFloat_AsDouble(PyTuple_GET_ITEM(last, 0));
            double c = PyFloat_AsDouble(PyTuple_GET_ITEM(last, 1));  /* an int or a float */
            if ((ts == -1.0 || c == -1.0) && PyErr_Occurred()) return NULL;
            return PyComplex_FromDoubles(ts, c);
        }
        PyObject *t = PyTuple_New(keep + 1);
        if (t == NULL) return NULL;
        for (Py_ssize_t i = 0; i < keep; i++) {
            PyObject *o = PyTuple_GET_ITEM(state, start + i);
            Py_INCREF(o);
            PyTuple_SET_ITEM(t, i, o);
        }
        Py_INCREF(last);
        PyTuple_SET_ITEM(t, keep, last);
        return t;
    }
    /* A sliding log's scan (sliding_window_log._live and the sum of its costs): the index of
       the first live entry (ts > cutoff) in *start, the sum of the live costs in *used. 0 on
       success; 1 when an entry is not a (float, whole int or float) pair or the sum passes
       2**53: the general path decides those. Whole numbers below 2**53 add up exactly in
       any order, so the sum is sum()'s on every Python (3.12 compensates float sums). */
    static PyObject *rk_one = NULL;  /* the int 1, set at import */
    static int rk_log_scan(PyObject *log, double cutoff, Py_ssize_t *start, double *used) {
        Py_ssize_t size = PyTuple_GET_SIZE(log), i;
        double sum = 0.0, c;
        long long v;
        int overflow = 0;
        *start = size;
        for (i = 0; i < size; i++) {
            PyObject *e = PyTuple_GET_ITEM(log, i), *ts, *co;
            if (!PyTuple_CheckExact(e) || PyTuple_GET_SIZE(e) != 2) return 1;
            ts = PyTuple_GET_ITEM(e, 0);
            co = PyTuple_GET_ITEM(e, 1);
            if (!PyFloat_CheckExact(ts)) return 1;
            if (co == rk_one) {
                c = 1.0;  /* the usual cost: the small-int singleton, no conversion */
            } else if (PyLong_CheckExact(co)) {
                v = PyLong_AsLongLongAndOverflow(co, &overflow);
                if (overflow || v < 0 || v > (1LL << 53)) return 1;
                c = (double)v;
            } else if (PyFloat_CheckExact(co)) {
                c = PyFloat_AS_DOUBLE(co);
                if (!(c >= 0.0 && c <= 9007199254740992.0 && c == floor(c))) return 1;
            } else {
                return 1;
            }
            if (*start == size) {
                if (!(PyFloat_AS_DOUBLE(ts) > cutoff)) continue;  /* _live's test, NaN too */
                *start = i;
            }
            sum += c;
            if (sum > 9007199254740992.0) return 1;
        }
        *used = sum;
        return 0;
    }
    /* sliding_window_counter.pack's struct "<qdd" is these bytes in memory on a little-endian
       machine (elsewhere its states go to the general path). */
    #if PY_BIG_ENDIAN
    #define RK_LITTLE_ENDIAN 0
    #else
    #define RK_LITTLE_ENDIAN 1
    #endif
    /* A complex object's two doubles as stored (a cast to C's double complex would build
       x + y*I, whose real part is NaN when y is infinite and loses a -0.0). */
    static inline double rk_re(PyObject *o) { return ((PyComplexObject *)o)->cval.real; }
    static inline double rk_im(PyObject *o) { return ((PyComplexObject *)o)->cval.imag; }
    #ifndef RK_SOURCE_SHA256
    #define RK_SOURCE_SHA256 ""
    #endif
    """
    object rk_decision(PyTypeObject *tp, object allowed, object remaining, object retry,
                       object reset, object delay, object limit)
    long long rk_floordiv(long long a, long long b)
    object rk_log_append(object log, Py_ssize_t start, Py_ssize_t keep, object last)
    int rk_log_scan(object log, double cutoff, Py_ssize_t *start, double *used)
    PyObject *rk_one
    const char *RK_SOURCE_SHA256
    double rk_re(object o)
    double rk_im(object o)
    int RK_LITTLE_ENDIAN

#: The sha256 of this file when it was compiled (the build hook defines it): a build older
#: than its source is not used (`ratekeeper.stores.memory`).
SOURCE_SHA256 = RK_SOURCE_SHA256.decode()

cdef PyTypeObject *DECISION = <PyTypeObject *>_DecisionType
cdef double EPS = _EPS
cdef double NS_TOLERANCE = _NS_TOLERANCE
cdef double FLOAT_DRIFT = _FLOAT_DRIFT
cdef double TIME_EPS = _TIME_EPS
cdef tuple EMPTY = ()
cdef object ONE = 1
rk_one = <PyObject *>ONE  # held by ONE for the module's life
cdef object ZERO = 0
cdef object FZERO = 0.0
# Integers up to this magnitude are safe to multiply once more in 64 bits (leaky-bucket).
cdef long long SAFE = 1LL << 31
cdef long long NEVER = 1LL << 62  # leaky_bucket's threshold for nodelay; a larger delay=D
cdef long long EXACT = 1LL << 53  # integers up to this are exact as doubles: int / 1000


cdef inline bint exact(long long v):
    return -EXACT <= v <= EXACT


cdef inline double min_of(double x, double y):
    return y if y < x else x  # Python's min(x, y)


cdef inline object remaining_of(double x):
    # the pure functions' ``(x + EPS).__trunc__() if x > 0.0 else 0``
    return PyLong_FromDouble(x + EPS) if x > 0.0 else ZERO


cdef class _Hit:
    """What every algorithm's bound hit holds: the table, the mutex, the hooks."""

    cdef dict data
    cdef list tokens
    cdef object wait, clock, check_key, slow, housekeep, table, limit
    cdef long long most  # the largest whole cost that can ever be admitted (<= 2**53)
    cdef Py_ssize_t max_len, max_keys  # max_len -1: the caller checks its keys
    cdef long long sweep_every
    cdef object new  # the state `step` computed

    def __init__(self, t, limit, mutex, after_insert, hooks=None):
        self.table = t
        self.data = t.data
        self.tokens = mutex.take.__self__  # the mutex's token list (see memory._Mutex)
        self.wait = mutex.wait
        if hooks is None:  # for `at` only: the caller reads its clock and checks its keys
            self.max_len = -1
        else:
            self.clock = hooks.clock
            self.check_key = hooks.check_key
            self.max_len = hooks.max_key_length
            self.slow = hooks.slow
        # `after_insert` is the store's `_after_insert`: what it does is done here, with this
        # path's own count of inserts, calling the store only for an eviction or a sweep.
        store = after_insert.__self__
        self.housekeep = store._housekeep
        self.max_keys = store.max_keys
        self.sweep_every = store.sweep_every
        self.limit = limit
        cdef double most = floor(limit.capacity)
        self.most = <long long>most if most < 9007199254740992.0 else 9007199254740992

    cdef inline double cost_of(self, key, cost) except -2.0:
        """The cost as a double, or -1: take the general path. This path takes a whole
        cost from 1 to the capacity (at most 2**53, where floats hold every whole number),
        given as an int or as a float with a whole value (the service's hits are floats):
        the pure functions then compute the same values either way."""
        cdef long long c
        cdef double cf
        if type(key) is not str:
            return -1.0
        if type(cost) is int:
            try:
                c = cost
            except OverflowError:
                return -1.0
            return <double>c if 0 < c <= self.most else -1.0
        if type(cost) is float:
            cf = cost
            if 0.0 < cf <= <double>self.most and cf == floor(cf):
                return cf
        return -1.0

    cdef inline int check_new(self, key) except -1:
        """A key about to be inserted: `core.check_key`'s conditions, and its error (with
        what is wrong and what to do) when one fails."""
        if self.max_len >= 0 and not (0 < len(key) <= self.max_len and key.isprintable()):
            self.check_key(key)  # raises InvalidKey
        return 0

    cdef inline int inserted(self, double now) except -1:
        # the table's count, which the store's own paths keep too (memory._after_insert)
        cdef long long n = self.table.inserts + 1
        self.table.inserts = n
        if len(self.data) > self.max_keys or n % self.sweep_every == 0:
            self.housekeep(self.table, now, n % self.sweep_every == 0)
        return 0

    def hit(self, key, cost=1):
        cdef double c = self.cost_of(key, cost)
        if c < 0:
            return self.slow(key, cost)
        d = self.locked(key, c, cost, None)
        if d is None:  # outside this path's range, after all: the general path decides
            return self.slow(key, cost)
        return d

    def at(self, key, cost, now):
        """The decision at `now`, a caller's own clock reading (`MemoryStore.decide_one`),
        or None: the general path decides."""
        cdef double c = self.cost_of(key, cost)
        if c < 0:
            return None
        return self.locked(key, c, cost, now)

    cdef inline object locked(self, key, double c, object cost, object now):
        """`decide` with the store's mutex held (memory._Mutex: take its token, give it
        back); `now` None: read the limiter's clock, inside the lock."""
        tokens = self.tokens
        if len(tokens):
            tokens.pop()
        else:
            self.wait()
        try:
            return self.decide(key, c, cost, self.clock() if now is None else now)
        finally:
            tokens.append(True)

    cdef object decide(self, key, double cf, object cost, object t):
        """The decision for a cost `cf` (the caller's `cost`) at clock reading `t`, charged,
        with the mutex held; None (with nothing changed) for what only the general path
        takes. The key's state is popped and put back, so the table stays in LRU order."""
        cdef dict data = self.data
        if type(t) is not float:
            return None
        old = data.pop(key, None)
        try:
            if old is None:
                self.check_new(key)
            d = self.step(old, cf, cost, t)
            if d is None:
                if old is not None:
                    data[key] = old
                return None
            new = self.new
            if new is not None:
                data[key] = new
                if old is None:
                    self.inserted(<double>t)
            elif old is not None:
                data[key] = old
            return d
        except BaseException:
            if old is not None and key not in data:
                data[key] = old  # lose nothing, whatever went wrong
            raise

    cdef object step(self, object old, double cf, object cost, object t):
        """The algorithm's pure ``decide(old, t, cost, limit)``: its decision, with its new
        state in ``self.new`` (None: the state stays as it was); None for what only the
        general path takes. `t` is a float; `cf` is `cost`, whole, from 1 to the capacity."""
        raise NotImplementedError


cdef class _Gcra(_Hit):
    cdef double r, b, b2, quarter

    def __init__(self, t, limit, mutex, after_insert, hooks=None):
        _Hit.__init__(self, t, limit, mutex, after_insert, hooks)
        self.r = limit.per_second
        self.b = limit.capacity
        self.b2 = self.b + 2.0  # the drift tolerance's constants (gcra.decide)
        self.quarter = 0.25 / self.r

    cdef object step(self, object old, double cf, object cost, object t):
        cdef double now, tat, tokens, left, r = self.r
        now = <double>t
        if old is None:
            tat = now
        else:
            tat = <double>old
            if tat < now:
                tat = now
        tokens = self.b - (tat - now) * r
        left = tokens - cf
        if left >= 0.0 or -left / r < NS_TOLERANCE + min_of(self.b2 * fabs(tat) * FLOAT_DRIFT,
                                                            self.quarter):
            tat += cf / r
            self.new = tat
            return rk_decision(DECISION, True, remaining_of(left), FZERO, tat - now,
                               FZERO, self.limit)
        self.new = None
        return rk_decision(DECISION, False, remaining_of(tokens), -left / r, tat - now,
                           FZERO, self.limit)


cdef class _TokenBucket(_Hit):
    cdef double r, b, quarter

    def __init__(self, t, limit, mutex, after_insert, hooks=None):
        _Hit.__init__(self, t, limit, mutex, after_insert, hooks)
        self.r = limit.per_second
        self.b = limit.capacity
        self.quarter = 0.25 / self.r  # the drift tolerance's cap (token_bucket.decide)

    cdef object step(self, object old, double cf, object cost, object t):
        cdef double now, tokens, last, left, behind = 0.0, r = self.r, b = self.b
        now = <double>t
        if old is None:
            tokens = b
        else:
            if type(old) is not complex:
                return None
            tokens = rk_re(old)  # its compact form (token_bucket.pack)
            last = rk_im(old)
            if now >= last:
                tokens += (now - last) * r
                if tokens > b:
                    tokens = b
            else:  # a clock going backwards refills nothing
                behind = last - now
        left = tokens - cf
        if left >= 0.0 or -left / r < NS_TOLERANCE + min_of(2.0 * fabs(now) * FLOAT_DRIFT,
                                                            self.quarter):
            self.new = PyComplex_FromDoubles(left, now)
            return rk_decision(DECISION, True, remaining_of(left), FZERO,
                               (b - left) / r, FZERO, self.limit)
        self.new = None
        return rk_decision(DECISION, False, remaining_of(tokens), behind - left / r,
                           behind + (b - tokens) / r, FZERO, self.limit)


cdef class _Window(_Hit):
    """A window algorithm's numbers: N, the cost per window, and P, its period."""

    cdef double n, p

    def __init__(self, t, limit, mutex, after_insert, hooks=None):
        _Hit.__init__(self, t, limit, mutex, after_insert, hooks)
        self.n = limit.capacity
        self.p = limit.period


cdef class _FixedWindow(_Window):
    cdef double fits

    def __init__(self, t, limit, mutex, after_insert, hooks=None):
        _Window.__init__(self, t, limit, mutex, after_insert, hooks)
        self.fits = self.n + EPS

    cdef object step(self, object old, double cf, object cost, object t):
        cdef double now, kf, used = 0.0, reset, left, n = self.n, p = self.p
        now = <double>t
        kf = floor(now / p + EPS)
        if not -9e15 < kf < 9e15:  # a window index beyond exact float integers
            return None
        if old is not None:
            if type(old) is not complex:  # (k, used) with k past 2**53 (fixed_window.pack)
                return None
            if rk_re(old) >= kf:  # same window, or the clock went back into an earlier one
                kf = rk_re(old)
                used = rk_im(old)
        reset = (kf + 1.0) * p - now
        if used + cf <= self.fits:
            used += cf
            self.new = PyComplex_FromDoubles(kf, used)
            left = n - used
            return rk_decision(DECISION, True, remaining_of(left), FZERO, reset, FZERO,
                               self.limit)
        self.new = None
        left = n - used
        return rk_decision(DECISION, False, remaining_of(left), reset,
                           reset if used else 0.0, FZERO, self.limit)


cdef class _SlidingWindowCounter(_Window):

    cdef object step(self, object old, double cf, object cost, object t):
        # sliding_window_counter.decide with _roll and _estimate inline
        cdef double now, kf, prev = 0.0, curr = 0.0, elapsed, est, start, e, retry, reset
        cdef double n = self.n, p = self.p, skf, sprev, scurr
        cdef long long sk, k
        cdef char packed[24]
        now = <double>t
        kf = floor(now / p + EPS)
        if not -9e15 < kf < 9e15:
            return None
        if old is not None:
            # its compact form, sliding_window_counter.pack: struct "<qdd" (k, prev, curr)
            if type(old) is not bytes or PyBytes_GET_SIZE(old) != 24 or not RK_LITTLE_ENDIAN:
                return None
            memcpy(&sk, PyBytes_AS_STRING(old), 8)
            memcpy(&sprev, PyBytes_AS_STRING(old) + 8, 8)
            memcpy(&scurr, PyBytes_AS_STRING(old) + 16, 8)
            skf = <double>sk
            if kf == skf:
                prev, curr = sprev, scurr
            elif kf == skf + 1.0:
                prev = scurr
            elif kf < skf:  # clock went back into an earlier window: keep the stored one
                kf = skf
                prev, curr = sprev, scurr
        elapsed = now - kf * p
        if elapsed < 0:
            elapsed = 0.0
        est = prev * (p - elapsed) / p + curr
        start = kf * p
        if est + cf <= n + EPS:
            curr += cf
            reset = (start + 2.0 * p if curr else start + p) - now
            k = <long long>kf
            memcpy(packed, &k, 8)
            memcpy(packed + 8, &prev, 8)
            memcpy(packed + 16, &curr, 8)
            self.new = PyBytes_FromStringAndSize(packed, 24)
            e = n - est - cf  # floor_remaining
            return rk_decision(DECISION, True, PyLong_FromDouble(e + EPS) if e > 0 else ZERO,
                               FZERO, reset, FZERO, self.limit)
        self.new = None
        # a whole cost within the capacity: there is always a retry time
        if curr + cf <= n:
            e = p - (n - curr - cf) * p / prev
            retry = start + e - now
        else:
            e = p - (n - cf) * p / curr
            retry = start + p + e - now
        if 0.0 > retry:
            retry = 0.0
        reset = (start + 2.0 * p if curr else start + p if prev else now) - now
        e = n - est
        return rk_decision(DECISION, False, PyLong_FromDouble(e + EPS) if e > 0 else ZERO,
                           retry, reset, FZERO, self.limit)


cdef class _LeakyBucket(_Hit):
    cdef long long rate, burst, threshold

    def __init__(self, t, limit, mutex, after_insert, hooks=None):
        _Hit.__init__(self, t, limit, mutex, after_insert, hooks)
        rate, burst, threshold = _leaky_params(limit)
        if rate > SAFE or burst > SAFE * 1000 or threshold > NEVER:
            self.most = 0  # numbers this large take the general path (Python's integers)
        else:
            self.rate, self.burst, self.threshold = rate, burst, threshold

    cdef object step(self, object old, double cf, object cost, object t):
        # leaky_bucket.decide: nginx's integer arithmetic in milli-requests and milliseconds
        cdef long long now_ms, excess0 = 0, last = 0, ms, level, stamp, excess, remaining, until
        cdef long long rate = self.rate, burst = self.burst, threshold = self.threshold
        cdef long long c = <long long>cf  # whole, at most the capacity (round(cost) is c)
        cdef double now, x, delay, reset
        now = <double>t
        x = now * 1000
        if not -4e15 < x < 4e15:  # round(now * 1000) beyond exact float integers
            return None
        now_ms = <long long>rint(x)  # round half to even, as Python's round()
        if old is None:
            level, stamp = -1000, now_ms
        else:
            if type(old) is not complex:  # numbers past 2**53 (leaky_bucket.pack)
                return None
            excess0 = <long long>rk_re(old)  # its compact form: two whole numbers
            last = <long long>rk_im(old)
            ms = now_ms - last
            if ms < -60000:
                ms = 1
            elif ms < 0:
                ms = 0
            if ms > SAFE or not -SAFE * 1000 < excess0 < SAFE * 1000:
                return None  # rate * ms could overflow 64 bits: Python's ints decide
            level = excess0 - rk_floordiv(rate * ms, 1000)
            if level < -1000:
                level = -1000
            stamp = now_ms if ms else last
        excess = level + c * 1000
        if excess < 0:
            excess = 0
        if excess <= burst:
            if excess <= threshold:
                delay = 0.0
            else:
                delay = <double>rk_floordiv((excess - threshold) * 1000, rate) / 1000.0
            until = stamp - rk_floordiv(-(excess + 1000) * 1000, rate)
            if not exact(until):  # int / 1000 rounds once in Python, twice here
                return None
            reset = <double>until / 1000.0 - now
            self.new = PyComplex_FromDoubles(<double>excess, <double>stamp)
            return rk_decision(DECISION, True, rk_floordiv(burst - excess, 1000), FZERO,
                               reset, delay, self.limit)
        self.new = None
        remaining = rk_floordiv(burst - level, 1000)
        if remaining < 0:
            remaining = 0
        if old is None:
            excess0, last = 0, now_ms
            reset = 0.0
        else:
            until = last - rk_floordiv(-(excess0 + 1000) * 1000, rate)
            if not exact(until):
                return None
            reset = <double>until / 1000.0 - now
            if not reset > 0.0:
                reset = 0.0
        if c * 1000 - 1000 > burst:
            retry = None  # even an idle bucket cannot take this cost
        else:
            until = last - rk_floordiv(-(excess0 + c * 1000 - burst) * 1000, rate) - now_ms
            if not exact(until):
                return None
            x = <double>until / 1000.0
            retry = x if x > 0.0 else 0.0
        return rk_decision(DECISION, False, remaining, retry, reset, FZERO, self.limit)


cdef class _SlidingWindowLog(_Window):

    cdef object step(self, object old, double cf, object cost, object t):
        # sliding_window_log.decide with _live inline. Entries are (ts, cost) tuples, and a
        # log of one entry is kept as one complex (sliding_window_log.pack: the usual idle
        # key, in 32 bytes); a log holding anything but float instants and whole costs (a
        # fractional cost from the general path, an int clock's instants) is left to the
        # general path.
        cdef double now, freed, used = 0.0, n = self.n, p = self.p, x, ts
        cdef Py_ssize_t size = 0, start = 0, i
        now = <double>t
        if old is None:
            log = EMPTY
        else:
            if type(old) is complex:  # its one entry, as unpack gives it
                log = ((rk_re(old), rk_im(old)),)
            elif type(old) is tuple:
                log = <tuple>old
            else:
                return None
            size = len(log)
            # (cutoff: ts + P <= now, within TIME_EPS, is expired)
            if rk_log_scan(log, now - p + TIME_EPS, &start, &used):
                return None
        live = size - start
        if used + cf >= 9007199254740992.0:  # from 2**53 on, only the pure sum of ints is exact
            return None
        if used + cf <= n + EPS:
            if live and <double>(<tuple>log[size - 1])[0] >= now:
                # same instant, or a clock behind the newest entry: add to that entry
                last = <tuple>log[size - 1]
                ts = <double>last[0]
                self.new = rk_log_append(log, start, live - 1, (last[0], last[1] + cost))
            else:
                ts = now
                self.new = rk_log_append(log, start, live, (t, cost))
            x = n - used - cf  # floor_remaining
            return rk_decision(DECISION, True, PyLong_FromDouble(x + EPS) if x > 0 else ZERO,
                               FZERO, ts + p - now, FZERO, self.limit)
        self.new = None
        retry = None
        freed = 0.0
        for i in range(start, size):
            entry = <tuple>log[i]
            freed += <double>entry[1]
            if used - freed + cf <= n + EPS:
                retry = <double>entry[0] + p - now
                break
        x = n - used
        return rk_decision(DECISION, False, PyLong_FromDouble(x + EPS) if x > 0 else ZERO,
                           retry, <double>(<tuple>log[size - 1])[0] + p - now if live else 0.0,
                           FZERO, self.limit)


def decide_all(list hits, checks, now):
    """`MemoryStore._decide` for charged checks, all-or-nothing: ``hits[i]`` is the bound
    object (from `AT`) of ``checks[i]``'s limit, all on one store. The per-check decisions,
    or None: the general path decides (nothing was changed)."""
    cdef Py_ssize_t n = len(checks), i
    cdef _Hit h
    cdef double cf
    cdef bint allowed = True
    cdef list olds = [], news = [], decisions = [], keys = []
    if type(now) is not float or n == 0 or len(hits) != n:
        return None
    tokens = (<_Hit>hits[0]).tokens
    if len(tokens):
        tokens.pop()
    else:
        (<_Hit>hits[0]).wait()
    try:
        for i in range(n):  # every decision on the states as they are
            h = <_Hit>hits[i]
            check = checks[i]
            if type(check) is not tuple or len(<tuple>check) != 3:
                return None  # (a list, say: the general path unpacks any sequence)
            key, cost = (<tuple>check)[1], (<tuple>check)[2]
            keys.append(key)
            cf = h.cost_of(key, cost)
            if cf < 0:
                return None
            old = h.data.get(key)
            d = h.step(old, cf, cost, now)
            if d is None:
                return None
            olds.append(old)
            news.append(h.new)
            decisions.append(d)
            if (<tuple>d)[0] is not True:
                allowed = False
        for i in range(n):  # then charged all, or none (a rejection refreshes recency too)
            h = <_Hit>hits[i]
            key = keys[i]
            old = h.data.pop(key, None)
            if allowed:
                h.data[key] = news[i]
                if old is None:
                    h.inserted(<double>now)
            elif old is not None:
                h.data[key] = old
        return decisions
    finally:
        tokens.append(True)


#: algorithm name -> ``(t, limit, mutex, after_insert) -> bound object``, whose ``at(key, cost,
#: now)`` decides at a caller's own clock reading (`MemoryStore.decide_one`) and which
#: `decide_all` takes for several checks.
AT = {
    "gcra": _Gcra,
    "token-bucket": _TokenBucket,
    "fixed-window": _FixedWindow,
    "sliding-window-counter": _SlidingWindowCounter,
    "leaky-bucket": _LeakyBucket,
    "sliding-window-log": _SlidingWindowLog,
}


cdef class _HitBuilder:
    """``(t, limit, mutex, after_insert, hooks) -> hit``: a `_memory_hot` builder."""

    cdef object cls

    def __init__(self, cls):
        self.cls = cls

    def __call__(self, t, limit, mutex, after_insert, hooks):
        return self.cls(t, limit, mutex, after_insert, hooks).hit


#: algorithm name -> the builder of its compiled `MemoryStore.bind_hit` (as `_memory_hot.HOT`).
HOT = {name: _HitBuilder(cls) for name, cls in AT.items()}
