/* The extension module rocks_timer._native.codec: the hot paths of the CommitLog writer
 * (commitlog.c), of reading messages (fields.c), of scheduling into RocksDB (timer.c) and of
 * reading value segments (vlog.c) and of delivery (delivery.c), the metrics' tallies
 * (tally.c), and the remoting front's plain send (remoting.c). */
#include "native.h"

static PyObject *encode_properties(PyObject *self, PyObject *mapping) {
    return encode_props(mapping);
}

static PyObject *java_string_hash(PyObject *self, PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "java_string_hash: expected a str");
        return NULL;
    }
    return PyLong_FromLong(java_hash(arg));
}

static PyMethodDef methods[] = {
    {"encode_batch", encode_batch, METH_VARARGS,
     "Encode messages as consecutive CommitLog records with their ConsumeQueue entries."},
    {"encode_properties", encode_properties, METH_O,
     "RocketMQ's property string (name\\x01value\\x02 per entry) of a mapping of str."},
    {"prepare_batch", prepare_batch, METH_VARARGS,
     "Cache the messages' property strings; (body bytes, whether all are within limits)."},
    {"encode_schedule", encode_schedule, METH_VARARGS,
     "Encode timer records as RocksDB keys and values, with their handles."},
    {"pwrite_all", pwrite_all, METH_VARARGS,
     "Write a whole buffer at an offset in slices, with the GIL released once."},
    {"crc32", crc32, METH_O, "CRC32 (IEEE, as zlib.crc32) of a bytes-like object."},
    {"vlog_frame", vlog_frame, METH_VARARGS,
     "Value-segment records of (key, value) pairs, back to back, and their lengths."},
    {"drop_pointers", drop_pointers, METH_VARARGS,
     "drop_pointers(changes, index_values): the liveness deltas of pointers leaving the index."},
    {"vlog_parse", vlog_parse, METH_VARARGS,
     "Check and split value-segment records read in one buffer: a value or an error each."},
    {"route_common", route_common, METH_VARARGS,
     "Route a common send (see routing.py); None to let the Python path decide."},
    {"route_common_batch", route_common_batch, METH_VARARGS,
     "route_common over a batch from an index, as Route tuples, up to the first left to Python."},
    {"claim_batch", claim_batch, METH_VARARGS,
     "The RocksDB claim's work after the index walk: budget, segment reads, prepared copies."},
    {"due_second_counts", due_second_counts, METH_O,
     "How many timer keys (bytes; due ms in the first 8, big-endian) fall due in each second."},
    {"topic_counts", topic_counts, METH_O,
     "How many timer keys (bytes; the topic at raw[9:-16]) belong to each topic."},
    {"index_removals", index_removals, METH_VARARGS,
     "A delivered keyed batch's key index entries, read from the stored values (and the rest)."},
    {"delivery_copies", delivery_copies, METH_VARARGS,
     "Timer values to prepared CommitLog records (TIMER_OUT_MS, TIMER_DEQUEUE_MS added), or None."},
    {"read_records", read_records, METH_VARARGS,
     "A consumer's page: ConsumeQueue entries' CommitLog records read and checked into one buffer."},
    {"client_records", client_records, METH_VARARGS,
     "A pulled page's records in the V1 layout 4.x clients decode (body CRC, hosts set)."},
    {"delivery_tally", delivery_tally, METH_VARARGS,
     "A delivered batch's topics, lateness sum and histogram counts, and early count."},
    {"remoting_frames", remoting_frames, METH_VARARGS,
     "The whole remoting frames with a plain JSON header from an offset, as commands."},
    {"send_fields", send_fields, METH_VARARGS,
     "A plain SEND_MESSAGE(_V2) header checked into its message's fields, or None."},
    {"json_header", json_header, METH_VARARGS,
     "A remoting command's JSON header as the json module writes it, or None."},
    {"java_string_hash", java_string_hash, METH_O, "Java's String.hashCode of a str."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "codec", NULL, -1, methods};

PyMODINIT_FUNC PyInit_codec(void) {
    crc_init();
    timer_init();
    if (fields_init() < 0 || routing_init() < 0 || remoting_init() < 0) return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
#ifdef __SIZEOF_INT128__
    if (PyType_Ready(&DelayTallyType) < 0 ||
        PyModule_AddObjectRef(mod, "DelayTally", (PyObject *)&DelayTallyType) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
#endif
    return mod;
}
