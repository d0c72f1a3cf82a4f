/* Native group encoder for the CommitLog writer (optional; record.py falls back to numpy).
 *
 * encode(bodies, topics, props, queue_ids, flags, queue_offsets, born_ms, reconsume, start,
 *        store_ms) -> (bytearray, sizes)
 *
 * Produces exactly the bytes of record.encode_record for each message, back to back, the first
 * at CommitLog offset ``start``: RocketMQ's V1 layout with a CRC32 (IEEE, as zlib.crc32) of every
 * byte after the crc field. ``topics`` are the cached length-prefixed topic bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MESSAGE_MAGIC 0xDAA320A7u
#define HEADER_SIZE 88 /* 84 fixed bytes + the 4-byte body length */
#define CRC_FROM 12

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc32_bytes(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
            crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static inline unsigned char *put32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
    return p + 4;
}

static inline unsigned char *put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    return put32(p + 4, (uint32_t)v);
}

static const unsigned char LOCALHOST[8] = {127, 0, 0, 1, 0, 0, 0x2A, 0x9F}; /* 127.0.0.1:10911 */

static int long_at(PyObject *list, Py_ssize_t i, long long *out) {
    *out = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *encode(PyObject *self, PyObject *args) {
    PyObject *bodies, *topics, *props, *qids, *flags, *qoffs, *borns, *recons;
    long long start, store_ms;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!O!LL", &PyList_Type, &bodies, &PyList_Type,
                          &topics, &PyList_Type, &props, &PyList_Type, &qids, &PyList_Type,
                          &flags, &PyList_Type, &qoffs, &PyList_Type, &borns, &PyList_Type,
                          &recons, &start, &store_ms))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(bodies);
    PyObject *lists[7] = {topics, props, qids, flags, qoffs, borns, recons};
    for (int k = 0; k < 7; k++)
        if (PyList_GET_SIZE(lists[k]) != n) {
            PyErr_SetString(PyExc_ValueError, "encode: every list must have the same length");
            return NULL;
        }
    PyObject *sizes = PyList_New(n);
    if (sizes == NULL) return NULL;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyList_GET_ITEM(bodies, i), *t = PyList_GET_ITEM(topics, i),
                 *p = PyList_GET_ITEM(props, i);
        if (!PyBytes_Check(b) || !PyBytes_Check(t) || !PyBytes_Check(p)) {
            Py_DECREF(sizes);
            PyErr_SetString(PyExc_TypeError, "encode: bodies, topics and props must be bytes");
            return NULL;
        }
        if (PyBytes_GET_SIZE(p) > 65535) {
            Py_DECREF(sizes);
            PyErr_SetString(PyExc_ValueError, "encode: properties longer than 65535 bytes");
            return NULL;
        }
        Py_ssize_t size = HEADER_SIZE + PyBytes_GET_SIZE(b) + PyBytes_GET_SIZE(t) + 2 +
                          PyBytes_GET_SIZE(p);
        PyList_SET_ITEM(sizes, i, PyLong_FromSsize_t(size));
        total += size;
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, total);
    if (out == NULL) { Py_DECREF(sizes); return NULL; }
    unsigned char *base = (unsigned char *)PyByteArray_AS_STRING(out), *w = base;
    long long position = start;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long qid, flag, qoff, born, recon;
        if (long_at(qids, i, &qid) || long_at(flags, i, &flag) || long_at(qoffs, i, &qoff) ||
            long_at(borns, i, &born) || long_at(recons, i, &recon)) {
            Py_DECREF(out); Py_DECREF(sizes);
            return NULL;
        }
        PyObject *b = PyList_GET_ITEM(bodies, i), *t = PyList_GET_ITEM(topics, i),
                 *p = PyList_GET_ITEM(props, i);
        Py_ssize_t blen = PyBytes_GET_SIZE(b), tlen = PyBytes_GET_SIZE(t),
                   plen = PyBytes_GET_SIZE(p);
        Py_ssize_t size = HEADER_SIZE + blen + tlen + 2 + plen;
        unsigned char *r = w;
        w = put32(w, (uint32_t)size);
        w = put32(w, MESSAGE_MAGIC);
        w += 4; /* crc, below */
        w = put32(w, (uint32_t)qid);
        w = put32(w, (uint32_t)flag);
        w = put64(w, (uint64_t)qoff);
        w = put64(w, (uint64_t)position);
        w = put32(w, 0); /* sysFlag */
        w = put64(w, (uint64_t)born);
        memcpy(w, LOCALHOST, 8); w += 8;
        w = put64(w, (uint64_t)store_ms);
        memcpy(w, LOCALHOST, 8); w += 8;
        w = put32(w, (uint32_t)recon);
        w = put64(w, 0); /* preparedTransactionOffset */
        w = put32(w, (uint32_t)blen);
        memcpy(w, PyBytes_AS_STRING(b), blen); w += blen;
        memcpy(w, PyBytes_AS_STRING(t), tlen); w += tlen;
        *w++ = (unsigned char)(plen >> 8);
        *w++ = (unsigned char)plen;
        memcpy(w, PyBytes_AS_STRING(p), plen); w += plen;
        put32(r + 8, crc32_bytes(r + CRC_FROM, (size_t)(size - CRC_FROM)));
        position += size;
    }
    PyObject *result = PyTuple_Pack(2, out, sizes);
    Py_DECREF(out);
    Py_DECREF(sizes);
    return result;
}

static PyObject *crc32(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = crc32_bytes(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS, "Encode consecutive CommitLog records into one bytearray."},
    {"crc32", crc32, METH_O, "CRC32 (IEEE, as zlib.crc32) of a bytes-like object."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "groupenc", NULL, -1, methods};

PyMODINIT_FUNC PyInit_groupenc(void) {
    crc_init();
    return PyModule_Create(&module);
}
