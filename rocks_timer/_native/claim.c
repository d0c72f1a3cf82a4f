/* claim_batch: the RocksDB claim's per-record work after the index walk, in one call.
 * Reference: claim_batch_py in rocks_timer/timer/rocksdb/claim_codec.py (same results,
 * tests/test_claim_native.py).
 *
 * claim_batch(keys, values, fds, max_bytes, now_ms) -> (cut, sizes, bodies, copies, codes)
 *
 * ``keys``/``values`` are the index entries the walk took, in key order; ``fds`` maps a value
 * segment id to its open file descriptor (None for the inline layout, where no value is a
 * pointer). Each entry's size is its pointer's record length (vlog) or its value's length; the
 * batch is cut before the first entry (after the first) that takes the sum past ``max_bytes``.
 * For every entry before ``cut``: ``bodies[i]`` is the encoded timer value (read from its
 * segment for a pointer, all reads with the GIL released once), ``copies[i]`` its prepared
 * CommitLog record (delivery.c) or None, and ``codes[i]`` None or why it cannot be delivered:
 * ``bad-key`` (the key's length byte does not match), ``short-pointer``, ``missing`` (no such
 * segment), or a value-segment refusal (past-end, bad-magic, bad-length, bad-crc, other-key). */
#include <errno.h>

#include "native.h"

#define KEY_FIXED 25 /* due 8 + topic length 1 + id 16 */

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p) {
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
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
            r->offset = be64(v + 5);
            r->size = (Py_ssize_t)be32(v + 13);
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
            PyObject *seg = PyLong_FromUnsignedLong(be32(v + 1));
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
    buf = PyMem_Malloc(total ? total : 1);
    copies_buf = PyMem_Malloc(copy_total ? copy_total : 1);
    if (buf == NULL || copies_buf == NULL) { PyErr_NoMemory(); goto done; }
    int err = 0;
    /* Without the GIL (the CommitLog writer's thread runs meanwhile): read every segment
     * record, check it (magic, length, CRC, key), and write each prepared record. The keys and
     * index values are bytes the lists hold, so their buffers stay put. */
    Py_BEGIN_ALLOW_THREADS
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
        r->copy_len = delivery_copy_into(r->value, r->value_len, (long long)be64(r->key), now_ms,
                                         copies_buf + r->copy_at,
                                         DELIVERY_COPY_BOUND(r->value_len));
    }
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
    for (Py_ssize_t i = 0; i < cut; i++) {
        entry_t *r = &e[i];
        PyObject *size = PyLong_FromSsize_t(r->size);
        if (size == NULL) goto done;
        PyList_SET_ITEM(sizes, i, size);
        PyObject *body, *code, *copy;
        if (r->read_refused) {
            body = Py_NewRef(Py_None); /* its segment record was refused: no body */
        } else if (r->pointer && r->code == NULL) {
            body = PyBytes_FromStringAndSize((const char *)r->value, r->value_len);
            if (body == NULL) goto done;
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
    result = Py_BuildValue("(nOOOO)", cut, sizes, bodies, copies, codes);
done:
    PyMem_Free(e);
    PyMem_Free(buf);
    PyMem_Free(copies_buf);
    Py_XDECREF(sizes);
    Py_XDECREF(bodies);
    Py_XDECREF(copies);
    Py_XDECREF(codes);
    return result;
}
