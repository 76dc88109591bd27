/*
 * lkstream.format._records: the record walk of lkstream.format.validate, in C.
 *
 * walk(records, count, base_timestamp[, last_offset_delta]) -> max_timestamp
 *
 * Walks the uncompressed records section of a Kafka v2 record batch (the bytes
 * after the 61-byte header, decompressed first when the batch is compressed) and
 * checks every record against the format, exactly as the pure-Python reference
 * lkstream.format.validate.walk_records_py does (a property test holds the two to
 * the same answers). Raises ValueError("record N: reason") on the first problem;
 * returns the largest base_timestamp + timestampDelta otherwise. Without last_offset_delta (or
 * with -1: a producer's batch) record N must have offsetDelta N; with it (a batch read from a
 * log the cleaner may have rewritten) offsetDeltas must strictly increase within 0..last_offset_delta.
 *
 * Record layout (all varints zigzag; int32 fields at most 5 bytes, the varlong at
 * most 10, every varint in its shortest form):
 *
 *   length varint | attributes int8 (0) | timestampDelta varlong | offsetDelta varint (== N)
 *   | keyLength varint (>= -1) | key | valueLength varint (>= -1) | value
 *   | headerCount varint (>= 0) | { headerKeyLength varint (>= 0) | UTF-8 key
 *                                  | headerValueLength varint (>= -1) | value } ...
 *
 * The walk runs without the GIL: it only reads the caller's buffer, which the
 * caller keeps alive (Py_buffer) and does not change meanwhile.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>

#define REASON_SIZE 160

typedef struct {
    const uint8_t *buf;
    Py_ssize_t pos;
    Py_ssize_t end;
    char reason[REASON_SIZE];
} Walk;

/* One zigzag varint of at most max_bytes bytes, in its shortest form. */
static int read_varint_slow(Walk *w, int max_bytes, int64_t *out, const char *what, Py_ssize_t record);

static inline int read_varint(Walk *w, int max_bytes, int64_t *out, const char *what, Py_ssize_t record) {
    /* Most fields of most records fit one byte (lengths below 64, small deltas): decide those inline. */
    if (w->pos < w->end && w->buf[w->pos] < 0x80) {
        uint8_t byte = w->buf[w->pos++];
        *out = (int64_t)(byte >> 1) ^ -(int64_t)(byte & 1);
        return 0;
    }
    return read_varint_slow(w, max_bytes, out, what, record);
}

static int read_varint_slow(Walk *w, int max_bytes, int64_t *out, const char *what, Py_ssize_t record) {
    uint64_t raw = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (w->pos >= w->end) {
            snprintf(w->reason, REASON_SIZE, "record %zd: %s runs past the end of the record", record, what);
            return -1;
        }
        uint8_t byte = w->buf[w->pos++];
        if (i == max_bytes - 1) {
            /* The last byte may only carry the bits the field has left (32 or 64 in all). */
            uint8_t room = (uint8_t)(max_bytes == 5 ? 0x0F : 0x01);
            if (byte > room) {
                snprintf(w->reason, REASON_SIZE, "record %zd: %s overflows its %d-byte varint", record, what,
                         max_bytes);
                return -1;
            }
        }
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            if (byte == 0 && i > 0) {
                snprintf(w->reason, REASON_SIZE, "record %zd: %s is not in its shortest varint form", record, what);
                return -1;
            }
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
        shift += 7;
    }
    snprintf(w->reason, REASON_SIZE, "record %zd: %s is a varint longer than %d bytes", record, what, max_bytes);
    return -1;
}

/* Whether buf[0:n] is UTF-8 that Python's strict codec accepts (no overlongs, surrogates, > U+10FFFF). */
static int is_utf8(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int need;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + need >= n) { /* the continuation bytes would run past the field */
            return 0;
        }
        for (int k = 1; k <= need; k++) {
            uint8_t cc = s[i + k];
            if ((cc & 0xC0) != 0x80) {
                return 0;
            }
            cp = (cp << 6) | (cc & 0x3F);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10FFFF))) {
            return 0;
        }
        i += need + 1;
    }
    return 1;
}

