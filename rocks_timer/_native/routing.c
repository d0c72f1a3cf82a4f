/* route_common: the common send routed in one call. The Python reference is _route_common in
 * rocks_timer/routing.py, itself held equal to route_reference by
 * tests/broker/test_routing_fast.py; the same test runs route() with this function in place.
 *
 * route_common(msg, now_ms, delay_ms, deliver_at_ms, max_body, max_delay_ms, max_props,
 *              valid_topics, forbidden, message_cls, new_id)
 *     -> (kind, message, due_ms) or None
 *
 * None whenever anything is not plainly fine (the caller then takes the Python path, which
 * gives the reference's routes and errors): a topic not yet in ``valid_topics``, a body over
 * ``max_body``, a property named in ``forbidden``, a property string that is not one
 * name\x01value\x02 per entry with non-empty names and values, a msg_id that is not 32
 * upper-case hex digits, a queue id or flag out of range or not an int, a schedule that is not
 * an int, a due time past the maximum delay, properties over ``max_props`` bytes. */
#include "native.h"

static PyObject *S_copy, *S_encoded, *S_properties_attr, *S_msg_id_attr, *S_born_ms_attr,
    *S_uniq_key, *S_delay_name, *S_deliver_name, *K_immediate, *K_timer;

int routing_init(void) {
    S_copy = PyUnicode_InternFromString("copy");
    S_encoded = PyUnicode_InternFromString("_encoded_properties");
    S_properties_attr = PyUnicode_InternFromString("properties");
    S_msg_id_attr = PyUnicode_InternFromString("msg_id");
    S_born_ms_attr = PyUnicode_InternFromString("born_ms");
    S_uniq_key = PyUnicode_InternFromString("UNIQ_KEY");
    S_delay_name = PyUnicode_InternFromString("TIMER_DELAY_MS");
    S_deliver_name = PyUnicode_InternFromString("TIMER_DELIVER_MS");
    K_immediate = PyUnicode_InternFromString("immediate");
    K_timer = PyUnicode_InternFromString("timer");
    return S_copy && S_encoded && S_properties_attr && S_msg_id_attr && S_born_ms_attr &&
           S_uniq_key && S_delay_name && S_deliver_name && K_immediate && K_timer ? 0 : -1;
}

static int exact_int(PyObject *v, long long lo, long long hi, long long *out) {
    if (!PyLong_CheckExact(v)) return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
    if (x < lo || x >= hi) return 0;
    *out = x;
    return 1;
}

static int canonical_props(const char *p, Py_ssize_t n, Py_ssize_t entries) {
    Py_ssize_t ones = 0, twos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] == 1) {
            if (i == 0 || p[i - 1] == 2 || (i + 1 < n && p[i + 1] == 2)) return 0;
            ones++;
        } else if (p[i] == 2) {
            twos++;
        }
    }
    return ones == entries && twos == entries;
}

static int valid_id(PyObject *id) {
    if (!PyUnicode_Check(id) || PyUnicode_GET_LENGTH(id) != 32 || !PyUnicode_IS_ASCII(id))
        return 0;
    const char *s = (const char *)PyUnicode_DATA(id);
    for (int i = 0; i < 32; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'A' && s[i] <= 'F'))) return 0;
    return 1;
}

/* Append name\x01value\x02 to buf at *len (buf has room: names and values are short). */
static void entry(char *buf, Py_ssize_t *len, const char *name, const char *value,
                  Py_ssize_t value_len) {
    size_t n = strlen(name);
    memcpy(buf + *len, name, n);
    *len += n;
    buf[(*len)++] = 1;
    memcpy(buf + *len, value, value_len);
    *len += value_len;
    buf[(*len)++] = 2;
}

/* What stays the same for every message of one send. */
typedef struct {
    long long now_ms, max_body, max_delay, max_props;
    PyObject *delay, *deliver_at, *valid_topics, *forbidden, *cls, *new_id;
    PyTypeObject *route; /* NULL: a plain (kind, message, due_ms) tuple; else a Route */
} send_t;

