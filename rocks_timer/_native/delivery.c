/* delivery_copies(values, dues, now_ms) -> list: timer values (rocks_timer/timer/values.py)
 * straight to prepared CommitLog records (record.prepare_record: the record with its place,
 * store time and CRC left for the writer, then its tags code and flags), without a Message
 * per record.
 * The Python reference is rocks_timer/timer/delivery.py (prepared_copy_py);
 * tests/engines/test_delivery_copies.py holds the two equal byte for byte.
 *
 * A value takes this path only when the reference would give exactly the stored property
 * string plus the two delivery properties appended: a plain (not lz4) body, an ASCII topic,
 * ASCII properties in canonical form (each entry name\x01value\x02, both parts non-empty, no
 * name twice), no TIMER_OUT_MS or TIMER_DEQUEUE_MS yet, an upper-case UNIQ_KEY, KEYS already
 * normalised (single spaces), and a topic of at most 127 bytes that is not
 * SCHEDULE_TOPIC_XXXX. Anything else gives None, and the caller uses the reference, which also
 * reports a corrupt value. */
#include "native.h"

#define VALUE_HEADER 36
#define VALUE_VERSION 1
#define PRESENT_QUEUE_ID 0x01
#define PRESENT_BORN_MS 0x02


typedef struct {
    const unsigned char *name, *value;
    Py_ssize_t name_len, value_len;
} entry_t;

static int names_equal(const entry_t *e, const char *name) {
    size_t n = strlen(name);
    return (size_t)e->name_len == n && memcmp(e->name, name, n) == 0;
}

/* Split canonical ASCII properties; the number of entries, or -1 if not canonical. */
static Py_ssize_t split_props(const unsigned char *p, Py_ssize_t n, entry_t *out, Py_ssize_t cap) {
    Py_ssize_t count = 0, at = 0;
    while (at < n) {
        if (count == cap) return -1;
        entry_t *e = &out[count];
        e->name = p + at;
        while (at < n && p[at] != 1 && p[at] != 2) {
            if (p[at] >= 0x80) return -1;
            at++;
        }
        e->name_len = p + at - e->name;
        if (at == n || p[at] != 1 || e->name_len == 0) return -1;
        e->value = p + ++at;
        while (at < n && p[at] != 1 && p[at] != 2) {
            if (p[at] >= 0x80) return -1;
            at++;
        }
        e->value_len = p + at - e->value;
        if (at == n || p[at] != 2 || e->value_len == 0) return -1;
        at++;
        for (Py_ssize_t j = 0; j < count; j++)
            if (out[j].name_len == e->name_len && memcmp(out[j].name, e->name, e->name_len) == 0)
                return -1;
        count++;
    }
    return count;
}

static int keys_normalised(const entry_t *e) {
    if (e->value[0] == ' ' || e->value[e->value_len - 1] == ' ') return 0;
    for (Py_ssize_t i = 1; i < e->value_len; i++)
        if (e->value[i] == ' ' && e->value[i - 1] == ' ') return 0;
    return 1;
}

#define MAX_ENTRIES 64

/* The lengths a stored value's header (rocks_timer/timer/values.py) gives its parts. */
typedef struct {
    Py_ssize_t topic_len;
    uint32_t props_len, body_len, stored_len;
} value_head_t;

/* Reads the header of the value ``v`` (``len`` bytes) into ``h``: 0, or -1 when the reference
 * must read the value (another version, flags or presence bits it does not know, lengths that do
 * not add up). ``lz4_ok``: a value whose body is stored lz4-compressed is accepted (its body is
 * not read then); otherwise only a plain body is. */
static int read_value_head(const unsigned char *v, Py_ssize_t len, int lz4_ok, value_head_t *h) {
    if (len < VALUE_HEADER || v[0] != VALUE_VERSION || (v[1] & ~(lz4_ok ? 1 : 0)) || (v[2] & ~3))
        return -1;
    h->topic_len = v[23];
    h->props_len = read_be32(v + 24);
    h->body_len = read_be32(v + 28);
    h->stored_len = read_be32(v + 32);
    if (h->topic_len == 0 || (v[1] == 0 && h->body_len != h->stored_len) ||
        (uint64_t)len != (uint64_t)VALUE_HEADER + h->topic_len + h->props_len + h->stored_len)
        return -1;
    return 0;
}

