/* Scheduling into the RocksDB timer store (reference: rocks_timer/timer/schedule_codec.py).
 *
 * encode_schedule(records, floor_ms, threshold, compress) -> (keys, values, key_dues, handles)
 *                                                            or None
 *
 * For each TimerRecord(due_ms, message): the key due time max(due_ms, floor_ms), the timer key
 * (rocks_timer/timer/keys.py), the value (rocks_timer/timer/values.py; the body lz4-compressed
 * when it is longer than ``threshold`` bytes and that makes it shorter) and the
 * cancel handle (rocks_timer/timer/handles.py). Returns None, having stored nothing anywhere,
 * when a record is out of the ordinary (no or malformed id, a field out of range, a topic the
 * key or handle cannot hold): the Python reference then raises the error that names it.
 */
#include <dlfcn.h>

#include "native.h"

/* The system's liblz4 (a dependency of systemd, so on every Debian machine), when it loads:
 * LZ4_compress_default is what lz4.block.compress(body, store_size=False) runs, called here
 * without a Python call and without building a result that is thrown away when the body does
 * not shrink. Otherwise ``compress`` (that Python function) is called. */
typedef int (*lz4_compress_fn)(const char *src, char *dst, int src_size, int dst_capacity);
static lz4_compress_fn lz4_compress;

void timer_init(void) {
    void *lib = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL) lz4_compress = (lz4_compress_fn)dlsym(lib, "LZ4_compress_default");
}

/* ``body`` lz4-compressed if that makes it shorter, else ``body`` itself (new references);
 * NULL with an exception set on failure. */
static PyObject *maybe_compress(PyObject *body, PyObject *compress, int *compressed) {
    Py_ssize_t n = PyBytes_GET_SIZE(body);
    *compressed = 0;
    if (lz4_compress == NULL || n > INT32_MAX) {
        PyObject *packed = PyObject_CallOneArg(compress, body);
        if (packed == NULL) return NULL;
        if (PyBytes_Check(packed) && PyBytes_GET_SIZE(packed) < n) {
            *compressed = 1;
            return packed;
        }
        Py_DECREF(packed);
        return Py_NewRef(body);
    }
    char stack[4096], *dst = n - 1 <= (Py_ssize_t)sizeof(stack) ? stack : PyMem_Malloc(n - 1);
    if (dst == NULL) return PyErr_NoMemory();
    /* a capacity of n - 1 makes LZ4 give up (0) as soon as the output would not be shorter */
    int packed = n > 1 ? lz4_compress(PyBytes_AS_STRING(body), dst, (int)n, (int)(n - 1)) : 0;
    PyObject *result = packed > 0 ? PyBytes_FromStringAndSize(dst, packed) : Py_NewRef(body);
    if (dst != stack) PyMem_Free(dst);
    *compressed = packed > 0 && result != NULL;
    return result;
}

#define VALUE_CODEC_VERSION 1
#define FLAG_LZ4 0x01
#define PRESENT_QUEUE_ID 0x01
#define PRESENT_BORN_MS 0x02
#define VALUE_HEADER 36
#define ID_BYTES 16

typedef struct {
    PyObject *body, *stored, *props; /* strong references */
    const char *topic, *msg_id;
    Py_ssize_t topic_len;
    uint64_t key_due;
    int64_t queue_id, flag, born_ms, reconsume;
    int present, flags;
} entry_t;

