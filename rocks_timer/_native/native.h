/* Shared by the native hot paths (the .c files here, one extension module: codec).
 * Each function has a pure-Python reference that the tests compare it against; see
 * rocks_timer/batch_encoder.py, rocks_timer/fileio.py and rocks_timer/timer/schedule_codec.py. */
#ifndef ROCKS_TIMER_NATIVE_H
#define ROCKS_TIMER_NATIVE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Big-endian reads of the stored formats (timer keys, values, index pointers, records): one
 * definition for every file here. A 64-bit read is one load and a byte swap where the compiler
 * offers it (a delivery tally decodes a due per key). */
static inline uint32_t read_be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t read_be64(const unsigned char *p) {
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
#else
    return (uint64_t)read_be32(p) << 32 | read_be32(p + 4);
#endif
}

/* A growing byte buffer, on the stack until it outgrows it (bytes_init, then bytes_add; 0 or -1
 * with MemoryError set; bytes_free after): the property strings (fields.c), the remoting
 * front's JSON (remoting.c). */
typedef struct {
    unsigned char *data;
    Py_ssize_t len, cap;
    unsigned char stack[1024];
} bytes_t;

static inline void bytes_init(bytes_t *b) {
    b->data = b->stack;
    b->len = 0;
    b->cap = sizeof(b->stack);
}

static inline void bytes_free(bytes_t *b) {
    if (b->data != b->stack) PyMem_Free(b->data);
    bytes_init(b);
}

