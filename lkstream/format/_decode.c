/*
 * lkstream.format._decode: the records of a v2 batch as Record tuples, in C.
 *
 *   decode(records, count, base_offset, base_timestamp, fixed_timestamp, timestamp_type,
 *          topic, partition, min_offset, limit, record_type, out) -> appended
 *
 * `records` is the uncompressed records section (after the 61-byte header, inflated
 * first when the batch is compressed) that lkstream.format.validate.check_records has
 * already walked; the fields are still bounds-checked here, and any surprise raises
 * ValueError. Each record at or past `min_offset` becomes one `record_type` (the
 * lkstream.format.codec.Record NamedTuple: topic, partition, offset, timestamp, key,
 * value, headers, timestamp_type) appended to the list `out`, at most `limit` of them
 * (-1: no limit). `fixed_timestamp` (or None) is the time every record gets, for
 * LogAppendTime batches (Kafka's rule: the batch's max_timestamp); otherwise a record's
 * time is base_timestamp + its delta.
 *
 * Garbage collection: a Record holds only immutable values (str, ints, bytes, None, a
 * tuple of (str, bytes | None) pairs) and so can never be part of a reference cycle.
 * CPython untracks such *exact* tuples at their first collection, but never a tuple
 * subclass such as a NamedTuple: a consumer holding millions of them made the cyclic
 * collector walk them all over again (half of a decoded read's time, docs/benchmarks.md).
 * So each Record, and each header tuple, is untracked here as soon as it is filled.
 *
 * The pure-Python reference is aiokafka's decoder in lkstream.format.codec
 * (decode_batch with the extension absent); tests hold the two to the same records.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define RECORD_FIELDS 8

typedef struct {
    const uint8_t *buf;
    Py_ssize_t pos;
    Py_ssize_t end;
} Cursor;

static int fail(Py_ssize_t index, const char *what) {
    PyErr_Format(PyExc_ValueError, "record %zd: %s", index, what);
    return -1;
}

/* A zigzag varint of at most max_bytes bytes. */
static inline int varint(Cursor *c, int max_bytes, int64_t *out, Py_ssize_t index) {
    if (c->pos < c->end && c->buf[c->pos] < 0x80) { /* most fields fit one byte */
        uint8_t byte = c->buf[c->pos++];
        *out = (int64_t)(byte >> 1) ^ -(int64_t)(byte & 1);
        return 0;
    }
    uint64_t raw = 0;
    for (int i = 0, shift = 0; i < max_bytes; i++, shift += 7) {
        if (c->pos >= c->end) {
            return fail(index, "a varint runs past the end of the record");
        }
        uint8_t byte = c->buf[c->pos++];
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
    }
    return fail(index, "a varint is too long");
}

/* A nullable byte field: bytes, or None for length -1; NULL with an exception on error. */
static PyObject *bytes_field(Cursor *c, Py_ssize_t index) {
    int64_t length;
    if (varint(c, 5, &length, index) < 0) {
        return NULL;
    }
    if (length < 0) {
        if (length != -1) {
            fail(index, "a negative field length");
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (length > c->end - c->pos) {
        fail(index, "a field runs past the end of the record");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)c->buf + c->pos, (Py_ssize_t)length);
    c->pos += (Py_ssize_t)length;
    return out;
}

static PyObject *header_pairs(Cursor *c, Py_ssize_t index, PyObject *no_headers) {
    int64_t count;
    if (varint(c, 5, &count, index) < 0) {
        return NULL;
    }
    if (count == 0) {
        Py_INCREF(no_headers);
        return no_headers;
    }
    if (count < 0 || count > (c->end - c->pos) / 2) {
        fail(index, "a header count that does not fit the record");
        return NULL;
    }
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL) {
        return NULL;
    }
    for (Py_ssize_t h = 0; h < (Py_ssize_t)count; h++) {
        int64_t klen;
        if (varint(c, 5, &klen, index) < 0) {
            goto error;
        }
        if (klen < 0 || klen > c->end - c->pos) {
            fail(index, "a header key runs past the end of the record");
            goto error;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)c->buf + c->pos, (Py_ssize_t)klen, "strict");
        if (key == NULL) {
            goto error;
        }
        c->pos += (Py_ssize_t)klen;
        PyObject *value = bytes_field(c, index);
        if (value == NULL) {
            Py_DECREF(key);
            goto error;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyObject_GC_UnTrack(pair);
        PyTuple_SET_ITEM(headers, h, pair);
    }
    PyObject_GC_UnTrack(headers);
    return headers;
error:
    Py_DECREF(headers);
    return NULL;
}

typedef struct {
    PyTypeObject *type;
    PyObject *topic;
    PyObject *partition;
    PyObject *timestamp_type;
    PyObject *fixed_timestamp; /* or NULL */
    PyObject *no_headers;
    int64_t base_offset;
    int64_t base_timestamp;
} Shared;