static void entry_clear(entry_t *e) {
    Py_CLEAR(e->body);
    Py_CLEAR(e->stored);
    Py_CLEAR(e->props);
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* 1 if loaded, 0 if the record needs the Python path, -1 on an error (exception set). The
 * message's own strings (topic, id) outlive the call: they are borrowed from its __dict__. */
static int load_entry(PyObject *record, entry_t *e, uint64_t floor_ms, Py_ssize_t threshold,
                      PyObject *compress) {
    int ok = -1;
    PyObject *due = NULL, *msg = NULL, *dict = NULL, *topic = NULL, *msg_id = NULL;
    if ((due = PyObject_GetAttr(record, S_due_ms)) == NULL) goto done;
    if ((msg = PyObject_GetAttr(record, S_message)) == NULL) goto done;
    if ((dict = PyObject_GenericGetDict(msg, NULL)) == NULL) goto done;
    int overflow = 0;
    long long due_ms = PyLong_Check(due) ? PyLong_AsLongLongAndOverflow(due, &overflow) : -1;
    if (due_ms == -1 && PyErr_Occurred()) goto done;
    ok = 0;
    if (overflow > 0) goto done; /* past 2**63: the reference names the range */
    e->key_due = overflow < 0 || due_ms < 0 || (uint64_t)due_ms < floor_ms ? floor_ms
                                                                           : (uint64_t)due_ms;
    ok = -1;
    if ((topic = field(msg, dict, S_topic, NULL)) == NULL) goto done;
    if ((msg_id = field(msg, dict, S_msg_id, NULL)) == NULL) goto done;
    ok = 0;
    if (!PyUnicode_Check(topic) || !PyUnicode_IS_ASCII(topic) || !PyUnicode_Check(msg_id) ||
        !PyUnicode_IS_ASCII(msg_id) || PyUnicode_GET_LENGTH(msg_id) != 2 * ID_BYTES)
        goto done;
    e->topic = (const char *)PyUnicode_DATA(topic);
    e->topic_len = PyUnicode_GET_LENGTH(topic);
    e->msg_id = (const char *)PyUnicode_DATA(msg_id);
    if (e->topic_len < 1 || e->topic_len > 255) goto done;
    for (int i = 0; i < 2 * ID_BYTES; i++)
        if (hex_value(e->msg_id[i]) < 0) goto done;
    ok = -1;
    if ((e->body = field(msg, dict, S_body, NULL)) == NULL) goto done;
    if ((e->props = Py_XNewRef(cached_props(dict))) == NULL) goto done;
    PyObject *value;
    if ((value = field(msg, dict, S_queue_id, NULL)) == NULL) goto done;
    e->present = value == Py_None ? 0 : PRESENT_QUEUE_ID;
    Py_DECREF(value);
    if ((value = field(msg, dict, S_born_ms, NULL)) == NULL) goto done;
    e->present |= value == Py_None ? 0 : PRESENT_BORN_MS;
    Py_DECREF(value);
    if (int_field(msg, dict, S_queue_id, 0, INT32_MIN, INT32_MAX, &e->queue_id) < 0 ||
        int_field(msg, dict, S_flag, 0, INT32_MIN, INT32_MAX, &e->flag) < 0 ||
        int_field(msg, dict, S_born_ms, 0, INT64_MIN, INT64_MAX, &e->born_ms) < 0 ||
        int_field(msg, dict, S_reconsume_times, 0, INT32_MIN, INT32_MAX, &e->reconsume) < 0) {
        PyErr_Clear(); /* not an int or out of range: the reference names the field */
        ok = 0;
        goto done;
    }
    if (!PyBytes_Check(e->body) || !PyBytes_Check(e->props) ||
        PyBytes_GET_SIZE(e->body) > UINT32_MAX || PyBytes_GET_SIZE(e->props) > UINT32_MAX) {
        ok = 0;
        goto done;
    }
    e->flags = 0;
    if (PyBytes_GET_SIZE(e->body) > threshold) {
        int compressed;
        if ((e->stored = maybe_compress(e->body, compress, &compressed)) == NULL) goto done;
        e->flags = compressed ? FLAG_LZ4 : 0;
    } else {
        e->stored = Py_NewRef(e->body);
    }
    ok = 1;
done:
    Py_XDECREF(due);
    Py_XDECREF(msg);
    Py_XDECREF(dict);
    Py_XDECREF(topic);
    Py_XDECREF(msg_id);
    if (ok < 1) entry_clear(e);
    return ok;
}

static PyObject *make_key(const entry_t *e) {
    PyObject *key = PyBytes_FromStringAndSize(NULL, 8 + 1 + e->topic_len + ID_BYTES);
    if (key == NULL) return NULL;
    unsigned char *w = put64((unsigned char *)PyBytes_AS_STRING(key), e->key_due);
    *w++ = (unsigned char)e->topic_len;
    memcpy(w, e->topic, e->topic_len);
    w += e->topic_len;
    for (int i = 0; i < ID_BYTES; i++)
        w[i] = (unsigned char)(hex_value(e->msg_id[2 * i]) << 4 | hex_value(e->msg_id[2 * i + 1]));
    return key;
}

static PyObject *make_value(const entry_t *e) {
    Py_ssize_t plen = PyBytes_GET_SIZE(e->props), slen = PyBytes_GET_SIZE(e->stored);
    PyObject *value = PyBytes_FromStringAndSize(NULL, VALUE_HEADER + e->topic_len + plen + slen);
    if (value == NULL) return NULL;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(value);
    *w++ = VALUE_CODEC_VERSION;
    *w++ = (unsigned char)e->flags;
    *w++ = (unsigned char)e->present;
    w = put32(w, (uint32_t)e->queue_id);
    w = put32(w, (uint32_t)e->flag);
    w = put64(w, (uint64_t)e->born_ms);
    w = put32(w, (uint32_t)e->reconsume);
    *w++ = (unsigned char)e->topic_len;
    w = put32(w, (uint32_t)plen);
    w = put32(w, (uint32_t)PyBytes_GET_SIZE(e->body));
    w = put32(w, (uint32_t)slen);
    memcpy(w, e->topic, e->topic_len);
    w += e->topic_len;
    memcpy(w, PyBytes_AS_STRING(e->props), plen);
    memcpy(w + plen, PyBytes_AS_STRING(e->stored), slen);
    return value;
}

/* base64url, no padding, of "v1 <topic> <key due> <msg id>". */
static PyObject *make_handle(const entry_t *e) {
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    char text[3 + 255 + 1 + 20 + 1 + 2 * ID_BYTES + 1];
    int n = snprintf(text, sizeof(text), "v1 %.*s %llu %.*s", (int)e->topic_len, e->topic,
                     (unsigned long long)e->key_due, 2 * ID_BYTES, e->msg_id);
    char out[(sizeof(text) * 4 + 2) / 3 + 1];
    Py_ssize_t o = 0;
    for (int i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)(unsigned char)text[i] << 16;
        if (i + 1 < n) v |= (uint32_t)(unsigned char)text[i + 1] << 8;
        if (i + 2 < n) v |= (unsigned char)text[i + 2];
        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[(v >> 12) & 63];
        if (i + 1 < n) out[o++] = alphabet[(v >> 6) & 63];
        if (i + 2 < n) out[o++] = alphabet[v & 63];
    }
    return PyUnicode_FromStringAndSize(out, o);
}