static inline int bytes_room(bytes_t *b, Py_ssize_t n) {
    if (b->len + n <= b->cap) return 0;
    if (n > PY_SSIZE_T_MAX / 4 - b->len) { PyErr_NoMemory(); return -1; }
    Py_ssize_t cap = (b->len + n) * 2;
    unsigned char *data = PyMem_Malloc(cap);
    if (data == NULL) { PyErr_NoMemory(); return -1; }
    memcpy(data, b->data, b->len);
    if (b->data != b->stack) PyMem_Free(b->data);
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int bytes_add(bytes_t *b, const void *p, Py_ssize_t n) {
    if (bytes_room(b, n) < 0) return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static inline int bytes_text(bytes_t *b, const char *text) {
    return bytes_add(b, text, (Py_ssize_t)strlen(text));
}

/* Interned attribute names of Message (fields.c). */
extern PyObject *S_body, *S_topic, *S_queue_id, *S_flag, *S_born_ms, *S_reconsume_times, *S_tags,
    *S_cached_props, *S_props, *S_msg_id, *S_properties, *S_due_ms, *S_message;
int fields_init(void);

/* A field of a message: from its __dict__ (``dict`` may be NULL), else getattr ``attr`` (or
 * ``name``). New reference, NULL with an exception set. */
PyObject *field(PyObject *msg, PyObject *dict, PyObject *name, PyObject *attr);
/* An int field (None gives ``dflt``) checked against [lo, hi]; -1 with ValueError outside. */
int int_field(PyObject *msg, PyObject *dict, PyObject *name, int64_t dflt, int64_t lo, int64_t hi,
              int64_t *out);
/* Java's String.hashCode over UTF-16 code units. */
int32_t java_hash(PyObject *text);
/* RocketMQ's property string of a mapping of str (name\x01value\x02 per entry). */
PyObject *encode_props(PyObject *mapping);
/* dict[key] += n (missing counts as 0). Steals ``key`` (which may be NULL with an exception
 * set). 0, or -1 with an exception set. */
int dict_add_count(PyObject *dict, PyObject *key, long long n);
/* A message's cached property string (borrowed from its __dict__), built and cached if missing. */
PyObject *cached_props(PyObject *dict);

/* commitlog.c */
void crc_init(void);
PyObject *encode_batch(PyObject *self, PyObject *args);
PyObject *prepare_batch(PyObject *self, PyObject *args);
PyObject *pwrite_all(PyObject *self, PyObject *args);
PyObject *crc32(PyObject *self, PyObject *arg);
/* CRC32 (as zlib.crc32(data, seed)) continuing from ``seed``. */
uint32_t crc32_update(uint32_t seed, const unsigned char *p, size_t n);
/* An index value of the vlog layout that points into a value segment: a version byte, then at
 * least POINTER_SIZE bytes in all (rocks_timer/timer/rocksdb/index.py, POINTER). */
#define POINTER_SIZE 27
#define POINTER_VERSION 0x81
/* vlog.c */
PyObject *vlog_parse(PyObject *self, PyObject *args);
PyObject *vlog_frame(PyObject *self, PyObject *args);
PyObject *drop_pointers(PyObject *self, PyObject *args);
/* Read ``length`` bytes at ``offset`` (fewer where the file ends: ``*got``); 0 or an errno.
 * Call without the GIL. */
int pread_full(int fd, unsigned char *buf, Py_ssize_t length, long long offset,
               Py_ssize_t *got);
/* The value of the record of ``length`` bytes at ``at`` of ``data`` (checked against ``key``),
 * or a str code saying why it is refused. New reference. */
PyObject *vlog_parse_one(const unsigned char *data, Py_ssize_t size, Py_ssize_t at,
                         Py_ssize_t length, PyObject *key);
/* The same check without Python objects (callable without the GIL): NULL when the record is
 * good (its value: ``*value_len`` bytes at ``data + *value_at``), else the refusal code. */
const char *vlog_check(const unsigned char *data, Py_ssize_t size, Py_ssize_t at,
                       Py_ssize_t length, const unsigned char *key, Py_ssize_t key_size,
                       Py_ssize_t *value_at, Py_ssize_t *value_len);
/* delivery.c */
PyObject *delivery_copies(PyObject *self, PyObject *args);
PyObject *index_removals(PyObject *self, PyObject *args);
/* The prepared record of one timer value, or None (new reference) to leave it to Python. */
PyObject *delivery_copy_one(PyObject *value, long long due_ms, long long now_ms);
/* The same without Python objects (callable without the GIL): the prepared record's length,
 * written at ``out`` when ``out`` is not NULL and ``cap`` holds it; -1 when Python must decide.
 * A record is never longer than DELIVERY_COPY_BOUND(value length). */
Py_ssize_t delivery_copy_into(const unsigned char *v, Py_ssize_t len, long long due_ms,
                              long long now_ms, unsigned char *out, Py_ssize_t cap);
#define DELIVERY_EXTRA_MAX 96 /* the two delivery properties, both values int64 */
#define DELIVERY_COPY_BOUND(len) (RECORD_FIXED_SIZE + (len) + DELIVERY_EXTRA_MAX + 9)
/* claim.c */
PyObject *claim_batch(PyObject *self, PyObject *args);
PyObject *due_second_counts(PyObject *self, PyObject *raws);
PyObject *topic_counts(PyObject *self, PyObject *raws);
/* consume.c */
PyObject *read_records(PyObject *self, PyObject *args);
/* client_records.c */
PyObject *client_records(PyObject *self, PyObject *args);
/* routing.c */
int routing_init(void);
PyObject *route_common(PyObject *self, PyObject *args);
PyObject *route_common_batch(PyObject *self, PyObject *args);
/* remoting.c */
int remoting_init(void);
PyObject *remoting_frames(PyObject *self, PyObject *args);
PyObject *send_fields(PyObject *self, PyObject *args);
PyObject *json_header(PyObject *self, PyObject *args);
/* timer.c */
void timer_init(void);
PyObject *encode_schedule(PyObject *self, PyObject *args);

/* bornHost and storeHost of every record: 127.0.0.1:10911 */
static const unsigned char LOCALHOST[8] = {127, 0, 0, 1, 0, 0, 0x2A, 0x9F};
#define RECORD_FIXED_SIZE 91 /* 84-byte header + body length 4 + topic length 1 + props length 2 */
#define RECORD_MAGIC 0xDAA320A7u

static inline unsigned char *put32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
    return p + 4;
}

static inline unsigned char *put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    return put32(p + 4, (uint32_t)v);
}
/* tally.c */
PyObject *delivery_tally(PyObject *self, PyObject *args);
#ifdef __SIZEOF_INT128__
extern PyTypeObject DelayTallyType;
#endif

#endif
