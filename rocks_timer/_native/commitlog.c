/* The CommitLog writer's hot path (reference: rocks_timer/batch_encoder.py, fileio.py).
 *
 * encode_batch(messages, first, start, limit, store_ms, assigned, lookup, schedule_tags)
 *     -> (count, data, meta, queues)
 *
 * Encodes messages[first:] as consecutive CommitLog records (RocketMQ's V1 layout, see
 * record.py), the first at CommitLog offset ``start``, stopping before the first record that
 * would end past ``limit``. Queue offsets come from ``assigned`` (the group's dict of
 * (topic, queue_id) -> next offset, updated on success), else from ``lookup(key)``. A record's
 * tags code is ``schedule_tags(msg)`` for SCHEDULE_TOPIC_XXXX and Java's String.hashCode of its
 * TAGS otherwise (0 without tags).
 *
 *   count   messages encoded;
 *   data    the records, back to back (bytes);
 *   meta    per message, native-endian (queue offset q, CommitLog offset q, size i, queue id i);
 *   queues  per (topic, queue_id) in order of first use: (key, first queue offset,
 *           ConsumeQueue entries packed big-endian (offset q, size i, tags q), record bytes).
 *
 * Message fields are read under the GIL; the copying and CRC32 run with the GIL released, so the
 * producers keep running while a group is encoded.
 */
#include <dlfcn.h>
#include <errno.h>
#include <unistd.h>

#include "native.h"

#define MESSAGE_MAGIC 0xDAA320A7u
#define FIXED_SIZE 91 /* 84-byte header + body length 4 + topic length 1 + properties length 2 */
#define CRC_FROM 12
#define CQ_ENTRY 20
#define META_ENTRY 24
#define SCHEDULE_TOPIC "SCHEDULE_TOPIC_XXXX"

/* -- CRC32 (IEEE, as zlib.crc32) --------------------------------------------------------------- */
typedef unsigned long (*zlib_crc32_fn)(unsigned long, const unsigned char *, unsigned int);
static zlib_crc32_fn zlib_crc32; /* the process's zlib (loaded by Python's zlib module) */
static uint32_t crc_table[8][256]; /* slicing-by-8, when zlib cannot be found */

