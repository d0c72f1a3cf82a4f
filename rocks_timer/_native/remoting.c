/* The remoting front's plain send in C (rocks_timer/remoting/): the frames of a read with their
 * JSON headers, a send request's header checked into what its message is made of, and the JSON
 * header of a reply. Each has a Python reference the tests hold it equal to, and each answers
 * only what it is sure of: anything else is left to the reference, which then gives the answer
 * or the error, so an odd or damaged request is answered exactly as before.
 *
 * remoting_frames(data, at, max_frame, max_header, command_cls) -> (commands, at, stopped)
 *     The whole frames of ``data`` (a bytes-like object) from ``at`` with a JSON header this
 *     reader takes (an object whose code, opaque, flag and version are JSON integers, whose
 *     extFields hold only strings, without a \u escape of a surrogate), as
 *     ``command_cls(code, opaque, flag, remark, ext, body, language, version, 0)``: what
 *     ``command.decode`` makes of them. Stops before the first frame it does not take
 *     (``stopped`` true: a binary header, a frame that does not parse, anything else) or that is
 *     not whole yet (``stopped`` false). Reference: ``connection.split_frames_reference``.
 *
 * send_fields(code, ext, body, max_body) -> (topic, queue_id, flag, properties, born_ms,
 *                                            reconsume_times) or None
 *     A SEND_MESSAGE (10) or SEND_MESSAGE_V2 (310) header (``ext``, a dict) read and checked as
 *     ``ProducerHandlers._send_request`` reads it, for a plain send: not a batch, not
 *     compressed, a topic that is not a retry or dead-letter one, integers written plainly, a
 *     client UNIQ_KEY; the properties as ``decode_properties`` gives them, less WAIT (the
 *     caller then names the message by its client's key, ``producing.name_by_client_key``).
 *     None for everything else. Reference: ``producing.read_send_request``.
 *
 * json_header(code, ext, flag, language, opaque, remark, version) -> bytes or None
 *     The JSON header of a command whose fields are all text or ints, byte for byte as
 *     ``command.json_header`` writes it (the json module, fields in name order, non-ASCII kept);
 *     None when a value is not of those types or not encodable (the reference then raises). */
#include "native.h"

/* -- reading a JSON header ------------------------------------------------------------------ */
/* What a reading step answers: OK, LEAVE (not this reader's case: the reference decides) or
 * FAIL (a Python exception is set: out of memory). */
enum { OK = 0, LEAVE = 1, FAIL = -1 };

typedef struct {
    const unsigned char *p, *end;
} cursor_t;

