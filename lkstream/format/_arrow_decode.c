/*
 * lkstream.format._arrow_decode: the records of uncompressed v2 batches as Arrow column buffers, in C.
 *
 *   scan(batch, start, end) -> (rows, key_bytes, value_bytes, with_headers)
 *   fill(pieces, rows, key_bytes, value_bytes) -> (key, value, offsets, timestamps)
 *
 * The Spark source's decoder (lkstream.spark.arrow). `batch` is one whole uncompressed
 * batch (61-byte header, then the records) that lkstream.format.validate.check_batch has
 * passed; every field is still bounds-checked here, and a surprise raises ValueError.
 * Only the records with start <= offset < end count.
 *
 * scan walks the records once: how many are in range, their key and value bytes, and
 * how many of them carry headers (the caller decodes such a batch another way when it
 * wants the headers column). fill walks the `pieces` (a list of (batch, start, end)
 * already scanned, whose totals are `rows`, `key_bytes` and `value_bytes`) and writes
 * every column in one pass into buffers allocated once:
 *
 *   key, value:  (offsets int32[rows + 1], data, validity bitmap LSB-first or None, null count)
 *   offsets:     int64[rows]
 *   timestamps:  int64[rows], microseconds (Spark's timestamp unit): the record's create
 *                time, or the batch's max timestamp for a LogAppendTime batch
 *
 * all bytearrays (not GC-tracked), for pyarrow.py_buffer without a copy. fill walks the
 * records without the GIL (the batches are immutable bytes, the outputs not shared yet), so
 * a task's fetch thread keeps receiving while a chunk is decoded. Record layout
 * (varints zigzag): length varint | attributes int8 | timestampDelta varlong | offsetDelta
 * varint | keyLength varint (-1: null) | key | valueLength varint | value | headerCount
 * varint | headers (skipped: the record's length says where it ends).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 61
#define ATTRIBUTES_AT 21
#define BASE_TIMESTAMP_AT 27
#define MAX_TIMESTAMP_AT 35
#define COUNT_AT 57
#define COMPRESSION_MASK 0x07
#define LOG_APPEND_TIME 0x08

static int64_t get_be(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) {
        v = (v << 8) | p[i];
    }
    if (bytes < 8 && (v >> (8 * bytes - 1)) & 1) {
        v |= ~(uint64_t)0 << (8 * bytes); /* sign-extend */
    }
    return (int64_t)v;
}

/* One zigzag varint at *pos (below end); -1 on overrun or more than 10 bytes. */
static inline int get_varint(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) {
    uint64_t raw = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*pos >= end) {
            return -1;
        }
        uint8_t b = buf[(*pos)++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
    }
    return -1;
}

typedef struct {
    int64_t offset, timestamp;
    Py_ssize_t key_at, value_at; /* where the bytes start */
    int64_t key_len, value_len;  /* -1: null */
    int64_t headers;
} Record;

typedef struct {
    const uint8_t *buf;
    Py_ssize_t size, pos;
    int32_t count, index;
    int64_t base_offset, base_ts, max_ts;
    int log_append;
} Walk;

/* What went wrong in a walk (the walk itself runs without the GIL; walk_error raises it after). */
enum { WALK_OK = 0, WALK_SHORT = -1, WALK_COMPRESSED = -2, WALK_COUNT = -3, WALK_MALFORMED = -4 };

static void walk_error(const Walk *w, int code) {
    if (code == WALK_SHORT) {
        PyErr_SetString(PyExc_ValueError, "a batch shorter than its header");
    } else if (code == WALK_COMPRESSED) {
        PyErr_SetString(PyExc_ValueError, "a compressed batch (inflate it or use the record decoder)");
    } else if (code == WALK_COUNT) {
        PyErr_SetString(PyExc_ValueError, "a batch with a negative record count");
    } else {
        PyErr_Format(PyExc_ValueError, "record %d of the batch is malformed (at byte %zd)", w->index, w->pos);
    }
}

static int walk_start(Walk *w, const uint8_t *buf, Py_ssize_t size) {
    w->buf = buf;
    w->size = size;
    w->index = 0;
    w->pos = 0;
    if (w->size < HEADER_SIZE) {
        return WALK_SHORT;
    }
    int attributes = (int)get_be(w->buf + ATTRIBUTES_AT, 2);
    if (attributes & COMPRESSION_MASK) {
        return WALK_COMPRESSED;
    }
    w->log_append = (attributes & LOG_APPEND_TIME) != 0;
    w->base_offset = get_be(w->buf, 8);
    w->base_ts = get_be(w->buf + BASE_TIMESTAMP_AT, 8);
    w->max_ts = get_be(w->buf + MAX_TIMESTAMP_AT, 8);
    w->count = (int32_t)get_be(w->buf + COUNT_AT, 4);
    if (w->count < 0) {
        return WALK_COUNT;
    }
    w->pos = HEADER_SIZE;
    return WALK_OK;
}

