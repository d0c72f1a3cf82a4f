/* delivery_tally(raws, store_ms, bounds) -> (topics, counts, lateness_sum_ms, early): the
 * per-batch figures the deliverer keeps for its metrics, in one pass over the raw timer keys of
 * a delivered batch (due ms big-endian in the first 8 bytes, then the topic's length byte and
 * the topic; rocks_timer/timer/keys.py). Reference: tally_keys_py in rocks_timer/timer/tally.py.
 *
 * topics: {topic bytes: how many}; counts: len(bounds) + 1 ints, counts[i] = how many had a
 * lateness (store_ms - due ms) <= bounds[i] and > bounds[i - 1], the last one past every bound;
 * early: how many were due after store_ms (a negative lateness). A batch holds few topics, so a
 * short table compared with memcmp comes before the dict: one dict update per distinct topic. */
#include "native.h"

#define TALLY_TOPICS 16
#define TALLY_BOUNDS 64

PyObject *delivery_tally(PyObject *self, PyObject *args) {
    PyObject *raws, *bounds_obj;
    long long store_ms;
    if (!PyArg_ParseTuple(args, "OLO", &raws, &store_ms, &bounds_obj)) return NULL;
    PyObject *bseq = PySequence_Fast(bounds_obj, "delivery_tally: bounds must be a sequence");
    if (bseq == NULL) return NULL;
    Py_ssize_t nb = PySequence_Fast_GET_SIZE(bseq);
    if (nb > TALLY_BOUNDS) {
        Py_DECREF(bseq);
        PyErr_SetString(PyExc_ValueError, "delivery_tally: too many bounds");
        return NULL;
    }
    long long bounds[TALLY_BOUNDS];
    long long counts[TALLY_BOUNDS + 1] = {0};
    for (Py_ssize_t i = 0; i < nb; i++) {
        bounds[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(bseq, i));
        if (bounds[i] == -1 && PyErr_Occurred()) { Py_DECREF(bseq); return NULL; }
    }
    Py_DECREF(bseq);
    PyObject *seq = PySequence_Fast(raws, "delivery_tally: expected a sequence of bytes");
    if (seq == NULL) return NULL;
    PyObject *topics = PyDict_New(), *result = NULL;
    const char *names[TALLY_TOPICS];
    Py_ssize_t lens[TALLY_TOPICS];
    long long seen[TALLY_TOPICS];
    int used = 0;
    long long early = 0, sum = 0;
    Py_ssize_t bucket = 0;
    if (topics == NULL) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *raw = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(raw) || PyBytes_GET_SIZE(raw) < 9) goto bad;
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(raw);
        Py_ssize_t tlen = p[8];
        if (PyBytes_GET_SIZE(raw) < 9 + tlen) goto bad;
        long long lateness = store_ms - (long long)read_be64(p);
        sum += lateness;
        early += lateness < 0;
        /* bisect_left from the last key's bucket: a claim is in due order, so lateness only
         * falls along a batch and the bucket moves a step at most (any order stays right) */
        while (bucket < nb && lateness > bounds[bucket]) bucket++;
        while (bucket > 0 && lateness <= bounds[bucket - 1]) bucket--;
        counts[bucket]++;
        const char *name = (const char *)p + 9;
        int t = 0;
        while (t < used && !(lens[t] == tlen && memcmp(names[t], name, tlen) == 0)) t++;
        if (t == used) {
            if (used == TALLY_TOPICS) {  /* many topics: the table goes into the dict */
                for (int k = 0; k < used; k++)
                    if (dict_add_count(topics, PyBytes_FromStringAndSize(names[k], lens[k]),
                                       seen[k]) < 0) goto done;
                used = t = 0;
            }
            names[t] = name, lens[t] = tlen, seen[t] = 0;
            used++;
        }
        seen[t]++;
    }
    for (int k = 0; k < used; k++)
        if (dict_add_count(topics, PyBytes_FromStringAndSize(names[k], lens[k]), seen[k]) < 0)
            goto done;
    PyObject *count_list = PyList_New(nb + 1);
    if (count_list == NULL) goto done;
    for (Py_ssize_t b = 0; b <= nb; b++) {
        PyObject *v = PyLong_FromLongLong(counts[b]);
        if (v == NULL) { Py_DECREF(count_list); goto done; }
        PyList_SET_ITEM(count_list, b, v);
    }
    result = Py_BuildValue("(ONLL)", topics, count_list, sum, early);
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError, "delivery_tally: a key is not a timer key");
done:
    Py_DECREF(seq);
    Py_XDECREF(topics);
    return result;
}

/* DelayTally(bounds): the delays timer messages were sent with (due ms - send ms), the broker's
 * rocketmq_delay_message_latency histogram, counted at every send. Reference: DelayTallyPy in
 * rocks_timer/timer/tally.py; the two give equal as_dict() after the same adds.
 *
 * Why native: the Python tally (a method call, a bisect and three additions under a lock) was
 * about 4,000 instructions of a single Broker.send's 255,000, i.e. 1.6% of the send path, for
 * one histogram. Here add() is one C call of a few hundred instructions. No lock: add() and
 * as_dict() run from start to end holding the GIL (they call no Python code and never release
 * it), so each one is atomic with respect to every other Python thread (CPython's GIL; a build
 * without it would need a mutex here). A bad due (not an int of 64 bits) raises before anything
 * is counted. The sum is kept in 128 bits: exact for any number of 64-bit delays a broker
 * sends in its life. */