void crc_init(void) {
    void *zlib = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (zlib != NULL) zlib_crc32 = (zlib_crc32_fn)dlsym(zlib, "crc32");
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc32_sliced(uint32_t seed, const unsigned char *p, size_t n) {
    uint32_t c = seed ^ 0xFFFFFFFFu;
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

uint32_t crc32_update(uint32_t seed, const unsigned char *p, size_t n) {
    if (zlib_crc32 == NULL || n > 0xFFFFFFFFu) return crc32_sliced(seed, p, n);
    return (uint32_t)zlib_crc32(seed, p, (unsigned int)n);
}

static uint32_t crc32_bytes(const unsigned char *p, size_t n) {
    return crc32_update(0, p, n);
}


/* -- one record per message ------------------------------------------------------------------- */
typedef struct {
    PyObject *body, *topic, *props; /* strong references, held while the GIL is released */
    PyObject *blob; /* a prepared record (record.prepare_record) instead of a message */
    int born_at_store; /* the prepared record's born time is the store time */
    const char *topic_utf8;
    Py_ssize_t topic_len, size, key;
    int32_t queue_id, flag, reconsume;
    int64_t born_ms, tags, queue_offset, position;
} record_t;

static void release(record_t *r) {
    Py_CLEAR(r->blob);
    Py_CLEAR(r->body);
    Py_CLEAR(r->topic);
    Py_CLEAR(r->props);
}

/* A prepared record: the size, queue id, topic and tags code it carries (see record.py). */
static int load_prepared(PyObject *blob, record_t *r) {
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(blob);
    Py_ssize_t len = PyBytes_GET_SIZE(blob);
    if (len < FIXED_SIZE + 9) goto bad;
    Py_ssize_t size = (int32_t)read_be32(b), body_len = (int32_t)read_be32(b + 84);
    if (size != len - 9 || body_len < 0 || 88 + body_len + 1 > size) goto bad;
    Py_ssize_t topic_len = b[88 + body_len];
    if (88 + body_len + 1 + topic_len + 2 > size) goto bad;
    const unsigned char *pl = b + 88 + body_len + 1 + topic_len;
    if (size != FIXED_SIZE + body_len + topic_len + ((Py_ssize_t)pl[0] << 8 | pl[1])) goto bad;
    r->blob = Py_NewRef(blob);
    r->size = size;
    r->queue_id = (int32_t)read_be32(b + 12);
    r->topic_utf8 = (const char *)b + 88 + body_len + 1;
    r->topic_len = topic_len;
    r->tags = (int64_t)((uint64_t)read_be32(b + size) << 32 | read_be32(b + size + 4));
    r->born_at_store = b[size + 8] & 0x01;
    return 0;
bad:
    PyErr_Format(PyExc_ValueError, "prepared record of %zd bytes: its lengths do not add up",
                 len);
    return -1;
}

static int load(PyObject *msg, record_t *r, int64_t store_ms, PyObject *schedule_tags) {
    int64_t v;
    if (PyBytes_CheckExact(msg)) return load_prepared(msg, r);
    PyObject *dict = PyObject_GenericGetDict(msg, NULL);
    if (dict == NULL) PyErr_Clear(); /* no __dict__: getattr for everything */
    int rc = -1;
    r->body = field(msg, dict, S_body, NULL);
    r->topic = r->body ? field(msg, dict, S_topic, NULL) : NULL;
    r->props = r->topic ? field(msg, dict, S_cached_props, S_props) : NULL;
    if (r->props == NULL) goto done;
    if (!PyBytes_Check(r->body) || !PyBytes_Check(r->props) || !PyUnicode_Check(r->topic)) {
        PyErr_SetString(PyExc_TypeError, "encode_batch: body and properties must be bytes and "
                                         "the topic a str");
        goto done;
    }
    if (PyBytes_GET_SIZE(r->props) > 65535) {
        PyErr_Format(PyExc_ValueError, "properties of %zd bytes exceed the limit of 65535 bytes",
                     PyBytes_GET_SIZE(r->props));
        goto done;
    }
    r->topic_utf8 = PyUnicode_AsUTF8AndSize(r->topic, &r->topic_len);
    if (r->topic_utf8 == NULL) goto done;
    if (r->topic_len > 127) {
        PyErr_Format(PyExc_ValueError, "topic %R is longer than 127 bytes", r->topic);
        goto done;
    }
    if (int_field(msg, dict, S_queue_id, 0, INT32_MIN, INT32_MAX, &v)) goto done;
    r->queue_id = (int32_t)v;
    if (int_field(msg, dict, S_flag, 0, INT32_MIN, INT32_MAX, &v)) goto done;
    r->flag = (int32_t)v;
    if (int_field(msg, dict, S_reconsume_times, 0, INT32_MIN, INT32_MAX, &v)) goto done;
    r->reconsume = (int32_t)v;
    if (int_field(msg, dict, S_born_ms, store_ms, INT64_MIN, INT64_MAX, &r->born_ms)) goto done;
    if (r->topic_len == sizeof(SCHEDULE_TOPIC) - 1 &&
        memcmp(r->topic_utf8, SCHEDULE_TOPIC, sizeof(SCHEDULE_TOPIC) - 1) == 0) {
        PyObject *code = PyObject_CallOneArg(schedule_tags, msg);
        if (code == NULL) goto done;
        r->tags = PyLong_AsLongLong(code);
        Py_DECREF(code);
        if (r->tags == -1 && PyErr_Occurred()) goto done;
    } else {
        PyObject *tags = field(msg, dict, S_tags, NULL);
        if (tags == NULL) goto done;
        r->tags = PyUnicode_Check(tags) ? java_hash(tags) : 0;
        Py_DECREF(tags);
    }
    r->size = FIXED_SIZE + PyBytes_GET_SIZE(r->body) + r->topic_len + PyBytes_GET_SIZE(r->props);
    rc = 0;
done:
    Py_XDECREF(dict);
    if (rc < 0) release(r);
    return rc;
}

/* -- per (topic, queue) state ------------------------------------------------------------------ */
typedef struct {
    PyObject *key; /* (topic, queue_id) */
    PyObject *topic; /* borrowed from key */
    const char *topic_utf8; /* the topic's UTF-8, owned by it */
    Py_ssize_t topic_len;
    int32_t queue_id;
    int64_t first, next;
    Py_ssize_t count, bytes;
} queue_t;

typedef struct {
    queue_t *items;
    Py_ssize_t n, cap;
} queues_t;

static void queues_free(queues_t *qs) {
    for (Py_ssize_t i = 0; i < qs->n; i++) Py_DECREF(qs->items[i].key);
    PyMem_Free(qs->items);
}

/* Index of the record's queue in ``qs``, adding it (offset from assigned or lookup) if new. */
static Py_ssize_t queue_of(queues_t *qs, record_t *r, PyObject *assigned, PyObject *lookup) {
    for (Py_ssize_t i = qs->n - 1; i >= 0; i--) { /* few queues per group: a linear scan */
        queue_t *q = &qs->items[i];
        if (q->queue_id == r->queue_id && q->topic_len == r->topic_len &&
            memcmp(q->topic_utf8, r->topic_utf8, r->topic_len) == 0)
            return i;
    }
    PyObject *key = r->topic ? Py_BuildValue("(Oi)", r->topic, r->queue_id)
                             : Py_BuildValue("(s#i)", r->topic_utf8, r->topic_len, r->queue_id);
    if (key == NULL) return -1;
    PyObject *next = PyDict_GetItemWithError(assigned, key);
    if (next != NULL) Py_INCREF(next);
    else if (!PyErr_Occurred()) next = PyObject_CallOneArg(lookup, key);
    long long offset = next ? PyLong_AsLongLong(next) : -1;
    Py_XDECREF(next);
    if (offset == -1 && PyErr_Occurred()) { Py_DECREF(key); return -1; }
    if (qs->n == qs->cap) {
        Py_ssize_t cap = qs->cap ? 2 * qs->cap : 4;
        queue_t *items = PyMem_Realloc(qs->items, cap * sizeof(queue_t));
        if (items == NULL) { Py_DECREF(key); PyErr_NoMemory(); return -1; }
        qs->items = items;
        qs->cap = cap;
    }
    PyObject *topic = PyTuple_GET_ITEM(key, 0);
    Py_ssize_t topic_len;
    const char *topic_utf8 = PyUnicode_AsUTF8AndSize(topic, &topic_len);
    if (topic_utf8 == NULL) { Py_DECREF(key); return -1; }
    qs->items[qs->n] = (queue_t){key, topic, topic_utf8, topic_len, r->queue_id, offset, offset,
                                 0, 0};
    return qs->n++;
}

/* -- the encoder ------------------------------------------------------------------------------- */
static void write_record(unsigned char *w, const record_t *r, int64_t store_ms) {
    unsigned char *start = w;
    if (r->blob != NULL) { /* prepared: copy, then fill in its place, store time and CRC */
        memcpy(w, PyBytes_AS_STRING(r->blob), r->size);
        put64(w + 20, (uint64_t)r->queue_offset);
        put64(w + 28, (uint64_t)r->position);
        put64(w + 56, (uint64_t)store_ms);
        if (r->born_at_store) put64(w + 40, (uint64_t)store_ms);
        put32(w + 8, crc32_bytes(w + CRC_FROM, (size_t)(r->size - CRC_FROM)));
        return;
    }
    Py_ssize_t blen = PyBytes_GET_SIZE(r->body), plen = PyBytes_GET_SIZE(r->props);
    w = put32(w, (uint32_t)r->size);
    w = put32(w, MESSAGE_MAGIC);
    w += 4; /* crc, below */
    w = put32(w, (uint32_t)r->queue_id);
    w = put32(w, (uint32_t)r->flag);
    w = put64(w, (uint64_t)r->queue_offset);
    w = put64(w, (uint64_t)r->position);
    w = put32(w, 0); /* sysFlag */
    w = put64(w, (uint64_t)r->born_ms);
    memcpy(w, LOCALHOST, 8); w += 8;
    w = put64(w, (uint64_t)store_ms);
    memcpy(w, LOCALHOST, 8); w += 8;
    w = put32(w, (uint32_t)r->reconsume);
    w = put64(w, 0); /* preparedTransactionOffset */
    w = put32(w, (uint32_t)blen);
    memcpy(w, PyBytes_AS_STRING(r->body), blen); w += blen;
    *w++ = (unsigned char)r->topic_len;
    memcpy(w, r->topic_utf8, r->topic_len); w += r->topic_len;
    *w++ = (unsigned char)(plen >> 8);
    *w++ = (unsigned char)plen;
    memcpy(w, PyBytes_AS_STRING(r->props), plen);
    put32(start + 8, crc32_bytes(start + CRC_FROM, (size_t)(r->size - CRC_FROM)));
}

static PyObject *build_meta(const record_t *recs, Py_ssize_t n) {
    PyObject *meta = PyBytes_FromStringAndSize(NULL, n * META_ENTRY);
    if (meta == NULL) return NULL;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(meta);
    for (Py_ssize_t i = 0; i < n; i++, w += META_ENTRY) {
        int32_t size = (int32_t)recs[i].size;
        memcpy(w, &recs[i].queue_offset, 8);
        memcpy(w + 8, &recs[i].position, 8);
        memcpy(w + 16, &size, 4);
        memcpy(w + 20, &recs[i].queue_id, 4);
    }
    return meta;
}

static PyObject *build_queues(const record_t *recs, Py_ssize_t n, queues_t *qs,
                              PyObject *assigned) {
    PyObject *out = PyList_New(qs->n);
    if (out == NULL) return NULL;
    for (Py_ssize_t k = 0; k < qs->n; k++) {
        queue_t *q = &qs->items[k];
        PyObject *entries = PyBytes_FromStringAndSize(NULL, q->count * CQ_ENTRY);
        if (entries == NULL) { Py_DECREF(out); return NULL; }
        unsigned char *w = (unsigned char *)PyBytes_AS_STRING(entries);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (recs[i].key != k) continue;
            w = put64(w, (uint64_t)recs[i].position);
            w = put32(w, (uint32_t)recs[i].size);
            w = put64(w, (uint64_t)recs[i].tags);
        }
        PyObject *item = Py_BuildValue("(OLNn)", q->key, (long long)q->first, entries, q->bytes);
        if (item == NULL) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, k, item);
    }
    for (Py_ssize_t k = 0; k < qs->n; k++) { /* only now: nothing is assigned on failure */
        PyObject *next = PyLong_FromLongLong(qs->items[k].next);
        if (next == NULL || PyDict_SetItem(assigned, qs->items[k].key, next) < 0) {
            Py_XDECREF(next);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(next);
    }
    return out;
}

PyObject *encode_batch(PyObject *self, PyObject *args) {
    PyObject *messages, *assigned, *lookup, *schedule_tags;
    Py_ssize_t first;
    long long start, limit, store_ms;
    if (!PyArg_ParseTuple(args, "O!nLLLO!OO", &PyList_Type, &messages, &first, &start, &limit,
                          &store_ms, &PyDict_Type, &assigned, &lookup, &schedule_tags))
        return NULL;
    Py_ssize_t total = PyList_GET_SIZE(messages);
    if (first < 0 || first > total) {
        PyErr_SetString(PyExc_IndexError, "encode_batch: first is outside the list");
        return NULL;
    }
    record_t *recs = PyMem_Calloc(total - first + 1, sizeof(record_t));
    if (recs == NULL) return PyErr_NoMemory();
    queues_t qs = {NULL, 0, 0};
    PyObject *data = NULL, *meta = NULL, *queues = NULL, *result = NULL;
    Py_ssize_t n = 0;
    int64_t position = start;
    for (Py_ssize_t i = first; i < total; i++) {
        record_t *r = &recs[n];
        if (load(PyList_GET_ITEM(messages, i), r, store_ms, schedule_tags) < 0) goto done;
        if (position + r->size > limit) { release(r); break; }
        n++; /* from here on r is released with the others */
        Py_ssize_t k = queue_of(&qs, r, assigned, lookup);
        if (k < 0) goto done;
        r->key = k;
        r->queue_offset = qs.items[k].next++;
        r->position = position;
        qs.items[k].count++;
        qs.items[k].bytes += r->size;
        position += r->size;
    }
    data = PyBytes_FromStringAndSize(NULL, position - start);
    if (data == NULL) goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(data);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        write_record(w, &recs[i], store_ms);
        w += recs[i].size;
    }
    Py_END_ALLOW_THREADS
    if ((meta = build_meta(recs, n)) == NULL) goto done;
    if ((queues = build_queues(recs, n, &qs, assigned)) == NULL) goto done;
    result = Py_BuildValue("(nOOO)", n, data, meta, queues);
done:
    for (Py_ssize_t i = 0; i < n; i++) release(&recs[i]);
    PyMem_Free(recs);
    queues_free(&qs);
    Py_XDECREF(data);
    Py_XDECREF(meta);
    Py_XDECREF(queues);
    return result;
}