static void skip_ws(cursor_t *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int hex_digit(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* The JSON string at ``c`` (on its opening quote), unescaped as UTF-8 into ``out`` (emptied
 * first). Raw bytes above 0x7F must be valid UTF-8 (the reference decodes the whole header
 * strictly first); a control character, an unknown escape or a \u of a surrogate is LEAVE. */
static int read_string(cursor_t *c, bytes_t *out) {
    out->len = 0;
    if (c->p >= c->end || *c->p != '"') return LEAVE;
    const unsigned char *start = ++c->p;
    int raw_high = 0;
    while (1) {
        const unsigned char *run = c->p;
        while (c->p < c->end && *c->p != '"' && *c->p != '\\' && *c->p >= 0x20) {
            raw_high |= *c->p & 0x80;
            c->p++;
        }
        if (c->p > run && bytes_add(out, run, c->p - run) < 0) return FAIL;
        if (c->p >= c->end || *c->p < 0x20) return LEAVE;
        if (*c->p == '"') break;
        /* a backslash */
        if (c->end - c->p < 2) return LEAVE;
        unsigned char e = c->p[1], one;
        c->p += 2;
        switch (e) {
        case '"': one = '"'; break;
        case '\\': one = '\\'; break;
        case '/': one = '/'; break;
        case 'b': one = '\b'; break;
        case 'f': one = '\f'; break;
        case 'n': one = '\n'; break;
        case 'r': one = '\r'; break;
        case 't': one = '\t'; break;
        case 'u': {
            if (c->end - c->p < 4) return LEAVE;
            int code = 0;
            for (int i = 0; i < 4; i++) {
                int d = hex_digit(c->p[i]);
                if (d < 0) return LEAVE;
                code = code << 4 | d;
            }
            c->p += 4;
            if (code >= 0xD800 && code <= 0xDFFF) return LEAVE;
            unsigned char utf8[3];
            Py_ssize_t n;
            if (code < 0x80) {
                utf8[0] = (unsigned char)code;
                n = 1;
            } else if (code < 0x800) {
                utf8[0] = 0xC0 | code >> 6;
                utf8[1] = 0x80 | (code & 0x3F);
                n = 2;
            } else {
                utf8[0] = 0xE0 | code >> 12;
                utf8[1] = 0x80 | (code >> 6 & 0x3F);
                utf8[2] = 0x80 | (code & 0x3F);
                n = 3;
            }
            if (bytes_add(out, utf8, n) < 0) return FAIL;
            continue;
        }
        default:
            return LEAVE;
        }
        if (bytes_add(out, &one, 1) < 0) return FAIL;
    }
    const unsigned char *stop = c->p++;  /* past the closing quote */
    if (raw_high) {  /* strict UTF-8, as the reference decodes the header */
        PyObject *check = PyUnicode_DecodeUTF8((const char *)start, stop - start, NULL);
        if (check == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return FAIL;
            PyErr_Clear();
            return LEAVE;
        }
        Py_DECREF(check);
    }
    return OK;
}

/* ``out`` (valid UTF-8 from read_string) as a str: new reference or NULL. */
static PyObject *as_str(const bytes_t *b) {
    return PyUnicode_DecodeUTF8((const char *)b->data, b->len, NULL);
}

/* A JSON integer (``-?(0|[1-9][0-9]*)`` not followed by a fraction or exponent), at most 18
 * digits; LEAVE otherwise. */
static int read_int(cursor_t *c, long long *out) {
    const unsigned char *p = c->p;
    int negative = p < c->end && *p == '-';
    p += negative;
    const unsigned char *digits = p;
    long long v = 0;
    while (p < c->end && *p >= '0' && *p <= '9' && p - digits < 19) v = v * 10 + (*p++ - '0');
    Py_ssize_t n = p - digits;
    if (n == 0 || n > 18 || (n > 1 && *digits == '0')) return LEAVE;
    if (p < c->end && (*p == '.' || *p == 'e' || *p == 'E' || (*p >= '0' && *p <= '9')))
        return LEAVE;
    c->p = p;
    *out = negative ? -v : v;
    return OK;
}

static int literal(cursor_t *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return 0;
    c->p += n;
    return 1;
}

/* The kind of value at ``c``: 's'tring, 'i'nteger, 'n'ull, 'b'oolean, 'o'bject, or 0 for
 * anything else (a float, an array, ...: LEAVE). Consumes nothing. */
static int peek_kind(const cursor_t *c) {
    if (c->p >= c->end) return 0;
    unsigned char ch = *c->p;
    if (ch == '"') return 's';
    if (ch == '-' || (ch >= '0' && ch <= '9')) return 'i';
    if (ch == 'n') return 'n';
    if (ch == 't' || ch == 'f') return 'b';
    if (ch == '{') return 'o';
    return 0;
}

/* Skip a value of a key the reader does not use: a string, an integer, true, false or null
 * (the reference reads any JSON there; anything else is LEAVE). */
static int skip_value(cursor_t *c, bytes_t *scratch) {
    long long ignored;
    switch (peek_kind(c)) {
    case 's': return read_string(c, scratch);
    case 'i': return read_int(c, &ignored);
    case 'n': return literal(c, "null") ? OK : LEAVE;
    case 'b': return literal(c, "true") || literal(c, "false") ? OK : LEAVE;
    default: return LEAVE;
    }
}

/* After a member: a comma (then 1) or the closing brace (then 0); LEAVE as -2. */
static int next_member(cursor_t *c) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ',') { c->p++; skip_ws(c); return 1; }
    if (c->p < c->end && *c->p == '}') { c->p++; return 0; }
    return -2;
}

