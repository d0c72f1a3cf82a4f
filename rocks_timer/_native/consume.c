/* read_records: a consumer's page of CommitLog records, read and checked in one call.
 * Reference: read_records_py in rocks_timer/consume_read.py (same results,
 * tests/log/test_consume_native.py).
 *
 * read_records(entries, starts, fds, written) -> (blob, index, problems)
 *
 * ``entries`` holds packed ConsumeQueue entries (20 bytes each, big-endian: CommitLog offset 8,
 * size 4, tags code 8); the CommitLog's segments are given as three lists of the same length,
 * in offset order: each segment's first offset, its file descriptor and the bytes written in it.
 * Every entry whose offset lies in a segment and whose size fits in it gets a slot of ``size``
 * bytes in ``blob``, in entry order (entries that are next to each other in the CommitLog are
 * read with one pread; all reads and checks run with the GIL released). A record that passes
 * every check ``decode_record`` makes (size, magic, CRC32 of every byte after the crc field,
 * lengths that add up, UTF-8 topic and properties) gets one row of ``index``: ROW_FIELDS
 * native int64 (entry number, record position in blob, record size, body position and length,
 * topic position and length, properties position and length). ``problems`` lists the others as
 * (entry number, code): ``outside`` (not in the log: CommitLog.read's KeyError) or ``corrupt``.
 * Nothing per message is a Python object: the caller slices what a consumer asks for. */
#include <errno.h>

#include "native.h"

#define ENTRY_SIZE 20
#define ROW_FIELDS 9
#define CRC_FROM 12
#define HEADER_SIZE 84

enum { OK = 0, OUTSIDE = 1, CORRUPT = 2 };

typedef struct {
    long long offset;
    Py_ssize_t size, seg, at, got;
    int status;
} rec_t;

/* Strict UTF-8 as Python's decoder takes it: no overlong forms, no surrogates, at most
 * U+10FFFF. */
static int utf8_ok(const unsigned char *p, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c < 0x80) { i++; continue; }
        Py_ssize_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) { need = 2; lo = 0xA0; }
        else if (c == 0xED) { need = 2; hi = 0x9F; }
        else if (c >= 0xE1 && c <= 0xEF) need = 2;
        else if (c == 0xF0) { need = 3; lo = 0x90; }
        else if (c == 0xF4) { need = 3; hi = 0x8F; }
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        else return 0;
        if (i + need >= n) return 0;
        if (p[i + 1] < lo || p[i + 1] > hi) return 0;
        for (Py_ssize_t k = 2; k <= need; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xBF) return 0;
        i += need + 1;
    }
    return 1;
}

/* The checks of decode_record on one record of ``got`` bytes read for an entry of ``size``;
 * fills the row's positions (relative to the record) when it passes. */
static int check_record(const unsigned char *d, Py_ssize_t size, Py_ssize_t got, int64_t *row) {
    if (got < size || size < RECORD_FIXED_SIZE) return CORRUPT;
    if ((int32_t)read_be32(d) != size || read_be32(d + 4) != RECORD_MAGIC) return CORRUPT;
    if (crc32_update(0, d + CRC_FROM, (size_t)(size - CRC_FROM)) != read_be32(d + 8))
        return CORRUPT;
    int32_t body_len = (int32_t)read_be32(d + HEADER_SIZE);
    if (body_len < 0) return CORRUPT;
    Py_ssize_t pos = HEADER_SIZE + 4 + (Py_ssize_t)body_len;
    if (pos + 1 > size) return CORRUPT;
    Py_ssize_t topic_len = d[pos];
    Py_ssize_t props_at = pos + 1 + topic_len;
    if (props_at + 2 > size) return CORRUPT;
    Py_ssize_t props_len = (Py_ssize_t)d[props_at] << 8 | d[props_at + 1];
    if (props_at + 2 + props_len != size) return CORRUPT;
    if (!utf8_ok(d + pos + 1, topic_len) || !utf8_ok(d + props_at + 2, props_len)) return CORRUPT;
    row[3] = HEADER_SIZE + 4;
    row[4] = body_len;
    row[5] = pos + 1;
    row[6] = topic_len;
    row[7] = props_at + 2;
    row[8] = props_len;
    return OK;
}

/* Reads (merging neighbours) and checks; 0 or the errno of a failed read. No Python object is
 * touched: call without the GIL. */