#ifdef __SIZEOF_INT128__
typedef struct {
    PyObject_HEAD
    Py_ssize_t nb;
    long long bounds[TALLY_BOUNDS];
    long long counts[TALLY_BOUNDS + 1];
    __int128 sum;
    long long count;
} DelayTallyObject;

/* An int of 64 bits. Python 3.11's PyLong_AsLongLong converts every int past 2^30 (an epoch
 * ms is one) through _PyLong_AsByteArray, about 180 instructions; PyLong_AsLongAndOverflow
 * walks the digits, where a C long has 64 bits (LP64: Linux, macOS). */
static long long tally_as_int64(PyObject *obj) {
#if LONG_MAX == LLONG_MAX
    int overflow = 0;
    long v = PyLong_AsLongAndOverflow(obj, &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "DelayTally: an int past 64 bits");
        return -1;
    }
    return v;
#else
    return PyLong_AsLongLong(obj);
#endif
}

static int delay_tally_init(DelayTallyObject *self, PyObject *args, PyObject *kwds) {
    PyObject *bounds_obj;
    if (!PyArg_ParseTuple(args, "O:DelayTally", &bounds_obj)) return -1;
    PyObject *bseq = PySequence_Fast(bounds_obj, "DelayTally: bounds must be a sequence");
    if (bseq == NULL) return -1;
    Py_ssize_t nb = PySequence_Fast_GET_SIZE(bseq);
    if (nb > TALLY_BOUNDS) {
        Py_DECREF(bseq);
        PyErr_SetString(PyExc_ValueError, "DelayTally: too many bounds");
        return -1;
    }
    for (Py_ssize_t i = 0; i < nb; i++) {
        long long b = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(bseq, i));
        if (b == -1 && PyErr_Occurred()) { Py_DECREF(bseq); return -1; }
        if (i > 0 && b <= self->bounds[i - 1]) {
            Py_DECREF(bseq);
            PyErr_SetString(PyExc_ValueError, "DelayTally: bounds must increase");
            return -1;
        }
        self->bounds[i] = b;
    }
    Py_DECREF(bseq);
    self->nb = nb;
    memset(self->counts, 0, sizeof(self->counts));
    self->sum = 0;
    self->count = 0;
    return 0;
}

static PyObject *delay_tally_add(DelayTallyObject *self, PyObject *const *args,
                                 Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "DelayTally.add(dues, now_ms)");
        return NULL;
    }
    long long now_ms = tally_as_int64(args[1]);
    if (now_ms == -1 && PyErr_Occurred()) return NULL;
    PyObject *seq = PySequence_Fast(args[0], "DelayTally.add: dues must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), nb = self->nb;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    long long one_bucket[TALLY_BOUNDS + 1] = {0};
    __int128 sum = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long due = tally_as_int64(items[i]);
        if (due == -1 && PyErr_Occurred()) { Py_DECREF(seq); return NULL; }
        __int128 delay = (__int128)due - now_ms;  /* any two 64-bit ints: no overflow */
        Py_ssize_t b = 0;
        while (b < nb && delay > self->bounds[b]) b++;  /* bisect_left over a few bounds */
        one_bucket[b]++;
        sum += delay;
    }
    Py_DECREF(seq);
    for (Py_ssize_t b = 0; b <= nb; b++) self->counts[b] += one_bucket[b];
    self->sum += sum;
    self->count += n;
    Py_RETURN_NONE;
}

static PyObject *int128_to_long(__int128 v) {
    if (v >= LLONG_MIN && v <= LLONG_MAX) return PyLong_FromLongLong((long long)v);
    unsigned char bytes[16];
    unsigned __int128 u = (unsigned __int128)v;
    for (int i = 0; i < 16; i++) bytes[i] = (unsigned char)(u >> (8 * i));
    return _PyLong_FromByteArray(bytes, 16, 1, 1);  /* little endian, signed */
}

static PyObject *delay_tally_as_dict(DelayTallyObject *self, PyObject *unused) {
    Py_ssize_t nb = self->nb;
    PyObject *bounds = PyList_New(nb), *counts = PyList_New(nb + 1), *sum = NULL, *out = NULL;
    if (bounds == NULL || counts == NULL) goto done;
    for (Py_ssize_t b = 0; b <= nb; b++) {
        PyObject *v = PyLong_FromLongLong(self->counts[b]);
        if (v == NULL) goto done;
        PyList_SET_ITEM(counts, b, v);
        if (b < nb) {
            v = PyLong_FromLongLong(self->bounds[b]);
            if (v == NULL) goto done;
            PyList_SET_ITEM(bounds, b, v);
        }
    }
    sum = int128_to_long(self->sum);
    if (sum == NULL) goto done;
    out = Py_BuildValue("{sOsOsOsL}", "bounds", bounds, "counts", counts, "sum", sum,
                        "count", self->count);
done:
    Py_XDECREF(bounds);
    Py_XDECREF(counts);
    Py_XDECREF(sum);
    return out;
}

static PyMethodDef delay_tally_methods[] = {
    {"add", (PyCFunction)(void (*)(void))delay_tally_add, METH_FASTCALL,
     "add(dues, now_ms): count one stored batch's delays (due ms minus now_ms)."},
    {"as_dict", (PyCFunction)delay_tally_as_dict, METH_NOARGS,
     "{bounds, counts, sum, count}: counts[i] holds delays <= bounds[i] (the last: past all)."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject DelayTallyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rocks_timer._native.codec.DelayTally",
    .tp_basicsize = sizeof(DelayTallyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "DelayTally(bounds): a histogram of send delays, added to per stored batch.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)delay_tally_init,
    .tp_methods = delay_tally_methods,
};
#endif