/* The prepared record of the value ``v`` (``len`` bytes): its length, and written at ``out`` when
 * ``out`` is not NULL and ``cap`` holds it; -1 when the reference must decide. No Python objects:
 * the claim calls it with the GIL released. */
Py_ssize_t delivery_copy_into(const unsigned char *v, Py_ssize_t len, long long due_ms,
                              long long now_ms, unsigned char *out, Py_ssize_t cap) {
    value_head_t head;
    if (read_value_head(v, len, 0, &head) < 0) return -1;
    int present = v[2];
    int32_t queue_id = (int32_t)read_be32(v + 3), flag = (int32_t)read_be32(v + 7);
    int64_t born_ms = (int64_t)read_be64(v + 11);
    int32_t reconsume = (int32_t)read_be32(v + 19);
    Py_ssize_t topic_len = head.topic_len;
    uint32_t props_len = head.props_len, body_len = head.body_len;
    const unsigned char *topic = v + VALUE_HEADER, *props = topic + topic_len;
    const unsigned char *body = props + props_len;
    for (Py_ssize_t i = 0; i < topic_len; i++)
        if (topic[i] < 0x20 || topic[i] >= 0x80) return -1;
    entry_t entries[MAX_ENTRIES];
    Py_ssize_t count = split_props(props, props_len, entries, MAX_ENTRIES);
    if (count < 0) return -1;
    const entry_t *uniq = NULL, *tags = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        const entry_t *e = &entries[i];
        if (names_equal(e, "TIMER_OUT_MS") || names_equal(e, "TIMER_DEQUEUE_MS")) return -1;
        if (names_equal(e, "UNIQ_KEY")) {
            for (Py_ssize_t j = 0; j < e->value_len; j++)
                if (e->value[j] >= 'a' && e->value[j] <= 'z') return -1;
            uniq = e;
        } else if (names_equal(e, "TAGS")) {
            tags = e;
        } else if (names_equal(e, "KEYS") && !keys_normalised(e)) {
            return -1;
        }
    }
    if (uniq == NULL) return -1;

    if (topic_len > 127 ||
        (topic_len == 19 && memcmp(topic, "SCHEDULE_TOPIC_XXXX", 19) == 0))
        return -1;
    char extra[DELIVERY_EXTRA_MAX];
    int extra_len = snprintf(extra, sizeof extra,
                             "TIMER_OUT_MS\x01%lld\x02TIMER_DEQUEUE_MS\x01%lld\x02", due_ms, now_ms);
    Py_ssize_t all_props = (Py_ssize_t)props_len + extra_len;
    if (all_props > 65535) return -1;
    int64_t tags_code = 0;
    if (tags != NULL) { /* Java's String.hashCode; the value is ASCII */
        uint32_t h = 0;
        for (Py_ssize_t i = 0; i < tags->value_len; i++) h = 31 * h + tags->value[i];
        tags_code = (int32_t)h;
    }
    Py_ssize_t size = RECORD_FIXED_SIZE + body_len + topic_len + all_props;
    if (out == NULL || cap < size + 9) return size + 9;
    unsigned char *w = out;
    memset(w, 0, 84);
    put32(w, (uint32_t)size);
    put32(w + 4, RECORD_MAGIC);
    put32(w + 12, (uint32_t)(present & PRESENT_QUEUE_ID ? queue_id : 0));
    put32(w + 16, (uint32_t)flag);
    put64(w + 40, present & PRESENT_BORN_MS ? (uint64_t)born_ms : 0);
    memcpy(w + 48, LOCALHOST, 8);
    memcpy(w + 64, LOCALHOST, 8);
    put32(w + 72, (uint32_t)reconsume);
    w += 84;
    w = put32(w, body_len);
    memcpy(w, body, body_len);
    w += body_len;
    *w++ = (unsigned char)topic_len;
    memcpy(w, topic, topic_len);
    w += topic_len;
    *w++ = (unsigned char)(all_props >> 8);
    *w++ = (unsigned char)all_props;
    memcpy(w, props, props_len);
    memcpy(w + props_len, extra, extra_len);
    put64(w + all_props, (uint64_t)tags_code);
    w[all_props + 8] = present & PRESENT_BORN_MS ? 0 : 0x01; /* born at the store time */
    return size + 9;
}

