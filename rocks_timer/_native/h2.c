/* rocks_timer._native.h2: a sans-I/O gRPC server connection over libnghttp2.
 *
 * One ``Connection`` object per client connection. ``feed(bytes)`` hands it what the socket
 * read and returns the calls that became ready; the reply methods queue responses; ``take()``
 * returns the bytes to write. It never touches a socket or the event loop: the gRPC front's
 * asyncio protocol (rocks_timer/proxy/native_server.py) owns those. nghttp2 does the HTTP/2 part
 * (frames, HPACK, flow control, SETTINGS, PING, GOAWAY, its own floods' limits); this file does
 * gRPC's part: the request headers (:path, metadata, grpc-timeout), the length-prefixed
 * messages, the response headers, messages and trailers.
 *
 * The reference is grpcio's server (the front's other transport): tests/fronts/ send the same
 * requests through both and compare what comes back.
 *
 * Events returned by feed, one tuple each:
 *   (CALL, stream_id, method, metadata, timeout_s, message)
 *       ``method`` is the value the path maps to in the tables given to the constructor. A call
 *       of a ``single`` method (its request is one message: unary and server-streaming RPCs) is
 *       announced once the request is whole (``message`` is its bytes); a ``streaming`` one's
 *       (a request stream) at the end of its headers (``message`` None, then MESSAGE and END).
 *       ``metadata`` is a list of (name, value) str pairs (the request's custom headers);
 *       ``timeout_s`` the grpc-timeout in seconds, or -1.0 when the client gave none.
 *   (MESSAGE, stream_id, bytes)      one whole request message of a request stream
 *   (END, stream_id)                 the client half-closed a request stream
 *   (RESET, stream_id)               an announced call ended before its answer: the client reset
 *                                    it, the connection went, or the codec refused a message
 * The codec answers by itself, without an event, what needs no handler: an unknown method
 * (UNIMPLEMENTED), a message over the maximum (RESOURCE_EXHAUSTED), a compressed message or a
 * single-request call without exactly one message (INTERNAL), an unknown grpc-encoding (UNIMPLEMENTED),
 * a request that is not gRPC (HTTP 415 or 405); headers over the limit reset the stream.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <string.h>

enum { EV_CALL = 0, EV_MESSAGE = 1, EV_END = 2, EV_RESET = 3 };

/* gRPC status codes the codec answers by itself. */
enum { ST_OK = 0, ST_INTERNAL = 13, ST_UNIMPLEMENTED = 12, ST_RESOURCE_EXHAUSTED = 8 };

#define PREFIX 5                 /* compressed flag + big-endian length */
#define STATUS_TEXT_MAX 1024     /* grpc-message is cut here (before percent-encoding) */

typedef struct Stream {
    struct Stream *prev, *next;  /* the connection's open streams (freed with it) */
    int32_t id;
    PyObject *method;            /* the table's value for :path; NULL when unknown */
    PyObject *metadata;          /* list of (name, value); handed to the CALL event */
    PyObject *message;           /* a single-request call's request, once whole */
    double timeout_s;
    size_t header_bytes;
    int single, announced, finished, response_started, trailers_pending, messages;
    int bad_method, bad_type, bad_encoding;
    char path[256];
    size_t path_len;             /* > sizeof(path): too long to be a method */
    unsigned char *in;           /* a request message being reassembled */
    size_t in_len, in_cap;
    unsigned char *out;          /* response bytes nghttp2 has not taken yet */
    size_t out_len, out_pos, out_cap;
    int status_code;             /* the trailers to send once ``out`` is drained */
    PyObject *status_text;       /* bytes, already percent-encoded */
} Stream;

typedef struct {
    PyObject_HEAD
    nghttp2_session *session;
    PyObject *single;            /* dict: path bytes -> method whose request is one message */
    PyObject *streaming;         /* dict: path bytes -> method whose request is a stream */
    PyObject *events;            /* list being filled by a feed, or NULL */
    Py_ssize_t max_message;
    size_t max_header_bytes;
    size_t buffered;             /* request bytes held in reassembly, all streams */
    size_t max_buffered;         /* past it, the stream whose data goes over is refused */
    int failed;                  /* a Python error was raised inside a callback */
    int streams;                 /* open streams (for stats and tests) */
    Stream *open;                /* their list: nghttp2_session_del frees none of ours */
} Connection;

