/* Value-segment reads of the vlog layout. Reference: parse_run_py in
 * rocks_timer/timer/rocksdb/vlog/segments.py (same results,
 * tests/engines/rocksdb/test_segments_native.py). */
#include "native.h"

#include <errno.h>
#include <unistd.h>

#define VLOG_HEADER 11
#define VLOG_MAGIC 0xA7

/* Check the record of ``length`` bytes at ``at`` of ``data`` against ``key``: NULL when it is
 * good (its value is the ``*value_len`` bytes at ``data + *value_at``), else the code of why it
 * is refused. Pure C: callable without the GIL. */
const char *vlog_check(const unsigned char *data, Py_ssize_t size, Py_ssize_t at,
                       Py_ssize_t length, const unsigned char *key, Py_ssize_t key_size,
                       Py_ssize_t *value_at, Py_ssize_t *value_len) {
    if (at < 0 || length < VLOG_HEADER || at > size || length > size - at) return "past-end";
    const unsigned char *p = data + at;
    if (p[0] != VLOG_MAGIC) return "bad-magic";
    Py_ssize_t key_len = (Py_ssize_t)p[1] << 8 | p[2];
    Py_ssize_t vlen = (Py_ssize_t)read_be32(p + 3);
    if (VLOG_HEADER + key_len + vlen != length) return "bad-length";
    uint32_t crc = crc32_update(crc32_update(0, p, 7), p + VLOG_HEADER,
                                (size_t)(length - VLOG_HEADER));
    if (crc != read_be32(p + 7)) return "bad-crc";
    if (key_len != key_size || memcmp(p + VLOG_HEADER, key, (size_t)key_len) != 0)
        return "other-key";
    *value_at = at + VLOG_HEADER + key_len;
    *value_len = vlen;
    return NULL;
}

/* The record's value (new reference), or the str code of why it is refused. */
PyObject *vlog_parse_one(const unsigned char *data, Py_ssize_t size, Py_ssize_t at,
                         Py_ssize_t length, PyObject *key) {
    Py_ssize_t value_at = 0, value_len = 0;
    const char *code = vlog_check(data, size, at, length,
                                  (const unsigned char *)PyBytes_AS_STRING(key),
                                  PyBytes_GET_SIZE(key), &value_at, &value_len);
    if (code != NULL) return PyUnicode_FromString(code);
    return PyBytes_FromStringAndSize((const char *)data + value_at, value_len);
}

/* vlog_parse(data, items) -> list: ``items`` is a list of (at, length, key bytes); each result
 * is the record's value bytes, or a str code (past-end, bad-magic, bad-length, bad-crc,
 * other-key). */
PyObject *vlog_parse(PyObject *self, PyObject *args) {
    Py_buffer buf;
    PyObject *items;
    if (!PyArg_ParseTuple(args, "y*O!", &buf, &PyList_Type, &items)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *out = PyList_New(n);
    if (out == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        Py_ssize_t at, length;
        PyObject *key;
        if (!PyTuple_Check(item) ||
            !PyArg_ParseTuple(item, "nnO!", &at, &length, &PyBytes_Type, &key)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "vlog_parse: items are (at, length, key)");
            goto fail;
        }
        PyObject *res = vlog_parse_one(buf.buf, buf.len, at, length, key);
        if (res == NULL) goto fail;
        PyList_SET_ITEM(out, i, res);
    }
    PyBuffer_Release(&buf);
    return out;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    return NULL;
}

/* vlog_frame(keys, values) -> (bytes, list of record lengths): the records of consecutive
 * (key, value) pairs laid out back to back, as segments.frame_many_py builds them. */