/* A length-prefixed byte field inside the record: length >= min_length, bytes within the record. */
static inline int skip_bytes(Walk *w, int min_length, const char *what, Py_ssize_t record, int utf8) {
    int64_t length;
    if (read_varint(w, 5, &length, what, record) < 0) {
        return -1;
    }
    if (length < min_length) {
        snprintf(w->reason, REASON_SIZE, "record %zd: %s length %lld is negative", record, what, (long long)length);
        return -1;
    }
    if (length > 0) {
        if (length > w->end - w->pos) {
            snprintf(w->reason, REASON_SIZE, "record %zd: %s of %lld bytes runs past the end of the record", record,
                     what, (long long)length);
            return -1;
        }
        if (utf8 && !is_utf8(w->buf + w->pos, (Py_ssize_t)length)) {
            snprintf(w->reason, REASON_SIZE, "record %zd: %s is not UTF-8", record, what);
            return -1;
        }
        w->pos += (Py_ssize_t)length;
    }
    return 0;
}

/* One record at w->pos; on success w->pos is after it and *timestamp_delta is set. */
static int walk_record(Walk *w, Py_ssize_t index, Py_ssize_t section_end, int64_t *timestamp_delta,
                       int64_t *previous, int64_t last_offset_delta) {
    int64_t length, offset_delta, headers;
    w->end = section_end;
    if (read_varint(w, 5, &length, "length", index) < 0) {
        return -1;
    }
    /* The smallest record body: attributes, and one byte each for five varints. */
    if (length < 6 || length > section_end - w->pos) {
        snprintf(w->reason, REASON_SIZE, "record %zd: length %lld does not fit the %zd bytes left", index,
                 (long long)length, section_end - w->pos);
        return -1;
    }
    w->end = w->pos + (Py_ssize_t)length;
    if (w->buf[w->pos++] != 0) {
        snprintf(w->reason, REASON_SIZE, "record %zd: attributes %d are not 0", index, (int)w->buf[w->pos - 1]);
        return -1;
    }
    if (read_varint(w, 10, timestamp_delta, "timestampDelta", index) < 0 ||
        read_varint(w, 5, &offset_delta, "offsetDelta", index) < 0) {
        return -1;
    }
    if (last_offset_delta < 0) {
        if (offset_delta != (int64_t)index) {
            snprintf(w->reason, REASON_SIZE, "record %zd: offsetDelta %lld, expected %zd", index,
                     (long long)offset_delta, index);
            return -1;
        }
    } else if (offset_delta <= *previous || offset_delta > last_offset_delta) {
        snprintf(w->reason, REASON_SIZE, "record %zd: offsetDelta %lld is not in %lld..%lld", index,
                 (long long)offset_delta, (long long)(*previous + 1), (long long)last_offset_delta);
        return -1;
    }
    *previous = offset_delta;
    if (skip_bytes(w, -1, "key", index, 0) < 0 || skip_bytes(w, -1, "value", index, 0) < 0 ||
        read_varint(w, 5, &headers, "headerCount", index) < 0) {
        return -1;
    }
    if (headers < 0 || headers > (w->end - w->pos) / 2) {
        snprintf(w->reason, REASON_SIZE, "record %zd: headerCount %lld does not fit the record", index,
                 (long long)headers);
        return -1;
    }
    for (int64_t h = 0; h < headers; h++) {
        if (skip_bytes(w, 0, "header key", index, 1) < 0 || skip_bytes(w, -1, "header value", index, 0) < 0) {
            return -1;
        }
    }
    if (w->pos != w->end) {
        snprintf(w->reason, REASON_SIZE, "record %zd: %zd bytes left over inside the record", index, w->end - w->pos);
        return -1;
    }
    return 0;
}