#define NV(name, value) \
    {(uint8_t *)(name), (uint8_t *)(value), sizeof(name) - 1, sizeof(value) - 1, \
     NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE}

static nghttp2_nv RESPONSE_HEADERS[] = {NV(":status", "200"),
                                        NV("content-type", "application/grpc")};

/* -- small buffers ------------------------------------------------------------------------- */

static int grow(unsigned char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t cap2 = *cap ? *cap : 256;
    while (cap2 < need) cap2 *= 2;
    unsigned char *p = PyMem_Realloc(*buf, cap2);
    if (p == NULL) return -1;
    *buf = p;
    *cap = cap2;
    return 0;
}

static void stream_free(Stream *s) {
    Py_XDECREF(s->method);
    Py_XDECREF(s->metadata);
    Py_XDECREF(s->message);
    Py_XDECREF(s->status_text);
    PyMem_Free(s->in);
    PyMem_Free(s->out);
    PyMem_Free(s);
}

static void unlink_stream(Connection *c, Stream *s) {
    if (s->prev != NULL) s->prev->next = s->next;
    else c->open = s->next;
    if (s->next != NULL) s->next->prev = s->prev;
}

/* Every change of a stream's reassembly length goes through here, so the connection's total
 * (``buffered``) stays exact: nghttp2 hands out window as we take data, so this is the bound
 * on what one connection can make us hold. */
static void set_in_len(Connection *c, Stream *s, size_t n) {
    c->buffered = c->buffered + n - s->in_len;
    s->in_len = n;
}

static Stream *stream_of(Connection *c, int32_t id) {
    return id > 0 ? nghttp2_session_get_stream_user_data(c->session, id) : NULL;
}

static int event(Connection *c, PyObject *tuple) {
    if (tuple == NULL) return -1;
    if (c->events == NULL && (c->events = PyList_New(0)) == NULL) {
        Py_DECREF(tuple);
        return -1;
    }
    int rc = PyList_Append(c->events, tuple);
    Py_DECREF(tuple);
    return rc;
}

/* grpc-message: percent-encoded UTF-8 (the gRPC spec), cut at STATUS_TEXT_MAX bytes. */
static PyObject *status_text(const char *text, Py_ssize_t n) {
    static const char hex[] = "0123456789ABCDEF";
    if (n > STATUS_TEXT_MAX) n = STATUS_TEXT_MAX;
    PyObject *out = PyBytes_FromStringAndSize(NULL, 3 * n);
    if (out == NULL) return NULL;
    char *p = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch >= 0x20 && ch <= 0x7e && ch != '%') {
            *p++ = (char)ch;
        } else {
            *p++ = '%';
            *p++ = hex[ch >> 4];
            *p++ = hex[ch & 15];
        }
    }
    _PyBytes_Resize(&out, p - PyBytes_AS_STRING(out));
    return out;
}

/* -- sending ------------------------------------------------------------------------------- */

static int submit_trailers(nghttp2_session *session, Stream *s) {
    char code[12];
    int n = snprintf(code, sizeof code, "%d", s->status_code);
    nghttp2_nv nv[2] = {
        {(uint8_t *)"grpc-status", (uint8_t *)code, 11, (size_t)n, NGHTTP2_NV_FLAG_NO_COPY_NAME},
        {(uint8_t *)"grpc-message", NULL, 12, 0, NGHTTP2_NV_FLAG_NO_COPY_NAME}};
    size_t count = 1;
    if (s->status_text != NULL && PyBytes_GET_SIZE(s->status_text) > 0) {
        nv[1].value = (uint8_t *)PyBytes_AS_STRING(s->status_text);
        nv[1].valuelen = (size_t)PyBytes_GET_SIZE(s->status_text);
        count = 2;
    }
    return nghttp2_submit_trailer(session, s->id, nv, count);
}