static int read_and_check(rec_t *r, Py_ssize_t n, const int *fds, unsigned char *buf,
                          int64_t *rows, Py_ssize_t *ok) {
    for (Py_ssize_t i = 0; i < n;) {
        if (r[i].status != OK) { i++; continue; }
        Py_ssize_t j = i + 1, length = r[i].size;
        while (j < n && r[j].status == OK && r[j].seg == r[i].seg &&
               r[j].offset == r[j - 1].offset + r[j - 1].size) {
            length += r[j].size;
            j++;
        }
        Py_ssize_t got = 0;
        int err = pread_full(fds[r[i].seg], buf + r[i].at, length, r[i].offset, &got);
        if (err) return err;
        if (got < length) memset(buf + r[i].at + got, 0, (size_t)(length - got));
        for (Py_ssize_t k = i; k < j; k++) {
            Py_ssize_t before = r[k].at - r[i].at;
            r[k].got = got <= before ? 0 : (got - before < r[k].size ? got - before : r[k].size);
        }
        i = j;
    }
    *ok = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (r[i].status != OK) continue;
        int64_t *row = rows + ROW_FIELDS * *ok;
        r[i].status = check_record(buf + r[i].at, r[i].size, r[i].got, row);
        if (r[i].status != OK) continue;
        row[0] = i;
        row[1] = r[i].at;
        row[2] = r[i].size;
        for (int f = 3; f <= 7; f += 2) row[f] += r[i].at;
        (*ok)++;
    }
    return 0;
}

static int long_list(PyObject *list, Py_ssize_t n, long long *out, const char *what) {
    if (!PyList_Check(list) || PyList_GET_SIZE(list) != n) {
        PyErr_Format(PyExc_ValueError, "read_records: %s must be a list like starts", what);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
        if (out[i] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

PyObject *read_records(PyObject *self, PyObject *args) {
    Py_buffer entries;
    PyObject *starts_l, *fds_l, *written_l;
    if (!PyArg_ParseTuple(args, "y*O!OO", &entries, &PyList_Type, &starts_l, &fds_l, &written_l))
        return NULL;
    PyObject *result = NULL, *blob = NULL, *index = NULL, *problems = NULL;
    long long *starts = NULL, *written = NULL, *fdl = NULL;
    int *fds = NULL;
    rec_t *r = NULL;
    Py_ssize_t nseg = PyList_GET_SIZE(starts_l), n = entries.len / ENTRY_SIZE;
    if (entries.len % ENTRY_SIZE) {
        PyErr_SetString(PyExc_ValueError, "read_records: entries are not whole 20-byte entries");
        goto done;
    }
    starts = PyMem_Calloc(nseg + 1, sizeof(long long));
    written = PyMem_Calloc(nseg + 1, sizeof(long long));
    fdl = PyMem_Calloc(nseg + 1, sizeof(long long));
    fds = PyMem_Calloc(nseg + 1, sizeof(int));
    r = PyMem_Calloc(n + 1, sizeof(rec_t));
    if (!starts || !written || !fdl || !fds || !r) { PyErr_NoMemory(); goto done; }
    if (long_list(starts_l, nseg, starts, "starts") < 0 || long_list(fds_l, nseg, fdl, "fds") < 0 ||
        long_list(written_l, nseg, written, "written") < 0)
        goto done;
    for (Py_ssize_t s = 0; s < nseg; s++) fds[s] = (int)fdl[s];
    const unsigned char *e = entries.buf;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        rec_t *x = &r[i];
        x->offset = (long long)((uint64_t)read_be32(e + ENTRY_SIZE * i) << 32 |
                                read_be32(e + ENTRY_SIZE * i + 4));
        x->size = (int32_t)read_be32(e + ENTRY_SIZE * i + 8);
        /* CommitLog.read: the segment that starts at or before the offset (bisect_right - 1) */
        Py_ssize_t lo = 0, hi = nseg;
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            if (x->offset < starts[mid]) hi = mid; else lo = mid + 1;
        }
        x->seg = lo - 1;
        if (x->seg < 0 || x->offset >= starts[x->seg] + written[x->seg]) {
            x->status = OUTSIDE;
            continue;
        }
        long long inside = x->offset - starts[x->seg];
        if (x->size < RECORD_FIXED_SIZE || inside + x->size > written[x->seg]) {
            x->status = CORRUPT;
            continue;
        }
        x->offset = inside;
        x->at = total;
        total += x->size;
    }
    if ((blob = PyBytes_FromStringAndSize(NULL, total)) == NULL ||
        (index = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(ROW_FIELDS * sizeof(int64_t)) * n))
            == NULL)
        goto done;
    unsigned char *buf = (unsigned char *)PyBytes_AS_STRING(blob); /* not shared yet */
    int64_t *rows = (int64_t *)PyBytes_AS_STRING(index);
    Py_ssize_t ok = 0;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = read_and_check(r, n, fds, buf, rows, &ok);
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    if (_PyBytes_Resize(&index, (Py_ssize_t)(ROW_FIELDS * sizeof(int64_t)) * ok) < 0) goto done;
    if ((problems = PyList_New(0)) == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (r[i].status == OK) continue;
        PyObject *item = Py_BuildValue("(ns)", i, r[i].status == OUTSIDE ? "outside" : "corrupt");
        if (item == NULL || PyList_Append(problems, item) < 0) { Py_XDECREF(item); goto done; }
        Py_DECREF(item);
    }
    result = PyTuple_Pack(3, blob, index, problems);
done:
    PyBuffer_Release(&entries);
    PyMem_Free(starts);
    PyMem_Free(written);
    PyMem_Free(fdl);
    PyMem_Free(fds);
    PyMem_Free(r);
    Py_XDECREF(blob);
    Py_XDECREF(index);
    Py_XDECREF(problems);
    return result;
}
