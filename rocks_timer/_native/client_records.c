/* client_records: a pulled page's CommitLog records in the V1 layout RocketMQ 4.x clients
 * decode, in one buffer. Reference: client_records_py in rocks_timer/remoting/records.py (same
 * bytes, same errors; tests/fronts/test_remoting_records.py).
 *
 * client_records(blob, index, host, port) -> bytes
 *
 * ``blob`` and ``index`` are what PulledBatch.records() gives (read_records' buffer and its
 * rows of ROW_FIELDS native int64). Each record is copied whole, in row order, and five fields
 * are set for the client: bodyCRC (byte 8) = CRC32 of the body & 0x7FFFFFFF (rtimer's own CRC
 * covers the whole record), sysFlag (36) = 0, bornHost (48) = host:0, storeHost (64) =
 * host:port (where a client sends CONSUMER_SEND_MSG_BACK), preparedTransactionOffset (76) = 0.
 * The rows are checked against the buffer first (ValueError). The copies and CRCs run with the
 * GIL released only for a large page: a usual pull (32 records) takes microseconds, while a
 * thread that gives the GIL up waits up to a switch interval (5 ms) to get it back when another
 * thread (the deliverer) is busy in Python, and the front's event loop would wait with it. */
#include "native.h"

#define ROW_FIELDS 9
#define RELEASE_GIL_FROM (1 << 20) /* bytes: below this the copy keeps the GIL */

static void put32_at(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

PyObject *client_records(PyObject *self, PyObject *args) {
    Py_buffer blob, index, host;
    long port;
    if (!PyArg_ParseTuple(args, "y*y*y*l", &blob, &index, &host, &port)) return NULL;
    PyObject *out = NULL;
    if (host.len != 4) {
        PyErr_Format(PyExc_ValueError, "host must be 4 bytes, not %zd", host.len);
        goto done;
    }
    if (port < 0 || port > 65535) {
        PyErr_Format(PyExc_ValueError, "port %ld is outside 0..65535", port);
        goto done;
    }
    Py_ssize_t n_int = index.len / (Py_ssize_t)sizeof(int64_t);
    if (index.len % (Py_ssize_t)sizeof(int64_t) || n_int % ROW_FIELDS) {
        PyErr_Format(PyExc_ValueError, "the index holds %zd int64, not whole rows of %d",
                     n_int, ROW_FIELDS);
        goto done;
    }
    const int64_t *rows = (const int64_t *)index.buf;
    Py_ssize_t n = n_int / ROW_FIELDS, total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *r = rows + i * ROW_FIELDS;
        int64_t at = r[1], size = r[2], body_at = r[3], body_len = r[4];
        if (size < RECORD_FIXED_SIZE || at < 0 || at + size > blob.len || body_at < at + 88
                || body_len < 0 || body_at + body_len > at + size) {
            PyErr_Format(PyExc_ValueError, "index row %zd does not fit the buffer", i);
            goto done;
        }
        total += (Py_ssize_t)size;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) goto done;
    unsigned char *dst = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *src = (const unsigned char *)blob.buf;
    const unsigned char *h = (const unsigned char *)host.buf;
    PyThreadState *released = total >= RELEASE_GIL_FROM ? PyEval_SaveThread() : NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *r = rows + i * ROW_FIELDS;
        int64_t at = r[1], size = r[2], body_at = r[3], body_len = r[4];
        memcpy(dst, src + at, (size_t)size);
        put32_at(dst + 8, crc32_update(0, src + body_at, (size_t)body_len) & 0x7FFFFFFFu);
        memset(dst + 36, 0, 4);
        memcpy(dst + 48, h, 4);
        memset(dst + 52, 0, 4);
        memcpy(dst + 64, h, 4);
        put32_at(dst + 68, (uint32_t)port);
        memset(dst + 76, 0, 8);
        dst += size;
    }
    if (released != NULL) PyEval_RestoreThread(released);
done:
    PyBuffer_Release(&blob);
    PyBuffer_Release(&index);
    PyBuffer_Release(&host);
    return out;
}