static ssize_t read_out(nghttp2_session *session, int32_t id, uint8_t *buf, size_t length,
                        uint32_t *flags, nghttp2_data_source *source, void *user) {
    (void)user;
    Stream *s = source->ptr;
    size_t avail = s->out_len - s->out_pos;
    if (avail == 0 && !s->trailers_pending) return NGHTTP2_ERR_DEFERRED;
    size_t n = avail < length ? avail : length;
    memcpy(buf, s->out + s->out_pos, n);
    s->out_pos += n;
    if (s->out_pos == s->out_len) {
        s->out_pos = s->out_len = 0;
        if (s->trailers_pending) {
            *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
            s->trailers_pending = 0;
            if (submit_trailers(session, s) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
    }
    (void)id;
    return (ssize_t)n;
}

static int start_response(Connection *c, Stream *s) {
    nghttp2_data_provider provider = {.source = {.ptr = s}, .read_callback = read_out};
    s->response_started = 1;
    return nghttp2_submit_response(c->session, s->id, RESPONSE_HEADERS, 2, &provider);
}

static int append_message(Stream *s, const char *data, Py_ssize_t n) {
    if (grow(&s->out, &s->out_cap, s->out_len + PREFIX + (size_t)n) < 0) return -1;
    unsigned char *p = s->out + s->out_len;
    p[0] = 0;
    p[1] = (unsigned char)(n >> 24);
    p[2] = (unsigned char)(n >> 16);
    p[3] = (unsigned char)(n >> 8);
    p[4] = (unsigned char)n;
    memcpy(p + PREFIX, data, (size_t)n);
    s->out_len += PREFIX + (size_t)n;
    return 0;
}

/* The call's last answer: trailers after the data, or one HEADERS frame that ends the stream
 * ("trailers-only") when nothing was sent yet. */
static int finish(Connection *c, Stream *s, int code, PyObject *text) {
    s->finished = 1;
    s->status_code = code;
    Py_XSETREF(s->status_text, text);
    if (s->response_started) {
        s->trailers_pending = 1;
        int rc = nghttp2_session_resume_data(c->session, s->id);
        return rc == NGHTTP2_ERR_INVALID_ARGUMENT ? 0 : rc;  /* not deferred: it reads anyway */
    }
    char number[12];
    int n = snprintf(number, sizeof number, "%d", code);
    nghttp2_nv nv[4] = {
        NV(":status", "200"), NV("content-type", "application/grpc"),
        {(uint8_t *)"grpc-status", (uint8_t *)number, 11, (size_t)n, NGHTTP2_NV_FLAG_NO_COPY_NAME},
        {(uint8_t *)"grpc-message", NULL, 12, 0, NGHTTP2_NV_FLAG_NO_COPY_NAME}};
    size_t count = 3;
    if (text != NULL && PyBytes_GET_SIZE(text) > 0) {
        nv[3].value = (uint8_t *)PyBytes_AS_STRING(text);
        nv[3].valuelen = (size_t)PyBytes_GET_SIZE(text);
        count = 4;
    }
    s->response_started = 1;
    return nghttp2_submit_response(c->session, s->id, nv, count, NULL);
}

/* The codec refuses a call by itself: the client gets ``code`` and ``text``; Python, if it knew
 * the call, gets RESET so the handler stops. Further request data of the stream is dropped. */
static int refuse(Connection *c, Stream *s, int code, const char *text) {
    if (s->finished) return 0;
    PyObject *encoded = status_text(text, (Py_ssize_t)strlen(text));
    if (encoded == NULL) return -1;
    if (s->announced && event(c, Py_BuildValue("(ii)", EV_RESET, s->id)) < 0) {
        Py_DECREF(encoded);
        return -1;
    }
    s->announced = 0;
    Py_CLEAR(s->message);
    set_in_len(c, s, 0);
    if (finish(c, s, code, encoded) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "nghttp2 refused a status");
        return -1;
    }
    return 0;
}

static int refuse_http(Connection *c, Stream *s, const char *http_status, const char *text) {
    s->finished = 1;
    nghttp2_nv nv[4] = {
        {(uint8_t *)":status", (uint8_t *)http_status, 7, strlen(http_status),
         NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE},
        NV("content-type", "application/grpc"), NV("grpc-status", "13"),
        {(uint8_t *)"grpc-message", (uint8_t *)text, 12, strlen(text),
         NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE}};
    s->response_started = 1;
    return nghttp2_submit_response(c->session, s->id, nv, 4, NULL);
}

/* -- receiving ----------------------------------------------------------------------------- */

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user) {
    (void)user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    Stream *s = PyMem_Calloc(1, sizeof(Stream));
    if (s == NULL) return NGHTTP2_ERR_CALLBACK_FAILURE;
    s->id = frame->hd.stream_id;
    s->timeout_s = -1.0;
    s->bad_method = 1;   /* until a :method POST is seen */
    s->bad_type = 1;     /* until a gRPC content-type is seen */
    Connection *c = user;
    if (nghttp2_session_set_stream_user_data(session, s->id, s) != 0) {
        PyMem_Free(s);  /* no such stream (refused already): nothing to keep */
        return 0;
    }
    c->streams++;
    s->next = c->open;
    if (c->open != NULL) c->open->prev = s;
    c->open = s;
    return 0;
}

