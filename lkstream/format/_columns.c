/*
 * lkstream.format._columns: a v2 record batch straight from Arrow binary columns, in C.
 *
 *   encode_columns(key, value, start, end, timestamp) -> (batch, largest)
 *
 * `key` and `value` are each None (every row null) or a tuple describing one Arrow
 * `binary` array (32-bit offsets; strings cast to binary share the same buffers):
 *
 *   (offsets, data, validity or None, array_offset, length)
 *
 * where offsets, data and validity are objects with the buffer protocol (pyarrow.Buffer)
 * and row i of the array is data[offsets[array_offset + i] : offsets[array_offset + i + 1]],
 * null when bit array_offset + i of validity (LSB first) is 0. Rows [start, end) become the
 * batch's records, in order: no headers, offset deltas 0..n-1, every record at
 * `timestamp` (ms), a null field written as length -1. `largest` is the largest key +
 * value of a record in bytes (for the daemon's per-record limit).
 *
 * The batch comes back as a bytearray with the whole 61-byte header written except the
 * CRC (zero), exactly what lkstream.format._encode.encode returns for the same records
 * (tests hold the two to the same bytes): the caller compresses if asked and sets the
 * CRC-32C (lkstream.format.encode.finish).
 *
 * This is the Spark sink's encoder (lkstream.spark.sink): it reads the columns Spark hands
 * the Python worker without making a Python object per row. Every offset is checked against
 * its buffer (non-decreasing, inside the data) before anything is written, so a malformed
 * column raises ValueError rather than reading out of bounds. The records are written with
 * the GIL released: the buffers are pyarrow's (immutable) and the output is not shared yet.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_v2_put.h"

#define HEADER_SIZE 61
/* batchLength counts the bytes after itself; it is an int32. */
#define MAX_BATCH_BYTES ((Py_ssize_t)INT32_MAX + 12)

/* -- columns ------------------------------------------------------------------------------------- */

typedef struct {
    int present;             /* 0: the whole column is null */
    Py_buffer views[3];      /* offsets, data, validity */
    int held;                /* views acquired */
    const int32_t *offsets;  /* already moved to the array's first row */
    const uint8_t *data;
    Py_ssize_t data_len;
    const uint8_t *validity; /* NULL: no nulls */
    Py_ssize_t bit0;         /* validity bit of the array's first row */
    Py_ssize_t length;
} Column;

static void column_release(Column *col) {
    for (int i = 0; i < col->held; i++) {
        PyBuffer_Release(&col->views[i]);
    }
    col->held = 0;
}

static int column_view(Column *col, PyObject *obj, const char *what, const char *part) {
    if (PyObject_GetBuffer(obj, &col->views[col->held], PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "%s column: its %s is not a contiguous buffer", what, part);
        return -1;
    }
    col->held++;
    return 0;
}

/* Parse (offsets, data, validity, array_offset, length) or None into `col`; -1 with an exception set. */
static int column_parse(PyObject *arg, Column *col, const char *what) {
    memset(col, 0, sizeof(*col));
    if (arg == Py_None) {
        return 0;
    }
    PyObject *offsets, *data, *validity;
    Py_ssize_t first, length;
    if (!PyTuple_Check(arg) ||
        !PyArg_ParseTuple(arg, "OOOnn", &offsets, &data, &validity, &first, &length)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s column must be None or (offsets, data, validity, offset, length)", what);
        return -1;
    }
    if (first < 0 || length < 0) {
        PyErr_Format(PyExc_ValueError, "%s column: negative offset or length", what);
        return -1;
    }
    if (column_view(col, offsets, what, "offsets") < 0 || column_view(col, data, what, "data") < 0) {
        return -1;
    }
    if ((size_t)col->views[0].len / sizeof(int32_t) < (size_t)first + (size_t)length + 1) {
        PyErr_Format(PyExc_ValueError, "%s column: the offsets buffer is too short for %zd rows", what, length);
        return -1;
    }
    if (validity != Py_None) {
        if (column_view(col, validity, what, "validity") < 0) {
            return -1;
        }
        if (col->views[2].len < (first + length + 7) / 8) {
            PyErr_Format(PyExc_ValueError, "%s column: the validity bitmap is too short", what);
            return -1;
        }
        col->validity = col->views[2].buf;
    }
    col->present = 1;
    col->offsets = (const int32_t *)col->views[0].buf + first;
    col->data = col->views[1].buf;
    col->data_len = col->views[1].len;
    col->bit0 = first;
    col->length = length;
    return 0;
}

/* Length of row i (-1 for null); -2 when its offsets are not a slice of the data. */
static inline Py_ssize_t field_length(const Column *col, Py_ssize_t i) {
    if (!col->present) {
        return -1;
    }
    if (col->validity != NULL) {
        Py_ssize_t bit = col->bit0 + i;
        if (!((col->validity[bit >> 3] >> (bit & 7)) & 1)) {
            return -1;
        }
    }
    int32_t lo = col->offsets[i], hi = col->offsets[i + 1];
    if (lo < 0 || hi < lo || hi > col->data_len) {
        return -2;
    }
    return hi - lo;
}