/* extFields: an object of strings, into a new dict (``*ext``). */
static int read_ext(cursor_t *c, bytes_t *scratch, PyObject **ext) {
    c->p++;  /* the brace */
    PyObject *dict = PyDict_New();
    if (dict == NULL) return FAIL;
    int rc = LEAVE;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        *ext = dict;
        return OK;
    }
    while (1) {
        if ((rc = read_string(c, scratch)) != OK) goto fail;
        PyObject *key = as_str(scratch);
        if (key == NULL) { rc = FAIL; goto fail; }
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') { Py_DECREF(key); rc = LEAVE; goto fail; }
        c->p++;
        skip_ws(c);
        if ((rc = read_string(c, scratch)) != OK) { Py_DECREF(key); goto fail; }
        PyObject *value = as_str(scratch);
        if (value == NULL || PyDict_SetItem(dict, key, value) < 0) {
            Py_DECREF(key);
            Py_XDECREF(value);
            rc = FAIL;
            goto fail;
        }
        Py_DECREF(key);
        Py_DECREF(value);
        int more = next_member(c);
        if (more == -2) { rc = LEAVE; goto fail; }
        if (!more) break;
    }
    *ext = dict;
    return OK;
fail:
    Py_DECREF(dict);
    return rc;
}

typedef struct {
    long long code, opaque, flag, version;
    int has_code;
    PyObject *remark;    /* str, or NULL for None */
    PyObject *language;  /* str, or NULL for "OTHER" */
    PyObject *ext;       /* dict, or NULL for {} */
} header_t;

static void header_clear(header_t *h) {
    Py_CLEAR(h->remark);
    Py_CLEAR(h->language);
    Py_CLEAR(h->ext);
}

static int name_is(const bytes_t *b, const char *name) {
    size_t n = strlen(name);
    return (size_t)b->len == n && memcmp(b->data, name, n) == 0;
}

/* A header's text, or LEAVE. Later members of the same name replace earlier ones, as json's
 * objects do. */
static int read_header(const unsigned char *p, Py_ssize_t n, header_t *h, bytes_t *name,
                       bytes_t *scratch) {
    cursor_t c = {p, p + n};
    int rc;
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '{') return LEAVE;
    c.p++;
    skip_ws(&c);
    if (c.p < c.end && *c.p == '}') return LEAVE;  /* no code */
    while (1) {
        if ((rc = read_string(&c, name)) != OK) return rc;
        skip_ws(&c);
        if (c.p >= c.end || *c.p != ':') return LEAVE;
        c.p++;
        skip_ws(&c);
        int kind = peek_kind(&c);
        long long *number = name_is(name, "code") ? &h->code
                            : name_is(name, "opaque") ? &h->opaque
                            : name_is(name, "flag") ? &h->flag
                            : name_is(name, "version") ? &h->version : NULL;
        if (number != NULL) {
            if (kind != 'i' || read_int(&c, number) != OK) return LEAVE;
            h->has_code |= number == &h->code;
        } else if (name_is(name, "remark") || name_is(name, "language")) {
            PyObject **slot = name_is(name, "remark") ? &h->remark : &h->language;
            if (kind == 's') {
                if ((rc = read_string(&c, scratch)) != OK) return rc;
                PyObject *text = as_str(scratch);
                if (text == NULL) return FAIL;
                Py_XSETREF(*slot, text);
            } else {
                if (kind == 'o' || (rc = skip_value(&c, scratch)) != OK)
                    return kind == 'o' ? LEAVE : rc;
                Py_CLEAR(*slot);  /* not text: None, or "OTHER" */
            }
        } else if (name_is(name, "extFields")) {
            if (kind == 'o') {
                PyObject *ext = NULL;
                if ((rc = read_ext(&c, scratch, &ext)) != OK) return rc;
                Py_XSETREF(h->ext, ext);
            } else if (kind == 'n' && literal(&c, "null")) {
                Py_CLEAR(h->ext);
            } else {
                return LEAVE;
            }
        } else if ((rc = skip_value(&c, scratch)) != OK) {
            return rc;
        }
        int more = next_member(&c);
        if (more == -2) return LEAVE;
        if (!more) break;
    }
    skip_ws(&c);
    return c.p == c.end && h->has_code ? OK : LEAVE;
}