static int equals(const uint8_t *p, size_t n, const char *lit) {
    size_t m = strlen(lit);
    return n == m && memcmp(p, lit, m) == 0;
}

/* grpc-timeout: up to 8 digits and a unit (H M S m u n). */
static double parse_timeout(const uint8_t *v, size_t n) {
    if (n < 2 || n > 9) return -1.0;
    double amount = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (v[i] < '0' || v[i] > '9') return -1.0;
        amount = amount * 10 + (v[i] - '0');
    }
    switch (v[n - 1]) {
    case 'H': return amount * 3600;
    case 'M': return amount * 60;
    case 'S': return amount;
    case 'm': return amount / 1e3;
    case 'u': return amount / 1e6;
    case 'n': return amount / 1e9;
    default: return -1.0;
    }
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user) {
    (void)flags;
    Connection *c = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    Stream *s = stream_of(c, frame->hd.stream_id);
    if (s == NULL) return 0;
    s->header_bytes += namelen + valuelen + 32;  /* as SETTINGS_MAX_HEADER_LIST_SIZE counts */
    if (s->header_bytes > c->max_header_bytes) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (namelen > 0 && name[0] == ':') {
        if (equals(name, namelen, ":path")) {
            s->path_len = valuelen;
            if (valuelen <= sizeof s->path) memcpy(s->path, value, valuelen);
        } else if (equals(name, namelen, ":method")) {
            s->bad_method = !equals(value, valuelen, "POST");
        }
        return 0;
    }
    if (equals(name, namelen, "content-type")) {
        s->bad_type = !(valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
                        (valuelen == 16 || value[16] == '+' || value[16] == ';'));
        return 0;
    }
    if (equals(name, namelen, "grpc-timeout")) {
        s->timeout_s = parse_timeout(value, valuelen);
        return 0;
    }
    if (equals(name, namelen, "grpc-encoding")) {
        s->bad_encoding = !equals(value, valuelen, "identity");
        return 0;
    }
    if (equals(name, namelen, "te") || equals(name, namelen, "grpc-accept-encoding")) return 0;
    if (s->metadata == NULL && (s->metadata = PyList_New(0)) == NULL) goto fail;
    PyObject *pair = Py_BuildValue("(s#s#)", name, (Py_ssize_t)namelen, value, (Py_ssize_t)valuelen);
    if (pair == NULL) {  /* not UTF-8: HPACK allows any octets, gRPC metadata does not */
        PyErr_Clear();
        pair = Py_BuildValue("(s#y#)", name, (Py_ssize_t)namelen, value, (Py_ssize_t)valuelen);
        if (pair == NULL) goto fail;
    }
    int rc = PyList_Append(s->metadata, pair);
    Py_DECREF(pair);
    if (rc < 0) goto fail;
    return 0;
fail:
    c->failed = 1;
    (void)session;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

/* The request's headers are complete: find the method, or answer at once. */
static int headers_done(Connection *c, Stream *s) {
    if (s->bad_method) return refuse_http(c, s, "405", "gRPC calls are POST requests");
    if (s->bad_type) return refuse_http(c, s, "415", "content-type must be application/grpc");
    if (s->path_len <= sizeof s->path) {
        PyObject *key = PyBytes_FromStringAndSize(s->path, (Py_ssize_t)s->path_len);
        if (key == NULL) return -1;
        PyObject *method = PyDict_GetItemWithError(c->single, key);
        s->single = method != NULL;
        if (method == NULL && !PyErr_Occurred())
            method = PyDict_GetItemWithError(c->streaming, key);
        Py_DECREF(key);
        if (method == NULL && PyErr_Occurred()) return -1;
        Py_XINCREF(method);
        s->method = method;
    }
    if (s->method == NULL) {
        char text[320];
        int n = (int)(s->path_len < 256 ? s->path_len : 256);
        snprintf(text, sizeof text, "Method not found: %.*s", n, s->path);
        return refuse(c, s, ST_UNIMPLEMENTED, text);
    }
    if (s->bad_encoding)
        return refuse(c, s, ST_UNIMPLEMENTED, "grpc-encoding: only identity is accepted");
    if (s->single) return 0;
    s->announced = 1;
    return event(c, Py_BuildValue("(iiOOdO)", EV_CALL, s->id, s->method,
                                  s->metadata ? s->metadata : Py_None, s->timeout_s, Py_None));
}

/* Whole messages out of the reassembly buffer (single request: kept; a request stream: one
 * event each). */
static int take_messages(Connection *c, Stream *s) {
    size_t at = 0;
    while (!s->finished && s->in_len - at >= PREFIX) {
        unsigned char *p = s->in + at;
        uint32_t n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
        if (p[0] != 0) {
            set_in_len(c, s, 0);
            return refuse(c, s, ST_INTERNAL, p[0] == 1
                          ? "compressed message without a grpc-encoding (identity only)"
                          : "bad message prefix");
        }
        if ((Py_ssize_t)n > c->max_message) {
            char text[128];
            snprintf(text, sizeof text, "Received message larger than max (%u vs. %zd)", n,
                     c->max_message);
            set_in_len(c, s, 0);
            return refuse(c, s, ST_RESOURCE_EXHAUSTED, text);
        }
        if (s->in_len - at < PREFIX + (size_t)n) break;
        PyObject *message = PyBytes_FromStringAndSize((const char *)p + PREFIX, n);
        if (message == NULL) return -1;
        at += PREFIX + n;
        s->messages++;
        if (s->single) {
            if (s->message != NULL) {
                Py_DECREF(message);
                set_in_len(c, s, 0);
                return refuse(c, s, ST_INTERNAL, "more than one request message");
            }
            s->message = message;
        } else if (event(c, Py_BuildValue("(iiN)", EV_MESSAGE, s->id, message)) < 0) {
            return -1;
        }
    }
    if (s->finished) {
        set_in_len(c, s, 0);
    } else if (at > 0) {
        memmove(s->in, s->in + at, s->in_len - at);
        set_in_len(c, s, s->in_len - at);
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *user) {
    (void)session;
    (void)flags;
    Connection *c = user;
    Stream *s = stream_of(c, id);
    if (s == NULL || s->finished) return 0;
    if (grow(&s->in, &s->in_cap, s->in_len + len) < 0) goto fail;
    memcpy(s->in + s->in_len, data, len);
    set_in_len(c, s, s->in_len + len);
    if (take_messages(c, s) < 0) goto fail;
    if (c->buffered > c->max_buffered &&
        refuse(c, s, ST_RESOURCE_EXHAUSTED,
               "too much request data in flight on this connection") < 0)
        goto fail;
    return 0;
fail:
    c->failed = 1;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user) {
    (void)session;
    Connection *c = user;
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
    Stream *s = stream_of(c, frame->hd.stream_id);
    if (s == NULL) return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST &&
        headers_done(c, s) < 0)
        goto fail;
    if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM) || s->finished) return 0;
    if (s->in_len > 0) {
        if (refuse(c, s, ST_INTERNAL, "the request ended inside a message") < 0) goto fail;
        return 0;
    }
    if (!s->single) {
        if (event(c, Py_BuildValue("(ii)", EV_END, s->id)) < 0) goto fail;
        return 0;
    }
    if (s->message == NULL) {
        if (refuse(c, s, ST_INTERNAL, "this method takes exactly one request message") < 0)
            goto fail;
        return 0;
    }
    s->announced = 1;
    PyObject *message = s->message;
    s->message = NULL;
    if (event(c, Py_BuildValue("(iiOOdN)", EV_CALL, s->id, s->method,
                               s->metadata ? s->metadata : Py_None, s->timeout_s, message)) < 0)
        goto fail;
    return 0;
