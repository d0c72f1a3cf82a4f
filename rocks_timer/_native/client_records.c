/* client_records: a pulled page's CommitLog records in the V1 layout RocketMQ 4.x clients
 * decode, in one buffer. Reference: client_records_py and shown_properties in
 * rocks_timer/remoting/records.py (same bytes, same None, same errors;
 * tests/fronts/test_remoting_records.py).
 *
 * client_records(blob, index, host, port) -> bytes | None
 *
 * ``blob`` and ``index`` are what PulledBatch.records() gives (read_records' buffer and its
 * rows of ROW_FIELDS native int64). Each record is copied whole, in row order, and five fields
 * are set for the client: bodyCRC (byte 8) = CRC32 of the body & 0x7FFFFFFF (rtimer's own CRC
 * covers the whole record), sysFlag (36) = 0, bornHost (48) = host:0, storeHost (64) =
 * host:port (where a client sends CONSUMER_SEND_MSG_BACK), preparedTransactionOffset (76) = 0.
 * A record whose properties hold a CLIENT_UNIQ_KEY entry (the Java client's 56-digit ids, which
 * the front stores under a 32-digit UNIQ_KEY) gets that value shown as UNIQ_KEY and the entry
 * left out, its propsLen and totalSize changed to match; when the property string is not in
 * the form rtimer writes (see shown_properties), the whole page answers None and Python encodes
 * it message by message. The rows are checked against the buffer first (ValueError). The
 * copies and CRCs run with the GIL released only for a large page: a usual pull (32 records)
 * takes microseconds, while a thread that gives the GIL up waits up to a switch interval (5 ms)
 * to get it back when another thread (the deliverer) is busy in Python, and the front's event
 * loop would wait with it. */
#include "native.h"

#define ROW_FIELDS 9
#define RELEASE_GIL_FROM (1 << 20) /* bytes: below this the copy keeps the GIL */

#define MAX_RENAMED_ENTRIES 64 /* records.py's: a longer property string goes message by message */

