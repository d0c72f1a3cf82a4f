/* claim_batch: the RocksDB claim's per-record work after the index walk, in one call.
 * Reference: claim_batch_py in rocks_timer/timer/rocksdb/claim_codec.py (same results,
 * tests/engines/rocksdb/test_claim_native.py).
 *
 * claim_batch(keys, values, fds, max_bytes, now_ms)
 *     -> (cut, sizes, bodies, copies, codes, blob, spans)
 *
 * ``keys``/``values`` are the index entries the walk took, in key order; ``fds`` maps a value
 * segment id to its open file descriptor (None for the inline layout, where no value is a
 * pointer). Each entry's size is its pointer's record length (vlog) or its value's length; the
 * batch is cut before the first entry (after the first) that takes the sum past ``max_bytes``.
 * For every entry before ``cut``: ``bodies[i]`` is the encoded timer value, or None when it
 * was read from its segment (all reads with the GIL released once, straight into ``blob``):
 * then it is the ``length`` bytes at ``offset`` of ``blob``, the i-th pair of little-endian
 * int64 in ``spans`` (-1, -1 for the others), sliced only if someone asks for it
 * (claim_codec.ReadBodies: a bytes object per body cost a sixth of the delivery rate).
 * ``copies[i]`` is its prepared CommitLog record (delivery.c) or None, and ``codes[i]`` None
 * or why it cannot be delivered:
 * ``bad-key`` (the key's length byte does not match), ``short-pointer``, ``missing`` (no such
 * segment), or a value-segment refusal (past-end, bad-magic, bad-length, bad-crc, other-key).
 */
#include <errno.h>

#include "native.h"

#define KEY_FIXED 25 /* due 8 + topic length 1 + id 16 */

static void put_le64(unsigned char *p, int64_t value) {
    uint64_t v = (uint64_t)value;
    for (int k = 0; k < 8; k++) p[k] = (unsigned char)(v >> (8 * k));
}

typedef struct {
    int pointer, fd, read_refused;
    long long offset;
    Py_ssize_t size, at, got;
    const char *code;
    const unsigned char *key, *value; /* the value: the index's bytes, or read from a segment */
    Py_ssize_t key_len, value_len;
    Py_ssize_t copy_at, copy_len;      /* the prepared record in the copy buffer; -1: none */
} entry_t;

/* Read every segment record of the first ``cut`` entries, check it (magic, length, CRC, key)
 * and write each prepared record; 0 or the errno of a failed read. No Python object is touched
 * (call without the GIL): the keys and index values are bytes the caller's lists hold, so their
 * buffers stay put. */
static int read_all(entry_t *e, Py_ssize_t cut, unsigned char *buf, unsigned char *copies_buf,
                    long long now_ms) {
    int err = 0;
    for (Py_ssize_t i = 0; i < cut && !err; i++)
        if (e[i].pointer && e[i].code == NULL)
            err = pread_full(e[i].fd, buf + e[i].at, e[i].size, e[i].offset, &e[i].got);
    for (Py_ssize_t i = 0; i < cut && !err; i++) {
        entry_t *r = &e[i];
        if (r->code != NULL) continue;
        if (r->pointer) {
            Py_ssize_t value_at = 0;
            r->code = vlog_check(buf + r->at, r->got, 0, r->size, r->key, r->key_len, &value_at,
                                 &r->value_len);
            if (r->code != NULL) {
                r->read_refused = 1;
                continue;
            }
            r->value = buf + r->at + value_at;
        }
        r->copy_len = delivery_copy_into(r->value, r->value_len, (long long)read_be64(r->key),
                                         now_ms, copies_buf + r->copy_at,
                                         DELIVERY_COPY_BOUND(r->value_len));
    }
    return err;
}