/* The route of one message (see route_common), None to let Python decide, NULL on error. */
static PyObject *route_one(PyObject *msg, const send_t *c) {
    long long now_ms = c->now_ms, max_body = c->max_body, max_delay = c->max_delay,
              max_props = c->max_props;
    PyObject *delay = c->delay, *deliver_at = c->deliver_at, *valid_topics = c->valid_topics,
             *forbidden = c->forbidden, *cls = c->cls, *new_id = c->new_id;
    if ((PyObject *)Py_TYPE(msg) != cls) Py_RETURN_NONE;
    PyObject *dict = PyObject_GenericGetDict(msg, NULL);
    if (dict == NULL) return NULL;
    PyObject *result = NULL, *props = NULL, *new_dict = NULL, *encoded_new = NULL, *id = NULL;
    PyObject *proxy = NULL, *due_obj = NULL, *copy = NULL;
    PyObject *topic = PyDict_GetItemWithError(dict, S_topic);
    PyObject *body = topic ? PyDict_GetItemWithError(dict, S_body) : NULL;
    PyObject *mapping = body ? PyDict_GetItemWithError(dict, S_properties_attr) : NULL;
    PyObject *msg_id = mapping ? PyDict_GetItemWithError(dict, S_msg_id_attr) : NULL;
    PyObject *queue_id = msg_id ? PyDict_GetItemWithError(dict, S_queue_id) : NULL;
    PyObject *flag = queue_id ? PyDict_GetItemWithError(dict, S_flag) : NULL;
    PyObject *born = flag ? PyDict_GetItemWithError(dict, S_born_ms_attr) : NULL;
    if (born == NULL) goto none; /* a field missing: let Python decide (and raise) */
    int known = PySet_Contains(valid_topics, topic);
    if (known < 0) goto fail;
    if (!known || !PyBytes_Check(body) || PyBytes_GET_SIZE(body) > max_body) goto none;
    long long v;
    if (queue_id != Py_None && !exact_int(queue_id, 0, 1024, &v)) goto none;
    if (!exact_int(flag, 0, 1LL << 31, &v)) goto none;
    if (msg_id != Py_None && !valid_id(msg_id)) goto none;
    if (born != Py_None && !PyLong_CheckExact(born)) goto none;
    if ((props = PyObject_CallMethodNoArgs(mapping, S_copy)) == NULL) goto fail;
    if (!PyDict_CheckExact(props)) goto none;
    Py_ssize_t pos = 0;
    PyObject *name, *value;
    while (PyDict_Next(props, &pos, &name, &value)) {
        int bad = PySet_Contains(forbidden, name);
        if (bad < 0) goto fail;
        if (bad) goto none;
    }
    PyObject *encoded = cached_props(dict);
    if (encoded == NULL) goto fail;
    if (!PyBytes_Check(encoded) ||
        !canonical_props(PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded),
                         PyDict_GET_SIZE(props)))
        goto none;

    const char *name_text = NULL;
    int is_delay = 0;
    char value_text[32];
    long long due = now_ms;
    if (delay != Py_None) {
        if (!exact_int(delay, -(1LL << 53), 1LL << 53, &v)) goto none;
        name_text = "TIMER_DELAY_MS";
        is_delay = 1;
        snprintf(value_text, sizeof value_text, "%lld", v);
        due = now_ms + v;
    } else if (deliver_at != Py_None) {
        if (!exact_int(deliver_at, -(1LL << 53), 1LL << 53, &v)) goto none;
        name_text = "TIMER_DELIVER_MS";
        snprintf(value_text, sizeof value_text, "%lld", v);
        due = v;
    }
    char appended[256];
    Py_ssize_t appended_len = 0;
    if (name_text != NULL) {
        PyObject *text = PyUnicode_FromString(value_text);
        if (text == NULL) goto fail;
        int rc = PyDict_SetItem(props, is_delay ? S_delay_name : S_deliver_name, text);
        Py_DECREF(text);
        if (rc < 0) goto fail;
        entry(appended, &appended_len, name_text, value_text, (Py_ssize_t)strlen(value_text));
    }
    if (msg_id == Py_None) {
        if ((id = PyObject_CallNoArgs(new_id)) == NULL) goto fail;
        if (!valid_id(id)) goto none;
        if (PyDict_SetItem(props, S_uniq_key, id) < 0) goto fail;
        entry(appended, &appended_len, "UNIQ_KEY", (const char *)PyUnicode_DATA(id), 32);
    } else {
        id = Py_NewRef(msg_id);
    }
    PyObject *kind = K_immediate;
    if (due <= now_ms) {
        due = now_ms;
    } else {
        if (due - now_ms > max_delay) goto none;
        kind = K_timer;
        if (name_text == NULL || is_delay) {
            snprintf(value_text, sizeof value_text, "%lld", due);
            PyObject *text = PyUnicode_FromString(value_text);
            if (text == NULL) goto fail;
            int rc = PyDict_SetItem(props, S_deliver_name, text);
            Py_DECREF(text);
            if (rc < 0) goto fail;
            entry(appended, &appended_len, "TIMER_DELIVER_MS", value_text,
                  (Py_ssize_t)strlen(value_text));
        }
    }
    Py_ssize_t enc_len = PyBytes_GET_SIZE(encoded);
    if (enc_len + appended_len > max_props) goto none;
    if ((encoded_new = PyBytes_FromStringAndSize(NULL, enc_len + appended_len)) == NULL) goto fail;
    memcpy(PyBytes_AS_STRING(encoded_new), PyBytes_AS_STRING(encoded), enc_len);
    memcpy(PyBytes_AS_STRING(encoded_new) + enc_len, appended, appended_len);
    if ((proxy = PyDictProxy_New(props)) == NULL) goto fail;
    if ((new_dict = PyDict_Copy(dict)) == NULL) goto fail;
    PyObject *born_value = born;
    if (born == Py_None) {
        if ((due_obj = PyLong_FromLongLong(now_ms)) == NULL) goto fail;
        born_value = due_obj;
    }
    if (PyDict_SetItem(new_dict, S_properties_attr, proxy) < 0 ||
        PyDict_SetItem(new_dict, S_msg_id_attr, id) < 0 ||
        PyDict_SetItem(new_dict, S_born_ms_attr, born_value) < 0 ||
        PyDict_SetItem(new_dict, S_encoded, encoded_new) < 0)
        goto fail;
    if ((copy = ((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 0)) == NULL) goto fail;
    if (PyObject_GenericSetDict(copy, new_dict, NULL) < 0) goto fail;
    if (c->route == NULL) {
        result = Py_BuildValue("(OOL)", kind, copy, due);
    } else if ((result = c->route->tp_alloc(c->route, 4)) != NULL) {
        PyObject *due_ms = PyLong_FromLongLong(due);
        if (due_ms == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, 0, Py_NewRef(kind));
        PyTuple_SET_ITEM(result, 1, Py_NewRef(copy));
        PyTuple_SET_ITEM(result, 2, due_ms);
        PyTuple_SET_ITEM(result, 3, PyLong_FromLong(0)); /* level: none (a small int) */
    }
    goto done;
none:
    result = Py_NewRef(Py_None);
    goto done;
fail:
    result = NULL;
done:
    Py_DECREF(dict);
    Py_XDECREF(props);
    Py_XDECREF(new_dict);
    Py_XDECREF(encoded_new);
    Py_XDECREF(id);
    Py_XDECREF(proxy);
    Py_XDECREF(due_obj);
    Py_XDECREF(copy);
    return result;
}