/* The next record into *r: 1, 0 at the end, WALK_MALFORMED. */
static int walk_next(Walk *w, Record *r) {
    if (w->index >= w->count) {
        return 0;
    }
    int64_t length, attrs_unused, ts_delta, off_delta;
    Py_ssize_t pos = w->pos;
    if (get_varint(w->buf, &pos, w->size, &length) < 0 || length < 0 || length > w->size - pos) {
        goto corrupt;
    }
    Py_ssize_t end = pos + (Py_ssize_t)length;
    if (pos >= end) {
        goto corrupt;
    }
    attrs_unused = w->buf[pos++];
    (void)attrs_unused;
    if (get_varint(w->buf, &pos, end, &ts_delta) < 0 || get_varint(w->buf, &pos, end, &off_delta) < 0 ||
        get_varint(w->buf, &pos, end, &r->key_len) < 0 || r->key_len < -1 || r->key_len > end - pos) {
        goto corrupt;
    }
    r->key_at = pos;
    pos += r->key_len > 0 ? (Py_ssize_t)r->key_len : 0;
    if (get_varint(w->buf, &pos, end, &r->value_len) < 0 || r->value_len < -1 || r->value_len > end - pos) {
        goto corrupt;
    }
    r->value_at = pos;
    pos += r->value_len > 0 ? (Py_ssize_t)r->value_len : 0;
    if (get_varint(w->buf, &pos, end, &r->headers) < 0 || r->headers < 0) {
        goto corrupt;
    }
    r->offset = w->base_offset + off_delta;
    r->timestamp = w->log_append ? w->max_ts : w->base_ts + ts_delta;
    w->pos = end;
    w->index++;
    return 1;
corrupt:
    return WALK_MALFORMED;
}

/* -- scan --------------------------------------------------------------------------------------------- */

static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    long long start, end;
    if (!PyArg_ParseTuple(args, "y*LL", &view, &start, &end)) {
        return NULL;
    }
    Walk w;
    Record r;
    Py_ssize_t rows = 0, key_bytes = 0, value_bytes = 0, headers = 0;
    int more = walk_start(&w, view.buf, view.len);
    while (more == 0 && (more = walk_next(&w, &r)) == 1) {
        more = 0;
        if (r.offset < start || r.offset >= end) {
            continue;
        }
        rows++;
        key_bytes += r.key_len > 0 ? (Py_ssize_t)r.key_len : 0;
        value_bytes += r.value_len > 0 ? (Py_ssize_t)r.value_len : 0;
        headers += r.headers > 0;
    }
    PyBuffer_Release(&view);
    if (more < 0) {
        walk_error(&w, more);
        return NULL;
    }
    return Py_BuildValue("(nnnn)", rows, key_bytes, value_bytes, headers);
}

/* -- fill --------------------------------------------------------------------------------------------- */

typedef struct {
    PyObject *offsets, *data, *validity; /* bytearrays */
    int32_t *off;
    uint8_t *bytes, *bits;
    Py_ssize_t used, nulls;
} Column;

static void column_clear(Column *c) {
    Py_CLEAR(c->offsets);
    Py_CLEAR(c->data);
    Py_CLEAR(c->validity);
}

static int column_alloc(Column *c, Py_ssize_t rows, Py_ssize_t bytes) {
    c->offsets = PyByteArray_FromStringAndSize(NULL, (rows + 1) * (Py_ssize_t)sizeof(int32_t));
    c->data = PyByteArray_FromStringAndSize(NULL, bytes);
    c->validity = PyByteArray_FromStringAndSize(NULL, (rows + 7) / 8);
    if (c->offsets == NULL || c->data == NULL || c->validity == NULL) {
        return -1;
    }
    c->off = (int32_t *)PyByteArray_AS_STRING(c->offsets);
    c->bytes = (uint8_t *)PyByteArray_AS_STRING(c->data);
    c->bits = (uint8_t *)PyByteArray_AS_STRING(c->validity);
    memset(c->bits, 0, (size_t)((rows + 7) / 8));
    c->off[0] = 0;
    return 0;
}

/* Append row `row`'s field; -1 if it would pass the measured total. */
static inline int column_put(Column *c, Py_ssize_t row, Py_ssize_t limit, const uint8_t *src, int64_t len) {
    if (len < 0) {
        c->nulls++;
    } else {
        if (len > limit - c->used) {
            return -1;
        }
        memcpy(c->bytes + c->used, src, (size_t)len);
        c->used += (Py_ssize_t)len;
        c->bits[row >> 3] |= (uint8_t)(1u << (row & 7));
    }
    c->off[row + 1] = (int32_t)c->used;
    return 0;
}

static PyObject *column_result(Column *c) {
    return Py_BuildValue("(OOOn)", c->offsets, c->data, c->nulls ? c->validity : Py_None, c->nulls);
}

typedef struct {
    Py_buffer view;
    long long start, end;
} Piece;

typedef struct {
    Column key, value;
    int64_t *offsets, *stamps;
    Py_ssize_t rows, key_bytes, value_bytes, row;
    Walk walk; /* where a failed walk stopped */
} Output;