PyObject *claim_batch(PyObject *self, PyObject *args) {
    PyObject *keys, *values, *fds;
    long long max_bytes, now_ms;
    if (!PyArg_ParseTuple(args, "O!O!OLL", &PyList_Type, &keys, &PyList_Type, &values, &fds,
                          &max_bytes, &now_ms))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(values) != n || (fds != Py_None && !PyDict_Check(fds))) {
        PyErr_SetString(PyExc_ValueError, "claim_batch: keys and values differ, or fds is odd");
        return NULL;
    }
    entry_t *e = PyMem_Calloc(n + 1, sizeof(entry_t));
    if (e == NULL) return PyErr_NoMemory();
    unsigned char *buf = NULL, *copies_buf = NULL;
    PyObject *sizes = NULL, *bodies = NULL, *copies = NULL, *codes = NULL, *result = NULL;
    PyObject *blob = NULL, *spans = NULL;
    Py_ssize_t cut = 0, used = 0, total = 0;
    for (; cut < n; cut++) {
        PyObject *key = PyList_GET_ITEM(keys, cut), *value = PyList_GET_ITEM(values, cut);
        if (!PyBytes_Check(key) || !PyBytes_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "claim_batch: keys and values must be bytes");
            goto done;
        }
        entry_t *r = &e[cut];
        const unsigned char *v = (const unsigned char *)PyBytes_AS_STRING(value);
        Py_ssize_t vlen = PyBytes_GET_SIZE(value);
        r->size = vlen;
        if (fds != Py_None && vlen >= POINTER_SIZE && v[0] == POINTER_VERSION) {
            r->pointer = 1;
            r->offset = (int64_t)read_be64(v + 5);
            r->size = (Py_ssize_t)read_be32(v + 13);
        } else if (fds != Py_None && vlen > 0 && v[0] == POINTER_VERSION) {
            r->code = "short-pointer";
        }
        if (cut > 0 && used + r->size > max_bytes) break;
        used += r->size;
        const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(key);
        Py_ssize_t klen = PyBytes_GET_SIZE(key);
        if (klen < KEY_FIXED + 1 || k[8] == 0 || klen != KEY_FIXED + k[8]) {
            r->code = "bad-key";
            continue;
        }
        if (r->pointer && r->code == NULL) {
            PyObject *seg = PyLong_FromUnsignedLong(read_be32(v + 1));
            if (seg == NULL) goto done;
            PyObject *fd = PyDict_GetItemWithError(fds, seg);
            Py_DECREF(seg);
            if (fd == NULL) {
                if (PyErr_Occurred()) goto done;
                r->code = "missing";
                continue;
            }
            r->fd = (int)PyLong_AsLong(fd);
            if (r->fd == -1 && PyErr_Occurred()) goto done;
            if (r->offset < 0 || r->size < 0) { r->code = "past-end"; continue; }
            r->at = total;
            total += r->size;
        }
    }
    /* room for every prepared record: a copy is never longer than the bound of its value,
     * and a value read from a segment is shorter than its record */
    Py_ssize_t copy_total = 0;
    for (Py_ssize_t i = 0; i < cut; i++) {
        entry_t *r = &e[i];
        PyObject *key = PyList_GET_ITEM(keys, i), *value = PyList_GET_ITEM(values, i);
        r->key = (const unsigned char *)PyBytes_AS_STRING(key);
        r->key_len = PyBytes_GET_SIZE(key);
        r->value = (const unsigned char *)PyBytes_AS_STRING(value);
        r->value_len = PyBytes_GET_SIZE(value);
        r->copy_at = copy_total;
        r->copy_len = -1;
        if (r->code == NULL) copy_total += DELIVERY_COPY_BOUND(r->pointer ? r->size : r->value_len);
    }
    if ((blob = PyBytes_FromStringAndSize(NULL, total)) == NULL ||
        (spans = PyBytes_FromStringAndSize(NULL, 16 * cut)) == NULL)
        goto done;
    buf = (unsigned char *)PyBytes_AS_STRING(blob); /* not shared before this call returns */
    copies_buf = PyMem_Malloc(copy_total ? copy_total : 1);
    if (copies_buf == NULL) { PyErr_NoMemory(); goto done; }
    int err;
    /* Without the GIL (the CommitLog writer's thread runs meanwhile) */
    Py_BEGIN_ALLOW_THREADS
    err = read_all(e, cut, buf, copies_buf, now_ms);
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    if ((sizes = PyList_New(cut)) == NULL || (bodies = PyList_New(cut)) == NULL ||
        (copies = PyList_New(cut)) == NULL || (codes = PyList_New(cut)) == NULL)
        goto done;
    /* With the GIL: only the objects */
    unsigned char *span = (unsigned char *)PyBytes_AS_STRING(spans);
    for (Py_ssize_t i = 0; i < cut; i++) {
        entry_t *r = &e[i];
        int read = r->pointer && r->code == NULL;
        put_le64(span + 16 * i, read ? (int64_t)(r->value - buf) : -1);
        put_le64(span + 16 * i + 8, read ? (int64_t)r->value_len : -1);
        PyObject *size = PyLong_FromSsize_t(r->size);
        if (size == NULL) goto done;
        PyList_SET_ITEM(sizes, i, size);
        PyObject *body, *code, *copy;
        if (r->read_refused) {
            body = Py_NewRef(Py_None); /* its segment record was refused: no body */
        } else if (read) {
            body = Py_NewRef(Py_None); /* in blob, at its span */
        } else {
            body = Py_NewRef(PyList_GET_ITEM(values, i)); /* inline, or refused before reading */
        }
        PyList_SET_ITEM(bodies, i, body);
        if (r->code != NULL) {
            code = PyUnicode_FromString(r->code);
            if (code == NULL) goto done;
            PyList_SET_ITEM(codes, i, code);
            PyList_SET_ITEM(copies, i, Py_NewRef(Py_None));
            continue;
        }
        PyList_SET_ITEM(codes, i, Py_NewRef(Py_None));
        if (r->copy_len >= 0) {
            copy = PyBytes_FromStringAndSize((const char *)copies_buf + r->copy_at, r->copy_len);
            if (copy == NULL) goto done;
        } else {
            copy = Py_NewRef(Py_None);
        }
        PyList_SET_ITEM(copies, i, copy);
    }
    result = Py_BuildValue("(nOOOOOO)", cut, sizes, bodies, copies, codes, blob, spans);