static inline uint8_t *put_field(uint8_t *out, const Column *col, Py_ssize_t i, Py_ssize_t length) {
    out = put_varint(out, zigzag(length));
    if (length > 0) {
        memcpy(out, col->data + col->offsets[i], (size_t)length);
        out += length;
    }
    return out;
}

/* -- encode_columns -------------------------------------------------------------------------------- */

/* Size of record d's body (after its length varint), given its field lengths. */
static inline Py_ssize_t body_size(Py_ssize_t d, Py_ssize_t key, Py_ssize_t value) {
    return 1 + 1 + varint_size(zigzag(d)) + varint_size(zigzag(key)) + (key > 0 ? key : 0) +
           varint_size(zigzag(value)) + (value > 0 ? value : 0) + 1;
}

/* First pass: the batch's exact size and the largest key + value; -1 with an exception set. */
static Py_ssize_t batch_size(const Column *key, const Column *value, Py_ssize_t start, Py_ssize_t end,
                             Py_ssize_t *largest) {
    Py_ssize_t total = HEADER_SIZE;
    *largest = 0;
    for (Py_ssize_t i = start; i < end; i++) {
        Py_ssize_t k = field_length(key, i), v = field_length(value, i);
        if (k == -2 || v == -2) {
            PyErr_Format(PyExc_ValueError, "row %zd: the %s column's offsets are outside its data", i,
                         k == -2 ? "key" : "value");
            return -1;
        }
        Py_ssize_t body = body_size(i - start, k, v);
        total += varint_size(zigzag(body)) + body;
        Py_ssize_t kv = (k > 0 ? k : 0) + (v > 0 ? v : 0);
        if (kv > *largest) {
            *largest = kv;
        }
        if (total > MAX_BATCH_BYTES) {
            PyErr_SetString(PyExc_OverflowError, "the rows take 2 GiB or more: too large for one batch");
            return -1;
        }
    }
    return total;
}

/* Second pass (no Python objects touched: runs without the GIL); returns the end of what was written. */
static uint8_t *write_records(uint8_t *out, const Column *key, const Column *value, Py_ssize_t start,
                              Py_ssize_t end) {
    for (Py_ssize_t i = start; i < end; i++) {
        Py_ssize_t k = field_length(key, i), v = field_length(value, i);
        Py_ssize_t d = i - start;
        out = put_varint(out, zigzag(body_size(d, k, v)));
        *out++ = 0; /* attributes */
        *out++ = 0; /* timestampDelta: every record at the batch's timestamp */
        out = put_varint(out, zigzag(d));
        out = key->present ? put_field(out, key, i, k) : put_varint(out, zigzag(-1));
        out = value->present ? put_field(out, value, i, v) : put_varint(out, zigzag(-1));
        *out++ = 0; /* headerCount */
    }
    return out;
}

static PyObject *encode_columns(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *key_arg, *value_arg;
    Py_ssize_t start, end;
    long long timestamp;
    if (!PyArg_ParseTuple(args, "OOnnL", &key_arg, &value_arg, &start, &end, &timestamp)) {
        return NULL;
    }
    Column key, value;
    PyObject *batch = NULL, *result = NULL;
    int ok = column_parse(key_arg, &key, "key");
    if (ok == 0) {
        ok = column_parse(value_arg, &value, "value");
    } else {
        memset(&value, 0, sizeof(value));
    }
    if (ok < 0) {
        goto done;
    }
    Py_ssize_t rows = key.present ? key.length : value.length;
    if ((key.present && value.present && key.length != value.length) || (!key.present && !value.present)) {
        PyErr_SetString(PyExc_ValueError, "key and value columns must be of one length (and not both None)");
        goto done;
    }
    if (start < 0 || end > rows || start >= end) {
        PyErr_Format(PyExc_ValueError, "rows [%zd, %zd) are not a non-empty range of %zd rows", start, end, rows);
        goto done;
    }
    Py_ssize_t largest;
    Py_ssize_t total = batch_size(&key, &value, start, end, &largest);
    if (total < 0) {
        goto done;
    }
    batch = PyByteArray_FromStringAndSize(NULL, total);
    if (batch == NULL) {
        goto done;
    }
    uint8_t *buf = (uint8_t *)PyByteArray_AS_STRING(batch);
    put_header(buf, total, end - start, (int64_t)timestamp, (int64_t)timestamp);
    uint8_t *written;
    Py_BEGIN_ALLOW_THREADS
    written = write_records(buf + HEADER_SIZE, &key, &value, start, end);
    Py_END_ALLOW_THREADS
    if (written != buf + total) {
        PyErr_SetString(PyExc_RuntimeError, "the batch came out of another size than measured");
        goto done;
    }
    result = Py_BuildValue("(On)", batch, largest);
done:
    Py_XDECREF(batch);
    column_release(&key);
    column_release(&value);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_columns", encode_columns, METH_VARARGS,
     "encode_columns(key, value, start, end, timestamp) -> (bytearray, largest): rows [start, end) of Arrow "
     "binary columns as one v2 batch, CRC unset."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_columns", "v2 record batches from Arrow binary columns.", -1, methods, NULL, NULL, NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
