/* Reading Message objects from C: fields, property strings, Java's string hash. */
#include "native.h"

PyObject *S_body, *S_topic, *S_queue_id, *S_flag, *S_born_ms, *S_reconsume_times, *S_tags,
    *S_cached_props, *S_props, *S_msg_id, *S_properties, *S_due_ms, *S_message;

int fields_init(void) {
    PyObject **names[] = {&S_body, &S_topic, &S_queue_id, &S_flag, &S_born_ms,
                          &S_reconsume_times, &S_tags, &S_cached_props, &S_props, &S_msg_id,
                          &S_properties, &S_due_ms, &S_message};
    const char *texts[] = {"body", "topic", "queue_id", "flag", "born_ms", "reconsume_times",
                           "tags", "_encoded_properties", "encoded_properties", "msg_id",
                           "properties", "due_ms", "message"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i] = PyUnicode_InternFromString(texts[i])) == NULL) return -1;
    return 0;
}

PyObject *field(PyObject *msg, PyObject *dict, PyObject *name, PyObject *attr) {
    PyObject *value = dict ? PyDict_GetItemWithError(dict, name) : NULL;
    if (value != NULL) return Py_NewRef(value);
    if (PyErr_Occurred()) return NULL;
    return PyObject_GetAttr(msg, attr ? attr : name);
}

int int_field(PyObject *msg, PyObject *dict, PyObject *name, int64_t dflt, int64_t lo, int64_t hi,
              int64_t *out) {
    PyObject *value = field(msg, dict, name, NULL);
    if (value == NULL) return -1;
    if (value == Py_None) {
        *out = dflt;
    } else {
        long long v = PyLong_AsLongLong(value);
        if (v == -1 && PyErr_Occurred()) { Py_DECREF(value); return -1; }
        if (v < lo || v > hi) {
            PyErr_Format(PyExc_ValueError, "message %U %lld is out of range", name, v);
            Py_DECREF(value);
            return -1;
        }
        *out = v;
    }
    Py_DECREF(value);
    return 0;
}

int32_t java_hash(PyObject *text) {
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    uint32_t h = 0;
    for (Py_ssize_t i = 0, n = PyUnicode_GET_LENGTH(text); i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0x10000) {
            c -= 0x10000;
            h = 31 * h + (0xD800 + (c >> 10));
            c = 0xDC00 + (c & 0x3FF);
        }
        h = 31 * h + c;
    }
    return (int32_t)h;
}

/* -- property strings ----------------------------------------------------------------------------
 * encode_properties(mapping) -> bytes: RocketMQ's property string, name\x01value\x02 per entry.
 * prepare_batch(messages, max_body, max_properties) -> (body bytes, clean): caches each message's
 * property string (as Message.encoded_properties does) and sums the bodies; ``clean`` is false
 * when a message is over a limit or has no id, for the caller's slower path to handle. */
static int add_text(bytes_t *b, PyObject *text) {
    Py_ssize_t n;
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "property names and values must be str, not %.50s",
                     Py_TYPE(text)->tp_name);
        return -1;
    }
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    return utf8 == NULL ? -1 : bytes_add(b, utf8, n);
}

PyObject *encode_props(PyObject *mapping) {
    PyObject *items = PyMapping_Items(mapping);
    if (items == NULL) return NULL;
    bytes_t b;
    bytes_init(&b);
    PyObject *result = NULL;
    for (Py_ssize_t i = 0, n = PyList_GET_SIZE(items); i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (add_text(&b, PyTuple_GET_ITEM(item, 0)) < 0 || bytes_add(&b, "\x01", 1) < 0 ||
            add_text(&b, PyTuple_GET_ITEM(item, 1)) < 0 || bytes_add(&b, "\x02", 1) < 0)
            goto done;
    }
    result = PyBytes_FromStringAndSize((const char *)b.data, b.len);
done:
    bytes_free(&b);
    Py_DECREF(items);
    return result;
}

PyObject *cached_props(PyObject *dict) {
    PyObject *props = PyDict_GetItemWithError(dict, S_cached_props);
    if (props != NULL || PyErr_Occurred()) return props;
    PyObject *mapping = PyDict_GetItemWithError(dict, S_properties);
    if (mapping == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a message has no properties");
        return NULL;
    }
    props = encode_props(mapping);
    if (props == NULL) return NULL;
    int rc = PyDict_SetItem(dict, S_cached_props, props);
    Py_DECREF(props); /* the dict holds it */
    return rc < 0 ? NULL : props;
}


int dict_add_count(PyObject *dict, PyObject *key, long long n) {
    if (key == NULL) return -1;
    PyObject *old = PyDict_GetItemWithError(dict, key);
    long long have = 0;
    if ((old == NULL && PyErr_Occurred())
        || (old != NULL && (have = PyLong_AsLongLong(old)) == -1 && PyErr_Occurred())) {
        Py_DECREF(key);
        return -1;
    }
    PyObject *value = PyLong_FromLongLong(have + n);
    int rc = value == NULL ? -1 : PyDict_SetItem(dict, key, value);
    Py_DECREF(key);
    Py_XDECREF(value);
    return rc;
}