PyObject *prepare_batch(PyObject *self, PyObject *args) {
    PyObject *messages;
    Py_ssize_t max_body, max_props, body_bytes = 0;
    int clean = 1;
    if (!PyArg_ParseTuple(args, "O!nn", &PyList_Type, &messages, &max_body, &max_props))
        return NULL;
    for (Py_ssize_t i = 0, n = PyList_GET_SIZE(messages); i < n; i++) {
        if (PyBytes_CheckExact(PyList_GET_ITEM(messages, i))) { /* a prepared record */
            body_bytes += PyBytes_GET_SIZE(PyList_GET_ITEM(messages, i));
            continue;
        }
        PyObject *dict = PyObject_GenericGetDict(PyList_GET_ITEM(messages, i), NULL);
        if (dict == NULL) return NULL;
        PyObject *body = PyDict_GetItemWithError(dict, S_body);
        PyObject *props = body ? cached_props(dict) : NULL;
        PyObject *msg_id = props ? PyDict_GetItemWithError(dict, S_msg_id) : NULL;
        if (PyErr_Occurred() || body == NULL || !PyBytes_Check(body) || !PyBytes_Check(props)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "prepare_batch: expected Messages");
            Py_DECREF(dict);
            return NULL;
        }
        body_bytes += PyBytes_GET_SIZE(body);
        if (PyBytes_GET_SIZE(body) > max_body || PyBytes_GET_SIZE(props) > max_props ||
            msg_id == NULL || msg_id == Py_None)
            clean = 0;
        Py_DECREF(dict);
    }
    return Py_BuildValue("(nO)", body_bytes, clean ? Py_True : Py_False);
}