PyObject *vlog_frame(PyObject *self, PyObject *args) {
    PyObject *keys, *values;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &keys, &PyList_Type, &values)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(values) != n) {
        PyErr_SetString(PyExc_ValueError, "vlog_frame: keys and values differ in length");
        return NULL;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i), *v = PyList_GET_ITEM(values, i);
        if (!PyBytes_Check(k) || !PyBytes_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "vlog_frame: keys and values must be bytes");
            return NULL;
        }
        if (PyBytes_GET_SIZE(k) > 0xFFFF || PyBytes_GET_SIZE(v) > 0xFFFFFFFFLL) {
            PyErr_SetString(PyExc_ValueError, "vlog_frame: key or value too long for a record");
            return NULL;
        }
        total += VLOG_HEADER + PyBytes_GET_SIZE(k) + PyBytes_GET_SIZE(v);
    }
    PyObject *blob = PyBytes_FromStringAndSize(NULL, total);
    PyObject *lengths = PyList_New(n);
    if (blob == NULL || lengths == NULL) {
        Py_XDECREF(blob);
        Py_XDECREF(lengths);
        return NULL;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(blob);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i), *v = PyList_GET_ITEM(values, i);
        Py_ssize_t kl = PyBytes_GET_SIZE(k), vl = PyBytes_GET_SIZE(v);
        p[0] = VLOG_MAGIC;
        p[1] = (unsigned char)(kl >> 8);
        p[2] = (unsigned char)kl;
        put32(p + 3, (uint32_t)vl);
        memcpy(p + VLOG_HEADER, PyBytes_AS_STRING(k), (size_t)kl);
        memcpy(p + VLOG_HEADER + kl, PyBytes_AS_STRING(v), (size_t)vl);
        put32(p + 7, crc32_update(crc32_update(0, p, 7), p + VLOG_HEADER, (size_t)(kl + vl)));
        PyObject *len = PyLong_FromSsize_t(VLOG_HEADER + kl + vl);
        if (len == NULL) {
            Py_DECREF(blob);
            Py_DECREF(lengths);
            return NULL;
        }
        PyList_SET_ITEM(lengths, i, len);
        p += VLOG_HEADER + kl + vl;
    }
    PyObject *out = PyTuple_Pack(2, blob, lengths);
    Py_DECREF(blob);
    Py_DECREF(lengths);
    return out;
}

int pread_full(int fd, unsigned char *buf, Py_ssize_t length, long long offset,
               Py_ssize_t *got) {
    *got = 0;
    while (*got < length) {
        ssize_t k = pread(fd, buf + *got, length - *got, (off_t)(offset + *got));
        if (k < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (k == 0) break; /* the file ends here */
        *got += k;
    }
    return 0;
}

/* drop_pointers(changes, index_values) -> int: for every index value that is a pointer
 * (version byte, at least POINTER_SIZE bytes), one record and its length leave its segment:
 * ``changes[segment]`` (a list [count, bytes]) goes down by 1 and by the length, made as
 * [-1, -length] when absent. None and inline values are skipped. Returns how many pointers it
 * dropped. Reference: drop_pointers_py in rocks_timer/timer/rocksdb/transaction.py
 * (tests/engines/rocksdb/test_segments_native.py). */

static int add_to(PyObject *entry, Py_ssize_t at, long long delta) {
    PyObject *old = PyList_GET_ITEM(entry, at);
    PyObject *step = PyLong_FromLongLong(delta);
    if (step == NULL) return -1;
    PyObject *sum = PyNumber_Add(old, step);
    Py_DECREF(step);
    if (sum == NULL) return -1;
    PyList_SET_ITEM(entry, at, sum);
    Py_DECREF(old);
    return 0;
}

PyObject *drop_pointers(PyObject *self, PyObject *args) {
    PyObject *changes, *values;
    if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &changes, &values)) return NULL;
    PyObject *seq = PySequence_Fast(values, "drop_pointers: index values must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), dropped = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    /* runs of the same segment are summed in C and added to its entry once */
    long long seg = -1, count = 0, bytes = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        long long this_seg = -1, length = 0;
        if (i < n) {
            PyObject *v = items[i];
            if (v == Py_None) continue;
            if (!PyBytes_Check(v)) {
                PyErr_SetString(PyExc_TypeError, "drop_pointers: index values must be bytes");
                goto fail;
            }
            const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(v);
            if (PyBytes_GET_SIZE(v) < POINTER_SIZE || p[0] != POINTER_VERSION) continue;
            this_seg = read_be32(p + 1);
            length = read_be32(p + 13);
            dropped++;
            if (this_seg == seg) {
                count++;
                bytes += length;
                continue;
            }
        }
        if (seg >= 0) { /* flush the run of ``seg`` */
            PyObject *key = PyLong_FromLongLong(seg);
            if (key == NULL) goto fail;
            PyObject *entry = PyDict_GetItemWithError(changes, key);
            if (entry == NULL) {
                if (PyErr_Occurred()) { Py_DECREF(key); goto fail; }
                entry = Py_BuildValue("[LL]", -count, -bytes);
                int bad = entry == NULL || PyDict_SetItem(changes, key, entry) < 0;
                Py_XDECREF(entry);
                Py_DECREF(key);
                if (bad) goto fail;
            } else {
                Py_DECREF(key);
                if (!PyList_Check(entry) || PyList_GET_SIZE(entry) != 2) {
                    PyErr_SetString(PyExc_TypeError, "drop_pointers: entries must be [count, bytes]");
                    goto fail;
                }
                if (add_to(entry, 0, -count) < 0 || add_to(entry, 1, -bytes) < 0) goto fail;
            }
        }
        seg = this_seg;
        count = 1;
        bytes = length;
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(dropped);
fail:
    Py_DECREF(seq);
    return NULL;
}