done:
    PyMem_Free(e);
    Py_XDECREF(blob);
    Py_XDECREF(spans);
    PyMem_Free(copies_buf);
    Py_XDECREF(sizes);
    Py_XDECREF(bodies);
    Py_XDECREF(copies);
    Py_XDECREF(codes);
    return result;
}

/* due_second_counts(raws) -> {second: count}: how many of the timer keys ``raws`` (bytes, at
 * least 8 long: the due time in ms, big-endian) fall due in each second. Reference:
 * due_second_counts_py in rocks_timer/timer/rocksdb/claim_codec.py. A delivered batch is in
 * key order, so equal seconds come in runs: one dict update per run. */
PyObject *due_second_counts(PyObject *self, PyObject *raws) {
    PyObject *seq = PySequence_Fast(raws, "due_second_counts: expected a sequence of bytes");
    if (seq == NULL) return NULL;
    PyObject *counts = PyDict_New();
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), run = 0;
    uint64_t second = 0;
    if (counts == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *raw = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(raw) || PyBytes_GET_SIZE(raw) < 8) {
            PyErr_SetString(PyExc_ValueError, "due_second_counts: a key is not bytes of 8 or more");
            goto fail;
        }
        uint64_t s = read_be64((const unsigned char *)PyBytes_AS_STRING(raw)) / 1000;
        if (run && s == second) {
            run++;
            continue;
        }
        if (run && dict_add_count(counts, PyLong_FromUnsignedLongLong(second), run) < 0) goto fail;
        second = s;
        run = 1;
    }
    if (run && dict_add_count(counts, PyLong_FromUnsignedLongLong(second), run) < 0) goto fail;
    Py_DECREF(seq);
    return counts;
fail:
    Py_DECREF(seq);
    Py_XDECREF(counts);
    return NULL;
}


/* topic_counts(raws) -> {topic bytes: count}: how many of the timer keys ``raws`` (bytes: due
 * 8 bytes, topic length 1 byte, topic, 16-byte msg id) belong to each topic; the topic is
 * raw[9:-16], as the reference topic_deltas_py in rocks_timer/timer/rocksdb/topiccount.py
 * slices it. A delivered batch counts thousands of keys, mostly of a few topics in runs: a run
 * of equal topics costs one compare a key and one dict update at its end. */
PyObject *topic_counts(PyObject *self, PyObject *raws) {
    PyObject *seq = PySequence_Fast(raws, "topic_counts: expected a sequence of bytes");
    if (seq == NULL) return NULL;
    PyObject *counts = PyDict_New();
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), run = 0, topic_len = 0;
    const char *topic = NULL;
    if (counts == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *raw = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(raw)) {
            PyErr_SetString(PyExc_TypeError, "topic_counts: a key is not bytes");
            goto fail;
        }
        Py_ssize_t size = PyBytes_GET_SIZE(raw);
        Py_ssize_t len = size - 16 - 9;
        if (len < 0) len = 0;
        const char *at = PyBytes_AS_STRING(raw) + (len ? 9 : 0);
        if (run && len == topic_len && memcmp(at, topic, (size_t)len) == 0) {
            run++;
            continue;
        }
        if (run && dict_add_count(counts, PyBytes_FromStringAndSize(topic, topic_len), run) < 0)
            goto fail;
        topic = at;
        topic_len = len;
        run = 1;
    }
    if (run && dict_add_count(counts, PyBytes_FromStringAndSize(topic, topic_len), run) < 0)
        goto fail;
    Py_DECREF(seq);
    return counts;
fail:
    Py_DECREF(seq);
    Py_XDECREF(counts);
    return NULL;
}