/* One Record from the fields read; steals key, value and headers. */
static PyObject *make_record(const Shared *s, int64_t offset, int64_t timestamp, PyObject *key, PyObject *value,
                             PyObject *headers) {
    PyObject *offset_obj = PyLong_FromLongLong(offset);
    PyObject *time_obj = s->fixed_timestamp != NULL ? (Py_INCREF(s->fixed_timestamp), s->fixed_timestamp)
                                                     : PyLong_FromLongLong(timestamp);
    PyObject *record = offset_obj == NULL || time_obj == NULL ? NULL : s->type->tp_alloc(s->type, RECORD_FIELDS);
    if (record == NULL) {
        Py_XDECREF(offset_obj);
        Py_XDECREF(time_obj);
        Py_DECREF(key);
        Py_DECREF(value);
        Py_DECREF(headers);
        return NULL;
    }
    Py_INCREF(s->topic);
    Py_INCREF(s->partition);
    Py_INCREF(s->timestamp_type);
    PyTuple_SET_ITEM(record, 0, s->topic);
    PyTuple_SET_ITEM(record, 1, s->partition);
    PyTuple_SET_ITEM(record, 2, offset_obj);
    PyTuple_SET_ITEM(record, 3, time_obj);
    PyTuple_SET_ITEM(record, 4, key);
    PyTuple_SET_ITEM(record, 5, value);
    PyTuple_SET_ITEM(record, 6, headers);
    PyTuple_SET_ITEM(record, 7, s->timestamp_type);
    PyObject_GC_UnTrack(record); /* immutable atoms only: see the module comment */
    return record;
}

/* Decode the record at c->pos (its index is `index`); *record is NULL when it lies before min_offset. */
static int one_record(Cursor *c, const Shared *s, Py_ssize_t index, int64_t min_offset, PyObject **record) {
    int64_t length, ts_delta, offset_delta;
    Py_ssize_t section_end = c->end;
    *record = NULL;
    if (varint(c, 5, &length, index) < 0) {
        return -1;
    }
    if (length < 1 || length > section_end - c->pos) {
        return fail(index, "its length does not fit the batch");
    }
    Py_ssize_t record_end = c->pos + (Py_ssize_t)length;
    c->end = record_end;
    c->pos++; /* attributes */
    if (varint(c, 10, &ts_delta, index) < 0 || varint(c, 5, &offset_delta, index) < 0) {
        return -1;
    }
    int64_t offset = s->base_offset + offset_delta;
    if (offset >= min_offset) {
        PyObject *key = bytes_field(c, index);
        PyObject *value = key == NULL ? NULL : bytes_field(c, index);
        PyObject *headers = value == NULL ? NULL : header_pairs(c, index, s->no_headers);
        if (headers == NULL) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            return -1;
        }
        if (c->pos != record_end) {
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            return fail(index, "bytes left over inside the record");
        }
        *record = make_record(s, offset, s->base_timestamp + ts_delta, key, value, headers);
        if (*record == NULL) {
            return -1;
        }
    }
    c->pos = record_end;
    c->end = section_end;
    return 0;
}

static PyObject *decode(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t count, limit;
    long long base_offset, base_timestamp, min_offset;
    Shared s;
    PyObject *out;
    if (!PyArg_ParseTuple(args, "y*nLLOOOOLnO!O!", &view, &count, &base_offset, &base_timestamp, &s.fixed_timestamp,
                          &s.timestamp_type, &s.topic, &s.partition, &min_offset, &limit, &PyType_Type, &s.type,
                          &PyList_Type, &out)) {
        return NULL;
    }
    if (!PyType_IsSubtype(s.type, &PyTuple_Type)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple subclass");
        return NULL;
    }
    s.fixed_timestamp = s.fixed_timestamp == Py_None ? NULL : s.fixed_timestamp;
    s.base_offset = base_offset;
    s.base_timestamp = base_timestamp;
    s.no_headers = PyTuple_New(0);
    Cursor c = {.buf = (const uint8_t *)view.buf, .pos = 0, .end = view.len};
    Py_ssize_t appended = 0;
    int failed = s.no_headers == NULL;
    for (Py_ssize_t i = 0; i < count && !failed && (limit < 0 || appended < limit); i++) {
        PyObject *record;
        if (one_record(&c, &s, i, min_offset, &record) < 0) {
            failed = 1;
        } else if (record != NULL) {
            failed = PyList_Append(out, record) < 0;
            Py_DECREF(record);
            appended += !failed;
        }
    }
    Py_XDECREF(s.no_headers);
    PyBuffer_Release(&view);
    return failed ? NULL : PyLong_FromSsize_t(appended);
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(records, count, base_offset, base_timestamp, fixed_timestamp, timestamp_type, topic, partition, "
     "min_offset, limit, record_type, out) -> appended: Records of an uncompressed records section, GC-untracked."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_decode", "v2 record batch decoder.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__decode(void) { return PyModule_Create(&module); }