static PyObject *S_other, *S_empty;

PyObject *remoting_frames(PyObject *self, PyObject *args) {
    PyObject *data, *command_cls;
    Py_ssize_t at, max_frame, max_header;
    if (!PyArg_ParseTuple(args, "OnnnO", &data, &at, &max_frame, &max_header, &command_cls))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t end = view.len;
    PyObject *commands = PyList_New(0), *result = NULL;
    bytes_t name, scratch;
    bytes_init(&name);
    bytes_init(&scratch);
    int stopped = 0;
    if (commands == NULL) goto done;
    if (at < 0 || at > end) {
        PyErr_SetString(PyExc_ValueError, "remoting_frames: at is outside the data");
        goto done;
    }
    while (end - at >= 8) {
        long long total = (int32_t)read_be32(buf + at);
        uint32_t mark = read_be32(buf + at + 4);
        long long header_len = mark & 0xFFFFFF;
        unsigned kind = mark >> 24;
        long long room = total - 4 < max_header ? total - 4 : max_header;
        if (total < 4 || total > max_frame || header_len > room || kind > 1) {
            stopped = 1;  /* the reference raises the frame's error */
            break;
        }
        if (end - at < 4 + total) break;
        if (kind != 0) { stopped = 1; break; }  /* a binary header */
        header_t h = {0, 0, 0, 0, 0, NULL, NULL, NULL};
        int rc = read_header(buf + at + 8, (Py_ssize_t)header_len, &h, &name, &scratch);
        if (rc != OK) {
            header_clear(&h);
            if (rc == FAIL) goto done;
            stopped = 1;
            break;
        }
        PyObject *body = PyBytes_FromStringAndSize((const char *)buf + at + 8 + header_len,
                                                   (Py_ssize_t)(total - 4 - header_len));
        PyObject *ext = h.ext ? h.ext : PyDict_New();
        h.ext = NULL;
        PyObject *cmd = NULL;
        if (body != NULL && ext != NULL)
            cmd = PyObject_CallFunction(command_cls, "LLLOOOOLi", h.code, h.opaque, h.flag,
                                        h.remark ? h.remark : Py_None, ext, body,
                                        h.language ? h.language : S_other, h.version, 0);
        Py_XDECREF(body);
        Py_XDECREF(ext);
        header_clear(&h);
        if (cmd == NULL) goto done;
        rc = PyList_Append(commands, cmd);
        Py_DECREF(cmd);
        if (rc < 0) goto done;
        at += 4 + total;
    }
    result = Py_BuildValue("(OnO)", commands, at, stopped ? Py_True : Py_False);
done:
    bytes_free(&name);
    bytes_free(&scratch);
    Py_XDECREF(commands);
    PyBuffer_Release(&view);
    return result;
}

/* -- a send request's header ---------------------------------------------------------------- */
static PyObject *S_topic_v1, *S_queue_v1, *S_sys_v1, *S_born_v1, *S_flag_v1, *S_props_v1,
    *S_recon_v1, *S_max_recon_v1, *S_batch_v1, *S_topic_v2, *S_queue_v2, *S_sys_v2, *S_born_v2,
    *S_flag_v2, *S_props_v2, *S_recon_v2, *S_max_recon_v2, *S_batch_v2, *S_wait, *S_uniq;

/* Header.get: under the V2 letter first (a V2 request), then under the long name. Borrowed;
 * NULL when absent (no exception) or when not a str (then *odd is set). */