/* Write every record of `pieces` in range; runs without the GIL. 0, a WALK_* code, or 1: past the totals. */
static int fill_pieces(const Piece *pieces, Py_ssize_t count, Output *out) {
    for (Py_ssize_t p = 0; p < count; p++) {
        Walk *w = &out->walk;
        Record r;
        int more = walk_start(w, pieces[p].view.buf, pieces[p].view.len);
        while (more == 0 && (more = walk_next(w, &r)) == 1) {
            more = 0;
            if (r.offset < pieces[p].start || r.offset >= pieces[p].end) {
                continue;
            }
            Py_ssize_t row = out->row;
            if (row >= out->rows || column_put(&out->key, row, out->key_bytes, w->buf + r.key_at, r.key_len) < 0 ||
                column_put(&out->value, row, out->value_bytes, w->buf + r.value_at, r.value_len) < 0) {
                return 1;
            }
            out->offsets[row] = r.offset;
            out->stamps[row] = r.timestamp * 1000; /* ms -> us */
            out->row++;
        }
        if (more < 0) {
            return more;
        }
    }
    return 0;
}

/* The views of `pieces` (a list of (batch, start, end)); NULL with an exception set. */
static Piece *open_pieces(PyObject *pieces, Py_ssize_t *opened) {
    Py_ssize_t count = PyList_GET_SIZE(pieces);
    Piece *out = PyMem_Calloc((size_t)(count ? count : 1), sizeof(Piece));
    *opened = 0;
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t p = 0; p < count; p++) {
        PyObject *piece = PyList_GET_ITEM(pieces, p);
        if (!PyTuple_Check(piece) || !PyArg_ParseTuple(piece, "y*LL", &out[p].view, &out[p].start, &out[p].end)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "each piece must be a (batch, start, end) tuple");
            }
            return out;
        }
        (*opened)++;
    }
    return out;
}

static void close_pieces(Piece *pieces, Py_ssize_t opened) {
    for (Py_ssize_t p = 0; p < opened; p++) {
        PyBuffer_Release(&pieces[p].view);
    }
    PyMem_Free(pieces);
}

static PyObject *fill(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *list;
    Output out;
    memset(&out, 0, sizeof(out));
    if (!PyArg_ParseTuple(args, "O!nnn", &PyList_Type, &list, &out.rows, &out.key_bytes, &out.value_bytes)) {
        return NULL;
    }
    if (out.rows < 0 || out.key_bytes < 0 || out.value_bytes < 0 || out.key_bytes > INT32_MAX ||
        out.value_bytes > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "rows and byte totals must be non-negative, and each column under 2 GiB");
        return NULL;
    }
    PyObject *offsets = NULL, *stamps = NULL, *result = NULL;
    Py_ssize_t opened = 0;
    Piece *pieces = NULL;
    if (column_alloc(&out.key, out.rows, out.key_bytes) < 0 || column_alloc(&out.value, out.rows, out.value_bytes) < 0) {
        goto done;
    }
    offsets = PyByteArray_FromStringAndSize(NULL, out.rows * (Py_ssize_t)sizeof(int64_t));
    stamps = PyByteArray_FromStringAndSize(NULL, out.rows * (Py_ssize_t)sizeof(int64_t));
    if (offsets == NULL || stamps == NULL) {
        goto done;
    }
    out.offsets = (int64_t *)PyByteArray_AS_STRING(offsets);
    out.stamps = (int64_t *)PyByteArray_AS_STRING(stamps);
    pieces = open_pieces(list, &opened);
    if (pieces == NULL || PyErr_Occurred()) {
        goto done;
    }
    int failed;
    /* The batches are immutable bytes held by their views; the outputs are not shared yet. */
    Py_BEGIN_ALLOW_THREADS
    failed = fill_pieces(pieces, opened, &out);
    Py_END_ALLOW_THREADS
    if (failed < 0) {
        walk_error(&out.walk, failed);
        goto done;
    }
    if (failed > 0) {
        PyErr_SetString(PyExc_ValueError, "the pieces hold more than the totals given (scan them first)");
        goto done;
    }
    if (out.row != out.rows || out.key.used != out.key_bytes || out.value.used != out.value_bytes) {
        PyErr_SetString(PyExc_ValueError, "the pieces hold less than the totals given (scan them first)");
        goto done;
    }
    PyObject *k = column_result(&out.key), *v = column_result(&out.value);
    if (k != NULL && v != NULL) {
        result = Py_BuildValue("(OOOO)", k, v, offsets, stamps);
    }
    Py_XDECREF(k);
    Py_XDECREF(v);
done:
    if (pieces != NULL) {
        close_pieces(pieces, opened);
    }
    column_clear(&out.key);
    column_clear(&out.value);
    Py_XDECREF(offsets);
    Py_XDECREF(stamps);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(batch, start, end) -> (rows, key_bytes, value_bytes, with_headers) of the records in [start, end)."},
    {"fill", fill, METH_VARARGS,
     "fill(pieces, rows, key_bytes, value_bytes) -> (key, value, offsets, timestamps_us) as Arrow buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_arrow_decode", "Arrow column buffers from uncompressed v2 batches.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__arrow_decode(void) { return PyModule_Create(&module); }
