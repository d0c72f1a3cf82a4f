/* Value-segment reads of the vlog layout. Reference: parse_run_py in
 * rocks_timer/timer/rocksdb/segments.py (same results, tests/test_segments_native.py). */
#include "native.h"

#define VLOG_HEADER 11
#define VLOG_MAGIC 0xA7

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* The record of ``length`` bytes at ``at`` of ``data``: its value (new reference), or the
 * interned-free str code of why it is refused. */
static PyObject *parse_one(const unsigned char *data, Py_ssize_t size, Py_ssize_t at,
                           Py_ssize_t length, PyObject *key) {
    if (at < 0 || length < VLOG_HEADER || at > size || length > size - at)
        return PyUnicode_FromString("past-end");
    const unsigned char *p = data + at;
    if (p[0] != VLOG_MAGIC) return PyUnicode_FromString("bad-magic");
    Py_ssize_t key_len = (Py_ssize_t)p[1] << 8 | p[2];
    Py_ssize_t value_len = (Py_ssize_t)get32(p + 3);
    if (VLOG_HEADER + key_len + value_len != length) return PyUnicode_FromString("bad-length");
    uint32_t crc = crc32_update(crc32_update(0, p, 7), p + VLOG_HEADER,
                                (size_t)(length - VLOG_HEADER));
    if (crc != get32(p + 7)) return PyUnicode_FromString("bad-crc");
    if (key_len != PyBytes_GET_SIZE(key) ||
        memcmp(p + VLOG_HEADER, PyBytes_AS_STRING(key), (size_t)key_len) != 0)
        return PyUnicode_FromString("other-key");
    return PyBytes_FromStringAndSize((const char *)p + VLOG_HEADER + key_len, value_len);
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
        PyObject *res = parse_one(buf.buf, buf.len, at, length, key);
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