/* pwrite_all(fd, data, offset, slice): write all of ``data`` at ``offset`` in writes of at most
 * ``slice`` bytes, with the GIL released once for the whole loop (see rocks_timer/fileio.py). */
#define KEEP_GIL_MAX 16384

static int write_loop(int fd, const char *p, Py_ssize_t left, Py_ssize_t slice,
                      long long offset) {
    while (left > 0) {
        ssize_t n = pwrite(fd, p, left < slice ? left : slice, (off_t)offset);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        p += n;
        offset += n;
        left -= n;
    }
    return 0;
}

PyObject *pwrite_all(PyObject *self, PyObject *args) {
    int fd;
    Py_buffer view;
    long long offset;
    Py_ssize_t slice;
    if (!PyArg_ParseTuple(args, "iy*Ln", &fd, &view, &offset, &slice)) return NULL;
    if (slice <= 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pwrite_all: slice must be positive");
        return NULL;
    }
    const char *p = view.buf;
    Py_ssize_t left = view.len;
    int err = 0;
    if (left <= KEEP_GIL_MAX) {
        /* a small write into the page cache takes a few microseconds: releasing the GIL for it
         * wakes every thread waiting for the GIL (the deliverer's, the CommitLog writer's),
         * which then find it taken again; one send's value record paid that wake-up */
        err = write_loop(fd, p, left, slice, offset);
    } else {
        Py_BEGIN_ALLOW_THREADS
        err = write_loop(fd, p, left, slice, offset);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

PyObject *crc32(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = crc32_bytes(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