/* The prepared record of one value, or Py_None (new reference) when the reference must
 * decide. */
PyObject *delivery_copy_one(PyObject *value, long long due_ms, long long now_ms) {
    if (!PyBytes_Check(value)) Py_RETURN_NONE;
    const unsigned char *v = (const unsigned char *)PyBytes_AS_STRING(value);
    Py_ssize_t len = PyBytes_GET_SIZE(value);
    Py_ssize_t size = delivery_copy_into(v, len, due_ms, now_ms, NULL, 0);
    if (size < 0) Py_RETURN_NONE;
    PyObject *blob = PyBytes_FromStringAndSize(NULL, size);
    if (blob == NULL) return NULL;
    delivery_copy_into(v, len, due_ms, now_ms, (unsigned char *)PyBytes_AS_STRING(blob), size);
    return blob;
}

PyObject *delivery_copies(PyObject *self, PyObject *args) {
    PyObject *values, *dues;
    long long now_ms;
    if (!PyArg_ParseTuple(args, "O!O!L", &PyList_Type, &values, &PyList_Type, &dues, &now_ms))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (PyList_GET_SIZE(dues) != n) {
        PyErr_SetString(PyExc_ValueError, "delivery_copies: values and dues differ in length");
        return NULL;
    }
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long due = PyLong_AsLongLong(PyList_GET_ITEM(dues, i));
        if (due == -1 && PyErr_Occurred()) goto fail;
        PyObject *copy = delivery_copy_one(PyList_GET_ITEM(values, i), due, now_ms);
        if (copy == NULL) goto fail;
        PyList_SET_ITEM(out, i, copy);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}



/* index_removals(tokens, values, prefix) -> (entries, slow): the key index entries
 * (rocks_timer/timer/keys.py, index_entry: prefix + topic length and topic + the KEY's length,
 * 2 bytes big-endian, and bytes + due + msg id) of the distinct KEYS of each stored value, for
 * a delivered batch of a keyed store. ``tokens[i]`` is the raw timer key of ``values[i]``.
 * A value is read here only when the reference would read it the same way: a well-formed
 * header (as values._parse checks it; an lz4 body is fine, it is not read), ASCII properties
 * in canonical form (split_props: no name twice, so no "last entry wins") and a timer key
 * whose lengths add up; ``slow`` lists the indexes of the others, for the caller's reference
 * (values.peek_keys, which also reports a corrupt value). The reference of the whole:
 * index_removals_py in rocks_timer/timer/rocksdb/claimed.py;
 * tests/engines/rocksdb/test_claimed_batch.py holds the two equal. */