static void put32_at(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static const unsigned char CLIENT_ENTRY[] = "CLIENT_UNIQ_KEY\x01"; /* 16 bytes */
static const unsigned char UNIQ_NAME[] = "UNIQ_KEY";               /* 8 bytes */
#define CLIENT_NAME_LEN 15
#define UNIQ_NAME_LEN 8

/* 1 when an entry of ``p`` (n bytes) starts with CLIENT_UNIQ_KEY and its separator. */
static int has_client_entry(const unsigned char *p, Py_ssize_t n) {
    Py_ssize_t s = 0;
    while (s < n) {
        if (n - s > CLIENT_NAME_LEN && memcmp(p + s, CLIENT_ENTRY, CLIENT_NAME_LEN + 1) == 0)
            return 1;
        const unsigned char *end = memchr(p + s, 0x02, (size_t)(n - s));
        if (end == NULL) return 0;
        s = (end - p) + 1;
    }
    return 0;
}

static int is_name(const unsigned char *p, Py_ssize_t len, const char *name, Py_ssize_t name_len) {
    return len == name_len && memcmp(p, name, (size_t)name_len) == 0;
}

/* KEYS as the reader leaves it: all spaces, or no space at either end and none doubled. */
static int keys_normalised(const unsigned char *v, Py_ssize_t len) {
    Py_ssize_t i;
    for (i = 0; i < len && v[i] == ' '; i++) {}
    if (i == len) return 1;
    if (v[0] == ' ' || v[len - 1] == ' ') return 0;
    for (i = 1; i < len; i++)
        if (v[i] == ' ' && v[i - 1] == ' ') return 0;
    return 1;
}

static unsigned char *put_uniq_key(unsigned char *w, const unsigned char *value, Py_ssize_t len) {
    memcpy(w, UNIQ_NAME, UNIQ_NAME_LEN);
    w += UNIQ_NAME_LEN;
    *w++ = 0x01;
    memcpy(w, value, (size_t)len);
    w += len;
    *w++ = 0x02;
    return w;
}

/* shown_properties of records.py: the client's property string for ``p`` (n bytes, which hold a
 * CLIENT_UNIQ_KEY entry) written at ``out`` (room for n bytes: the result is shorter); its
 * length, or -1 when the string is not in the form rtimer writes. */
static Py_ssize_t rename_client_key(const unsigned char *p, Py_ssize_t n, unsigned char *out) {
    Py_ssize_t name_at[MAX_RENAMED_ENTRIES], name_len[MAX_RENAMED_ENTRIES];
    Py_ssize_t value_at[MAX_RENAMED_ENTRIES], value_len[MAX_RENAMED_ENTRIES];
    int count = 0, client = -1, uniq = -1;
    Py_ssize_t s = 0;
    while (s < n) {
        const unsigned char *end = memchr(p + s, 0x02, (size_t)(n - s));
        if (end == NULL || count == MAX_RENAMED_ENTRIES) return -1;
        Py_ssize_t e = end - p;
        const unsigned char *sep = memchr(p + s, 0x01, (size_t)(e - s));
        if (sep == NULL) return -1;
        Py_ssize_t q = sep - p;
        if (q == s || q + 1 == e || memchr(p + q + 1, 0x01, (size_t)(e - q - 1)) != NULL)
            return -1;
        name_at[count] = s; name_len[count] = q - s;
        value_at[count] = q + 1; value_len[count] = e - q - 1;
        for (int j = 0; j < count; j++)
            if (name_len[j] == name_len[count]
                    && memcmp(p + name_at[j], p + s, (size_t)name_len[count]) == 0)
                return -1;
        if (is_name(p + s, q - s, "KEYS", 4) && !keys_normalised(p + q + 1, e - q - 1))
            return -1;
        if (is_name(p + s, q - s, (const char *)CLIENT_ENTRY, CLIENT_NAME_LEN)) client = count;
        if (is_name(p + s, q - s, (const char *)UNIQ_NAME, UNIQ_NAME_LEN)) uniq = count;
        count++;
        s = e + 1;
    }
    if (client < 0) return -1; /* not reached: the caller found the entry */
    unsigned char *w = out;
    for (int i = 0; i < count; i++) {
        if (i == client) continue;
        if (i == uniq) {
            w = put_uniq_key(w, p + value_at[client], value_len[client]);
        } else {
            Py_ssize_t len = name_len[i] + 1 + value_len[i] + 1;
            memcpy(w, p + name_at[i], (size_t)len);
            w += len;
        }
    }
    if (uniq < 0) w = put_uniq_key(w, p + value_at[client], value_len[client]);
    return w - out;
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
        int64_t props_at = r[7], props_len = r[8];
        if (size < RECORD_FIXED_SIZE || at < 0 || at + size > blob.len || body_at < at + 88
                || body_len < 0 || body_at + body_len > at + size
                || props_at < body_at + body_len + 3 || props_len < 0
                || props_at + props_len != at + size) {
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
    unsigned char *first = dst;
    int declined = 0;
    PyThreadState *released = total >= RELEASE_GIL_FROM ? PyEval_SaveThread() : NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *r = rows + i * ROW_FIELDS;
        int64_t at = r[1], size = r[2], body_at = r[3], body_len = r[4];
        int64_t props_at = r[7], props_len = r[8];
        if (has_client_entry(src + props_at, (Py_ssize_t)props_len)) {
            int64_t head = props_at - 2 - at; /* the record up to its propsLen */
            memcpy(dst, src + at, (size_t)head);
            Py_ssize_t shown = rename_client_key(src + props_at, (Py_ssize_t)props_len,
                                                 dst + head + 2);
            if (shown < 0) {
                declined = 1;
                break;
            }
            dst[head] = (unsigned char)(shown >> 8);
            dst[head + 1] = (unsigned char)shown;
            size = head + 2 + shown;
            put32_at(dst, (uint32_t)size);
        } else {
            memcpy(dst, src + at, (size_t)size);
        }
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
    if (declined) {
        Py_SETREF(out, Py_NewRef(Py_None));
    } else if (dst - first < total && _PyBytes_Resize(&out, dst - first) < 0) {
        out = NULL; /* _PyBytes_Resize freed it and set the error */
    }
done:
    PyBuffer_Release(&blob);
    PyBuffer_Release(&index);
    PyBuffer_Release(&host);
    return out;
}