static PyObject *get_field(PyObject *ext, int v2, PyObject *letter, PyObject *name, int *odd) {
    PyObject *value = v2 ? PyDict_GetItemWithError(ext, letter) : NULL;
    if (value == NULL && !PyErr_Occurred()) value = PyDict_GetItemWithError(ext, name);
    if (value == NULL) {
        if (PyErr_Occurred()) { PyErr_Clear(); *odd = 1; }
        return NULL;
    }
    if (!PyUnicode_CheckExact(value)) { *odd = 1; return NULL; }
    return value;
}

/* Header.integer for a value written plainly (``-?[0-9]{1,18}``) within [lo, hi]; absent,
 * "" or "null" is ``dflt``. 0 when Python must read it (or refuse it). */
static int header_int(PyObject *ext, int v2, PyObject *letter, PyObject *name, long long dflt,
                      long long lo, long long hi, long long *out) {
    int odd = 0;
    PyObject *value = get_field(ext, v2, letter, name, &odd);
    if (odd) return 0;
    if (value == NULL) { *out = dflt; return 1; }
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(value, &n);
    if (p == NULL) { PyErr_Clear(); return 0; }
    if (n == 0 || (n == 4 && memcmp(p, "null", 4) == 0)) { *out = dflt; return 1; }
    int negative = *p == '-';
    Py_ssize_t digits = n - negative;
    if (digits < 1 || digits > 18) return 0;
    long long v = 0;
    for (Py_ssize_t i = negative; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        v = v * 10 + (p[i] - '0');
    }
    v = negative ? -v : v;
    if (v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int topic_char(unsigned char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-' || ch == '|' || ch == '%';
}

/* decode_properties: name\x01value\x02 per entry; entries with an empty name or value are
 * skipped, the value runs to the entry's end (a later \x01 is part of it), a name seen again
 * keeps its place and takes the later value. New dict or NULL. */
static PyObject *decode_props(const char *p, Py_ssize_t n) {
    PyObject *props = PyDict_New();
    if (props == NULL) return NULL;
    Py_ssize_t at = 0;
    while (at <= n) {
        const char *entry = p + at;
        const char *stop = memchr(entry, 2, n - at);
        Py_ssize_t len = stop ? stop - entry : n - at;
        const char *sep = memchr(entry, 1, len);
        if (sep != NULL && sep > entry && sep + 1 < entry + len) {
            PyObject *name = PyUnicode_DecodeUTF8(entry, sep - entry, NULL);
            PyObject *value = name ? PyUnicode_DecodeUTF8(sep + 1, entry + len - sep - 1, NULL)
                                   : NULL;
            int rc = value ? PyDict_SetItem(props, name, value) : -1;
            Py_XDECREF(name);
            Py_XDECREF(value);
            if (rc < 0) { Py_DECREF(props); return NULL; }
        }
        at += len + 1;
    }
    return props;
}

PyObject *send_fields(PyObject *self, PyObject *args) {
    long long max_body;
    PyObject *code_obj, *ext, *body;
    if (!PyArg_ParseTuple(args, "OO!O!L", &code_obj, &PyDict_Type, &ext, &PyBytes_Type, &body,
                          &max_body))
        return NULL;
    int overflow = 0;
    long long code = PyLong_CheckExact(code_obj)
        ? PyLong_AsLongLongAndOverflow(code_obj, &overflow) : -1;
    if (code == -1 && PyErr_Occurred()) return NULL;
    if (overflow || (code != 10 && code != 310)) Py_RETURN_NONE;
    int v2 = code == 310, odd = 0;
    PyObject *topic = get_field(ext, v2, S_topic_v2, S_topic_v1, &odd);
    if (topic == NULL || !PyUnicode_IS_ASCII(topic)) Py_RETURN_NONE;
    Py_ssize_t topic_len = PyUnicode_GET_LENGTH(topic);
    const unsigned char *t = PyUnicode_1BYTE_DATA(topic);
    if (topic_len < 1 || topic_len > 127 || t[0] == '%') Py_RETURN_NONE;  /* % : retry, DLQ */
    for (Py_ssize_t i = 0; i < topic_len; i++)
        if (!topic_char(t[i])) Py_RETURN_NONE;
    long long queue_id, sys_flag, born, flag, reconsume, max_reconsume;
    if (!header_int(ext, v2, S_queue_v2, S_queue_v1, 0, -1, 3, &queue_id) ||
        !header_int(ext, v2, S_sys_v2, S_sys_v1, 0, 0, 0x7FFFFFFF, &sys_flag) ||
        !header_int(ext, v2, S_born_v2, S_born_v1, 0, 0, INT64_MAX, &born) ||
        !header_int(ext, v2, S_flag_v2, S_flag_v1, 0, -0x80000000LL, 0x7FFFFFFF, &flag) ||
        !header_int(ext, v2, S_recon_v2, S_recon_v1, 0, 0, 0x7FFFFFFF, &reconsume) ||
        !header_int(ext, v2, S_max_recon_v2, S_max_recon_v1, 16, -1, 0x7FFFFFFF,
                    &max_reconsume))
        Py_RETURN_NONE;
    if (sys_flag & 1) Py_RETURN_NONE;  /* compressed */
    PyObject *batch = get_field(ext, v2, S_batch_v2, S_batch_v1, &odd);
    if (odd) Py_RETURN_NONE;
    if (batch != NULL) {
        Py_ssize_t n;
        const char *b = PyUnicode_AsUTF8AndSize(batch, &n);
        if (b == NULL) { PyErr_Clear(); Py_RETURN_NONE; }
        if (!((n == 5 && memcmp(b, "false", 5) == 0) || (n == 1 && b[0] == '0')))
            Py_RETURN_NONE;
    }
    if (PyBytes_GET_SIZE(body) > max_body) Py_RETURN_NONE;
    PyObject *text = get_field(ext, v2, S_props_v2, S_props_v1, &odd);
    if (odd || (text != NULL && PyUnicode_GET_LENGTH(text) > 65536)) Py_RETURN_NONE;
    Py_ssize_t n = 0;
    const char *p = "";
    if (text != NULL && (p = PyUnicode_AsUTF8AndSize(text, &n)) == NULL) {
        PyErr_Clear();  /* a lone surrogate: the reference decides */
        Py_RETURN_NONE;
    }
    PyObject *props = decode_props(p, n);
    if (props == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (PyDict_GetItemWithError(props, S_uniq) == NULL ||
        (PyDict_GetItemWithError(props, S_wait) != NULL && PyDict_DelItem(props, S_wait) < 0)) {
        Py_DECREF(props);
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;  /* no client id: the reference makes a new one */
    }
    (void)max_reconsume;  /* checked: only a retry topic uses it, and those go to Python */
    PyObject *born_ms = born ? PyLong_FromLongLong(born) : Py_NewRef(Py_None);
    PyObject *result = born_ms == NULL ? NULL
        : Py_BuildValue("(OLLOOL)", topic, queue_id < 0 ? 0LL : queue_id, flag, props, born_ms,
                        reconsume);
    Py_XDECREF(born_ms);
    Py_DECREF(props);
    return result;
}

/* -- a reply's JSON header ------------------------------------------------------------------ */
/* A str as json's encoder writes it with ensure_ascii off: quoted, with \" \\ \n \r \t \b \f
 * and \u00XX (lower-case hex) for the other control characters, everything else as UTF-8. 1 on
 * success, 0 when it is not a str or holds a lone surrogate (LEAVE), -1 on failure. */
static int add_json_str(bytes_t *b, PyObject *text) {
    if (!PyUnicode_CheckExact(text)) return 0;
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(text, &n);
    if (p == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
        PyErr_Clear();
        return 0;
    }
    if (bytes_room(b, 2 + 6 * n) < 0) return -1;
    unsigned char *o = b->data + b->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\') { *o++ = ch; continue; }
        *o++ = '\\';
        switch (ch) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = "0123456789abcdef"[ch >> 4];
            *o++ = "0123456789abcdef"[ch & 15];
        }
    }
    *o++ = '"';
    b->len = o - b->data;
    return 1;
}

/* An int as json writes it (int.__repr__); 0 when it is not an exact int. */
static int add_json_int(bytes_t *b, PyObject *value) {
    if (!PyLong_CheckExact(value)) return 0;
    PyObject *text = PyObject_Str(value);
    if (text == NULL) return -1;
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(text, &n);
    int rc = p == NULL ? -1 : bytes_add(b, p, n) < 0 ? -1 : 1;
    Py_DECREF(text);
    return rc;
}

PyObject *json_header(PyObject *self, PyObject *args) {
    PyObject *code, *ext, *flag, *language, *opaque, *remark, *version;
    if (!PyArg_ParseTuple(args, "OO!OOOOO", &code, &PyDict_Type, &ext, &flag, &language,
                          &opaque, &remark, &version))
        return NULL;
    bytes_t b;
    bytes_init(&b);
    PyObject *result = NULL;
    int rc;
/* each step: 1 done, 0 LEAVE, -1 failed (an exception is set) */
#define STEP(call) do { if ((rc = (call)) <= 0) goto out; } while (0)
#define ADDED(call) ((call) == 0 ? 1 : -1)
    STEP(ADDED(bytes_text(&b, "{\"code\":")));
    STEP(add_json_int(&b, code));
    STEP(ADDED(bytes_text(&b, ",\"extFields\":{")));
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    while (PyDict_Next(ext, &pos, &key, &value)) {
        if (i++) STEP(ADDED(bytes_add(&b, ",", 1)));
        STEP(add_json_str(&b, key));
        STEP(ADDED(bytes_add(&b, ":", 1)));
        STEP(add_json_str(&b, value));
    }
    STEP(ADDED(bytes_text(&b, "},\"flag\":")));
    STEP(add_json_int(&b, flag));
    STEP(ADDED(bytes_text(&b, ",\"language\":")));
    STEP(add_json_str(&b, language));
    STEP(ADDED(bytes_text(&b, ",\"opaque\":")));
    STEP(add_json_int(&b, opaque));
    if (remark != Py_None) {
        STEP(ADDED(bytes_text(&b, ",\"remark\":")));
        STEP(add_json_str(&b, remark));
    }
    STEP(ADDED(bytes_text(&b, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":")));
    STEP(add_json_int(&b, version));
    STEP(ADDED(bytes_add(&b, "}", 1)));
#undef STEP
#undef ADDED
    result = PyBytes_FromStringAndSize((const char *)b.data, b.len);
out:
    bytes_free(&b);
    if (result == NULL && !PyErr_Occurred()) Py_RETURN_NONE;  /* LEAVE: the reference decides */
    return result;
}

int remoting_init(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&S_other, "OTHER"}, {&S_empty, ""}, {&S_wait, "WAIT"}, {&S_uniq, "UNIQ_KEY"},
        {&S_topic_v1, "topic"}, {&S_queue_v1, "queueId"}, {&S_sys_v1, "sysFlag"},
        {&S_born_v1, "bornTimestamp"}, {&S_flag_v1, "flag"}, {&S_props_v1, "properties"},
        {&S_recon_v1, "reconsumeTimes"}, {&S_max_recon_v1, "maxReconsumeTimes"},
        {&S_batch_v1, "batch"}, {&S_topic_v2, "b"}, {&S_queue_v2, "e"}, {&S_sys_v2, "f"},
        {&S_born_v2, "g"}, {&S_flag_v2, "h"}, {&S_props_v2, "i"}, {&S_recon_v2, "j"},
        {&S_max_recon_v2, "l"}, {&S_batch_v2, "m"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return -1;
    return 0;
}