PyObject *index_removals(PyObject *self, PyObject *args) {
    PyObject *tokens_in, *values_in;
    const char *prefix;
    Py_ssize_t prefix_len;
    if (!PyArg_ParseTuple(args, "OOy#", &tokens_in, &values_in, &prefix, &prefix_len))
        return NULL;
    PyObject *tokens = PySequence_Fast(tokens_in, "index_removals: tokens must be a sequence");
    if (tokens == NULL) return NULL;
    PyObject *values = PySequence_Fast(values_in, "index_removals: values must be a sequence");
    if (values == NULL) {
        Py_DECREF(tokens);
        return NULL;
    }
    PyObject *entries = PyList_New(0), *slow = PyList_New(0);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(tokens);
    if (entries == NULL || slow == NULL) goto fail;
    if (PySequence_Fast_GET_SIZE(values) != n) {
        PyErr_SetString(PyExc_ValueError, "index_removals: tokens and values differ in length");
        goto fail;
    }
    entry_t props_at[MAX_ENTRIES];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *raw = PySequence_Fast_GET_ITEM(tokens, i);
        PyObject *value = PySequence_Fast_GET_ITEM(values, i);
        const unsigned char *k, *v;
        Py_ssize_t k_size, len, count, key_topic;
        value_head_t head;
        const entry_t *keys = NULL;
        if (!PyBytes_Check(raw) || !PyBytes_Check(value)) goto to_python;
        k = (const unsigned char *)PyBytes_AS_STRING(raw);
        k_size = PyBytes_GET_SIZE(raw);
        if (k_size < 8 + 1 + 16) goto to_python;
        key_topic = k[8];
        if (key_topic == 0 || k_size != 8 + 1 + key_topic + 16) goto to_python;
        v = (const unsigned char *)PyBytes_AS_STRING(value);
        len = PyBytes_GET_SIZE(value);
        if (read_value_head(v, len, 1, &head) < 0) goto to_python;
        count = split_props(v + VALUE_HEADER + head.topic_len, head.props_len, props_at,
                            MAX_ENTRIES);
        if (count < 0) goto to_python;
        for (Py_ssize_t j = 0; j < count; j++)
            if (names_equal(&props_at[j], "KEYS")) keys = &props_at[j];
        if (keys == NULL) continue;
        /* the KEYS value split on spaces, empty parts dropped, each distinct one once, in order */
        const unsigned char *word[MAX_ENTRIES];
        Py_ssize_t word_len[MAX_ENTRIES], words = 0, at = 0;
        while (at < keys->value_len) {
            while (at < keys->value_len && keys->value[at] == ' ') at++;
            Py_ssize_t start = at;
            while (at < keys->value_len && keys->value[at] != ' ') at++;
            Py_ssize_t wl = at - start;
            if (wl == 0) break;
            if (wl > 0xFFFF) goto to_python;
            int seen = 0;
            for (Py_ssize_t w = 0; w < words && !seen; w++)
                seen = word_len[w] == wl && memcmp(word[w], keys->value + start, wl) == 0;
            if (seen) continue;
            if (words == MAX_ENTRIES) goto to_python;
            word[words] = keys->value + start;
            word_len[words++] = wl;
        }
        for (Py_ssize_t w = 0; w < words; w++) {
            Py_ssize_t size = prefix_len + 1 + key_topic + 2 + word_len[w] + 8 + 16;
            PyObject *entry = PyBytes_FromStringAndSize(NULL, size);
            if (entry == NULL) goto fail;
            unsigned char *p = (unsigned char *)PyBytes_AS_STRING(entry);
            memcpy(p, prefix, prefix_len);
            p += prefix_len;
            memcpy(p, k + 8, 1 + key_topic);
            p += 1 + key_topic;
            *p++ = (unsigned char)(word_len[w] >> 8);
            *p++ = (unsigned char)(word_len[w] & 0xFF);
            memcpy(p, word[w], word_len[w]);
            p += word_len[w];
            memcpy(p, k, 8);
            memcpy(p + 8, k + 9 + key_topic, 16);
            int failed = PyList_Append(entries, entry);
            Py_DECREF(entry);
            if (failed) goto fail;
        }
        continue;
    to_python:;
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL) goto fail;
        int failed = PyList_Append(slow, index);
        Py_DECREF(index);
        if (failed) goto fail;
    }
    Py_DECREF(tokens);
    Py_DECREF(values);
    PyObject *out = PyTuple_Pack(2, entries, slow);
    Py_DECREF(entries);
    Py_DECREF(slow);
    return out;
fail:
    Py_DECREF(tokens);
    Py_DECREF(values);
    Py_XDECREF(entries);
    Py_XDECREF(slow);
    return NULL;
}