fail:
    c->failed = 1;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_stream_close(nghttp2_session *session, int32_t id, uint32_t error_code,
                           void *user) {
    (void)error_code;
    Connection *c = user;
    Stream *s = stream_of(c, id);
    if (s == NULL) return 0;
    int rc = 0;
    if (s->announced && (!s->finished || s->trailers_pending || s->out_len > s->out_pos)) {
        if (event(c, Py_BuildValue("(ii)", EV_RESET, id)) < 0) {
            c->failed = 1;
            rc = NGHTTP2_ERR_CALLBACK_FAILURE;
        }
    }
    nghttp2_session_set_stream_user_data(session, id, NULL);
    set_in_len(c, s, 0);
    c->streams--;
    unlink_stream(c, s);
    stream_free(s);
    return rc;
}

/* -- the Python type ----------------------------------------------------------------------- */

static nghttp2_session_callbacks *callbacks;

static void Connection_dealloc(Connection *c) {
    if (c->session != NULL) nghttp2_session_del(c->session);
    while (c->open != NULL) {
        Stream *s = c->open;
        c->open = s->next;
        stream_free(s);
    }
    Py_XDECREF(c->single);
    Py_XDECREF(c->streaming);
    Py_XDECREF(c->events);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *Connection_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"single", "streaming", "max_message", "max_streams",
                            "max_header_bytes", "window", "max_buffered", NULL};
    PyObject *single, *streaming;
    Py_ssize_t max_message;
    unsigned int max_streams, max_header_bytes, window;
    Py_ssize_t max_buffered = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!nIII|n", names, &PyDict_Type, &single,
                                     &PyDict_Type, &streaming, &max_message, &max_streams,
                                     &max_header_bytes, &window, &max_buffered))
        return NULL;
    if (max_message < 0 || max_message > 0x7fffffff || window < 65535 || window > 0x7fffffff) {
        PyErr_SetString(PyExc_ValueError, "max_message or window out of range");
        return NULL;
    }
    Connection *c = (Connection *)type->tp_alloc(type, 0);
    if (c == NULL) return NULL;
    c->single = Py_NewRef(single);
    c->streaming = Py_NewRef(streaming);
    c->max_message = max_message;
    c->max_header_bytes = max_header_bytes;
    /* default: four whole messages at the maximum, and never under 64 MiB (a client's
     * concurrent sends interleave their data, so several partial messages are normal) */
    c->max_buffered = max_buffered >= 0 ? (size_t)max_buffered
                      : (size_t)(4 * (max_message + PREFIX)) > ((size_t)64 << 20)
                      ? (size_t)(4 * (max_message + PREFIX)) : ((size_t)64 << 20);
    if (nghttp2_session_server_new(&c->session, callbacks, c) != 0) {
        Py_DECREF(c);
        return PyErr_NoMemory();
    }
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, max_header_bytes}};
    if (nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, settings, 3) != 0 ||
        nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0,
                                              (int32_t)window) != 0) {
        Py_DECREF(c);
        PyErr_SetString(PyExc_RuntimeError, "nghttp2 refused the initial settings");
        return NULL;
    }
    return (PyObject *)c;
}

