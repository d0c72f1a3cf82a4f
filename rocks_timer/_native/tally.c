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

static int64_t tally_be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}

static int flush_topic(PyObject *topics, const char *name, Py_ssize_t len, long long n) {
    PyObject *key = PyBytes_FromStringAndSize(name, len);
    if (key == NULL) return -1;
    PyObject *old = PyDict_GetItemWithError(topics, key);
    long long have = 0;
    if (old == NULL && PyErr_Occurred()) { Py_DECREF(key); return -1; }
    if (old != NULL && (have = PyLong_AsLongLong(old)) == -1 && PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    }
    PyObject *value = PyLong_FromLongLong(have + n);
    int rc = value == NULL ? -1 : PyDict_SetItem(topics, key, value);
    Py_DECREF(key);
    Py_XDECREF(value);
    return rc;
}

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
    if (topics == NULL) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *raw = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(raw) || PyBytes_GET_SIZE(raw) < 9) goto bad;
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(raw);
        Py_ssize_t tlen = p[8];
        if (PyBytes_GET_SIZE(raw) < 9 + tlen) goto bad;
        long long lateness = store_ms - (long long)tally_be64(p);
        sum += lateness;
        early += lateness < 0;
        Py_ssize_t b = 0;
        while (b < nb && lateness > bounds[b]) b++;
        counts[b]++;
        const char *name = (const char *)p + 9;
        int t = 0;
        while (t < used && !(lens[t] == tlen && memcmp(names[t], name, tlen) == 0)) t++;
        if (t == used) {
            if (used == TALLY_TOPICS) {  /* many topics: the table goes into the dict */
                for (int k = 0; k < used; k++)
                    if (flush_topic(topics, names[k], lens[k], seen[k]) < 0) goto done;
                used = t = 0;
            }
            names[t] = name, lens[t] = tlen, seen[t] = 0;
            used++;
        }
        seen[t]++;
    }
    for (int k = 0; k < used; k++)
        if (flush_topic(topics, names[k], lens[k], seen[k]) < 0) goto done;
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