static PyObject *walk(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    long long base_timestamp, last_offset_delta = -1;
    if (!PyArg_ParseTuple(args, "y*nL|L", &view, &count, &base_timestamp, &last_offset_delta)) {
        return NULL;
    }
    int64_t previous = -1;
    Walk w = {.buf = (const uint8_t *)view.buf, .pos = 0, .end = view.len};
    int64_t max_timestamp = INT64_MIN;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t delta, timestamp;
        if (w.pos >= view.len) {
            snprintf(w.reason, REASON_SIZE, "records_count is %zd but the batch holds %zd record(s)", count, i);
            failed = 1;
            break;
        }
        if (walk_record(&w, i, view.len, &delta, &previous, (int64_t)last_offset_delta) < 0) {
            failed = 1;
            break;
        }
        if (__builtin_add_overflow((int64_t)base_timestamp, delta, &timestamp)) {
            snprintf(w.reason, REASON_SIZE, "record %zd: timestamp overflows", i);
            failed = 1;
            break;
        }
        if (timestamp > max_timestamp) {
            max_timestamp = timestamp;
        }
    }
    if (!failed && w.pos != view.len) {
        snprintf(w.reason, REASON_SIZE, "%zd bytes after the last of %zd record(s)", view.len - w.pos, count);
        failed = 1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (failed) {
        PyErr_SetString(PyExc_ValueError, w.reason);
        return NULL;
    }
    return PyLong_FromLongLong((long long)max_timestamp);
}

/*
 * spans(records, count) -> [(start, end, offset_delta, timestamp_delta, key, value_is_null)]
 *
 * Where each record of an uncompressed records section lies, with what the log cleaner
 * needs from it (lkstream.storage.cleaner): its key (bytes, or None) and whether its value
 * is null (a tombstone). The section must have passed walk() already; anything that does
 * not parse still raises ValueError rather than reading outside the buffer.
 */
static PyObject *spans(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &view, &count)) {
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Walk w = {.buf = (const uint8_t *)view.buf, .pos = 0, .end = view.len};
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, key_length, value_length;
        Py_ssize_t start = w.pos;
        w.end = view.len;
        if (read_varint(&w, 5, &length, "length", i) < 0) {
            goto malformed;
        }
        if (length < 6 || length > view.len - w.pos) {
            snprintf(w.reason, REASON_SIZE, "record %zd: length %lld does not fit", i, (long long)length);
            goto malformed;
        }
        Py_ssize_t end = w.pos + (Py_ssize_t)length;
        w.end = end;
        w.pos++; /* attributes */
        if (read_varint(&w, 10, &ts_delta, "timestampDelta", i) < 0 ||
            read_varint(&w, 5, &offset_delta, "offsetDelta", i) < 0 ||
            read_varint(&w, 5, &key_length, "keyLength", i) < 0) {
            goto malformed;
        }
        if (key_length < -1 || key_length > w.end - w.pos) {
            snprintf(w.reason, REASON_SIZE, "record %zd: key length %lld does not fit", i, (long long)key_length);
            goto malformed;
        }
        PyObject *key;
        if (key_length < 0) {
            key = Py_NewRef(Py_None);
        } else {
            key = PyBytes_FromStringAndSize((const char *)w.buf + w.pos, (Py_ssize_t)key_length);
            if (key == NULL) {
                goto failed;
            }
            w.pos += (Py_ssize_t)key_length;
        }
        if (read_varint(&w, 5, &value_length, "valueLength", i) < 0) {
            Py_DECREF(key);
            goto malformed;
        }
        PyObject *item = Py_BuildValue("(nnLLNO)", start, end, (long long)offset_delta, (long long)ts_delta, key,
                                       value_length < 0 ? Py_True : Py_False);
        if (item == NULL) {
            goto failed;
        }
        if (PyList_Append(out, item) < 0) {
            Py_DECREF(item);
            goto failed;
        }
        Py_DECREF(item);
        w.pos = end;
    }
    PyBuffer_Release(&view);
    return out;
malformed:
    PyErr_SetString(PyExc_ValueError, w.reason);
failed:
    PyBuffer_Release(&view);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"spans", spans, METH_VARARGS,
     "spans(records, count) -> [(start, end, offset_delta, timestamp_delta, key, value_is_null)] of a walked "
     "records section."},
    {"walk", walk, METH_VARARGS,
     "walk(records, count, base_timestamp[, last_offset_delta]) -> max_timestamp: check every record of an "
     "uncompressed records section; ValueError names the first problem."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_records", "Record walk of v2 record batches.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&module); }