static PyObject *Connection_feed(Connection *c, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    ssize_t rc = nghttp2_session_mem_recv(c->session, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    PyObject *events = c->events;
    c->events = NULL;
    if (c->failed) {
        c->failed = 0;
        Py_XDECREF(events);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "h2 codec callback failed");
        return NULL;
    }
    if (rc < 0) {
        /* a connection error nghttp2 did not answer itself (bad preface, flood, ...): GOAWAY */
        nghttp2_session_terminate_session(c->session, NGHTTP2_PROTOCOL_ERROR);
    }
    if (events == NULL) return PyList_New(0);
    return events;
}

static PyObject *Connection_take(Connection *c, PyObject *unused) {
    (void)unused;
    PyObject *out = NULL;
    Py_ssize_t size = 0;
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->session, &data);
        if (n < 0) {
            Py_XDECREF(out);
            PyErr_Format(PyExc_RuntimeError, "nghttp2: %s", nghttp2_strerror((int)n));
            return NULL;
        }
        if (n == 0) break;
        if (out == NULL) {
            if ((out = PyBytes_FromStringAndSize((const char *)data, n)) == NULL) return NULL;
        } else {
            if (_PyBytes_Resize(&out, size + n) < 0) return NULL;
            memcpy(PyBytes_AS_STRING(out) + size, data, (size_t)n);
        }
        size += n;
    }
    return out != NULL ? out : PyBytes_FromStringAndSize(NULL, 0);
}