PyObject *encode_schedule(PyObject *self, PyObject *args) {
    PyObject *records, *compress;
    unsigned long long floor_ms;
    Py_ssize_t threshold;
    if (!PyArg_ParseTuple(args, "O!KnO", &PyList_Type, &records, &floor_ms, &threshold,
                          &compress))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(records);
    PyObject *keys = PyList_New(n), *values = PyList_New(n), *dues = PyList_New(n),
             *handles = PyList_New(n), *result = NULL;
    if (keys == NULL || values == NULL || dues == NULL || handles == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        entry_t e = {0};
        int loaded = load_entry(PyList_GET_ITEM(records, i), &e, floor_ms, threshold, compress);
        if (loaded < 0) goto done;
        if (loaded == 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        PyObject *key = make_key(&e), *value = make_value(&e), *handle = make_handle(&e),
                 *due = PyLong_FromUnsignedLongLong(e.key_due);
        entry_clear(&e);
        if (key == NULL || value == NULL || handle == NULL || due == NULL) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_XDECREF(handle);
            Py_XDECREF(due);
            goto done;
        }
        PyList_SET_ITEM(keys, i, key);
        PyList_SET_ITEM(values, i, value);
        PyList_SET_ITEM(handles, i, handle);
        PyList_SET_ITEM(dues, i, due);
    }
    result = PyTuple_Pack(4, keys, values, dues, handles);
done:
    Py_XDECREF(keys);
    Py_XDECREF(values);
    Py_XDECREF(dues);
    Py_XDECREF(handles);
    return result;
}