PyObject *route_common(PyObject *self, PyObject *args) {
    PyObject *msg;
    send_t c = {0};
    if (!PyArg_ParseTuple(args, "OLOOLLLO!O!O!O", &msg, &c.now_ms, &c.delay, &c.deliver_at,
                          &c.max_body, &c.max_delay, &c.max_props, &PySet_Type, &c.valid_topics,
                          &PyFrozenSet_Type, &c.forbidden, &PyType_Type, &c.cls, &c.new_id))
        return NULL;
    return route_one(msg, &c);
}

/* route_common_batch(messages, start, now_ms, delay_ms, deliver_at_ms, max_body, max_delay,
 * max_props, valid_topics, forbidden, Message, new_id, Route) -> [Route, ...]: the routes of
 * messages[start:], made as Route tuples (level 0), up to the first message route_common
 * leaves to Python (the list is shorter then; its caller routes that one and goes on from the
 * next, so ids are taken in message order, as one call per message would). */
PyObject *route_common_batch(PyObject *self, PyObject *args) {
    PyObject *messages, *route_type;
    Py_ssize_t start;
    send_t c = {0};
    if (!PyArg_ParseTuple(args, "O!nLOOLLLO!O!O!OO!", &PyList_Type, &messages, &start, &c.now_ms,
                          &c.delay, &c.deliver_at, &c.max_body, &c.max_delay, &c.max_props,
                          &PySet_Type, &c.valid_topics, &PyFrozenSet_Type, &c.forbidden,
                          &PyType_Type, &c.cls, &c.new_id, &PyType_Type, &route_type))
        return NULL;
    PyTypeObject *rt = (PyTypeObject *)route_type;
    if (!PyType_IsSubtype(rt, &PyTuple_Type) || rt->tp_itemsize != sizeof(PyObject *)) {
        PyErr_SetString(PyExc_TypeError, "route_common_batch: Route must be a tuple type");
        return NULL;
    }
    c.route = rt;
    PyObject *routes = PyList_New(0);
    if (routes == NULL) return NULL;
    for (Py_ssize_t i = start < 0 ? 0 : start; i < PyList_GET_SIZE(messages); i++) {
        PyObject *msg = Py_NewRef(PyList_GET_ITEM(messages, i));
        PyObject *route = route_one(msg, &c);
        Py_DECREF(msg);
        if (route == NULL) {
            Py_DECREF(routes);
            return NULL;
        }
        if (route == Py_None) {
            Py_DECREF(route);
            break;
        }
        int rc = PyList_Append(routes, route);
        Py_DECREF(route);
        if (rc < 0) {
            Py_DECREF(routes);
            return NULL;
        }
    }
    return routes;
}