static Stream *open_stream(Connection *c, int id) {
    Stream *s = stream_of(c, id);
    return s != NULL && s->announced && !s->finished ? s : NULL;
}

/* The (stream_id, payload) arguments of reply and send: the payload framed onto its open
 * stream. Returns the stream, or NULL: with an exception set on an error, without one when the
 * call is gone (reset, or answered already). */
static Stream *add_message(Connection *c, PyObject *args, int *id) {
    const char *data;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "iy#", id, &data, &n)) return NULL;
    Stream *s = open_stream(c, *id);
    if (s != NULL && append_message(s, data, n) < 0) {
        PyErr_NoMemory();
        return NULL;
    }
    return s;
}

/* reply(stream_id, payload): a unary call's whole answer (headers, the message, status 0).
 * False when the call is gone (reset, or answered already). */
static PyObject *Connection_reply(Connection *c, PyObject *args) {
    int id;
    Stream *s = add_message(c, args, &id);
    if (s == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_FALSE;
    }
    s->finished = 1;
    s->status_code = ST_OK;
    s->trailers_pending = 1;
    if (start_response(c, s) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "nghttp2 refused a response");
        return NULL;
    }
    Py_RETURN_TRUE;
}

/* send(stream_id, payload): one more message of a streaming answer. */
static PyObject *Connection_send(Connection *c, PyObject *args) {
    int id;
    Stream *s = add_message(c, args, &id);
    if (s == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_FALSE;
    }
    int rc = s->response_started ? nghttp2_session_resume_data(c->session, id)
                                 : start_response(c, s);
    if (rc != 0 && rc != NGHTTP2_ERR_INVALID_ARGUMENT) {
        PyErr_SetString(PyExc_RuntimeError, "nghttp2 refused a message");
        return NULL;
    }
    Py_RETURN_TRUE;
}

/* pending(stream_id): response bytes of the stream nghttp2 has not taken yet (flow control). */
static PyObject *Connection_pending(Connection *c, PyObject *arg) {
    int id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    Stream *s = stream_of(c, id);
    return PyLong_FromSize_t(s == NULL ? 0 : s->out_len - s->out_pos);
}

/* finish(stream_id, code, text): the call's status (trailers, or trailers-only). */
static PyObject *Connection_finish(Connection *c, PyObject *args) {
    int id, code;
    const char *text;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "iis#", &id, &code, &text, &n)) return NULL;
    Stream *s = open_stream(c, id);
    if (s == NULL) Py_RETURN_FALSE;
    PyObject *encoded = status_text(text, n);
    if (encoded == NULL) return NULL;
    if (finish(c, s, code, encoded) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "nghttp2 refused a status");
        return NULL;
    }
    Py_RETURN_TRUE;
}

/* goaway(): no new calls (GOAWAY NO_ERROR with the last stream seen); calls in progress go on. */
static PyObject *Connection_goaway(Connection *c, PyObject *unused) {
    (void)unused;
    int32_t last = nghttp2_session_get_last_proc_stream_id(c->session);
    nghttp2_submit_goaway(c->session, NGHTTP2_FLAG_NONE, last, NGHTTP2_NO_ERROR, NULL, 0);
    Py_RETURN_NONE;
}

/* close(): GOAWAY and end the session; ``done`` is then true once the bytes are taken. */
static PyObject *Connection_close(Connection *c, PyObject *unused) {
    (void)unused;
    nghttp2_session_terminate_session(c->session, NGHTTP2_NO_ERROR);
    Py_RETURN_NONE;
}

static PyObject *Connection_done(Connection *c, void *closure) {
    (void)closure;
    return PyBool_FromLong(!nghttp2_session_want_read(c->session) &&
                           !nghttp2_session_want_write(c->session));
}

static PyObject *Connection_streams(Connection *c, void *closure) {
    (void)closure;
    return PyLong_FromLong(c->streams);
}

static PyMethodDef Connection_methods[] = {
    {"feed", (PyCFunction)Connection_feed, METH_O,
     "feed(data) -> list of events (see the module's docstring)"},
    {"take", (PyCFunction)Connection_take, METH_NOARGS, "take() -> bytes to write"},
    {"reply", (PyCFunction)Connection_reply, METH_VARARGS,
     "reply(stream_id, payload) -> bool: a unary call's answer with status OK"},
    {"send", (PyCFunction)Connection_send, METH_VARARGS,
     "send(stream_id, payload) -> bool: one message of a streaming answer"},
    {"finish", (PyCFunction)Connection_finish, METH_VARARGS,
     "finish(stream_id, code, text) -> bool: the call's status"},
    {"pending", (PyCFunction)Connection_pending, METH_O,
     "pending(stream_id) -> response bytes not yet taken by HTTP/2 flow control"},
    {"goaway", (PyCFunction)Connection_goaway, METH_NOARGS, "goaway(): refuse new calls"},
    {"close", (PyCFunction)Connection_close, METH_NOARGS, "close(): end the session"},
    {NULL, NULL, 0, NULL}};

static PyObject *Connection_buffered(Connection *c, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(c->buffered);
}

static PyGetSetDef Connection_getset[] = {
    {"buffered", (getter)Connection_buffered, NULL,
     "request bytes held in reassembly, all streams", NULL},
    {"done", (getter)Connection_done, NULL, "the session wants no more reads or writes", NULL},
    {"streams", (getter)Connection_streams, NULL, "open HTTP/2 streams", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject ConnectionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rocks_timer._native.h2.Connection",
    .tp_basicsize = sizeof(Connection),
    .tp_dealloc = (destructor)Connection_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Connection(single, streaming, max_message, max_streams, max_header_bytes, window,"
              " max_buffered=max(4 x (max_message + 5), 64 MiB)):"
              " one gRPC server connection's HTTP/2 state (sans I/O)",
    .tp_methods = Connection_methods,
    .tp_getset = Connection_getset,
    .tp_new = Connection_new,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "h2", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_h2(void) {
    if (callbacks == NULL) {
        if (nghttp2_session_callbacks_new(&callbacks) != 0) return PyErr_NoMemory();
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data_chunk);
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_stream_close);
    }
    if (PyType_Ready(&ConnectionType) < 0) return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
    if (PyModule_AddObjectRef(mod, "Connection", (PyObject *)&ConnectionType) < 0 ||
        PyModule_AddIntConstant(mod, "CALL", EV_CALL) < 0 ||
        PyModule_AddIntConstant(mod, "MESSAGE", EV_MESSAGE) < 0 ||
        PyModule_AddIntConstant(mod, "END", EV_END) < 0 ||
        PyModule_AddIntConstant(mod, "RESET", EV_RESET) < 0 ||
        PyModule_AddStringConstant(mod, "NGHTTP2_VERSION", nghttp2_version(0)->version_str) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
