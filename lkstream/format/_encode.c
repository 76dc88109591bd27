/*
 * lkstream.format._encode: v2 record batches from Python records, in C.
 *
 *   encode(records, timestamp, timestamps, headers) -> (batch, largest)
 *   encode_routed(records, routes, partitions, timestamp) -> (batches, slots)
 *   results(slots, pids, bases) -> [(partition, offset), ...]
 *   offsets(pid, base, count) -> [(pid, base), ..., (pid, base + count - 1)]
 *
 * The pure-Python reference is lkstream.format.encode (encode_py, encode_routed_py,
 * results_py); tests hold the two to the same bytes, and both to aiokafka's builder.
 *
 * Each call makes two passes over the records: the first reads every field's length
 * and sizes each batch exactly, the second writes the records into one buffer
 * allocated once. No Python object is made per record. The buffer comes back with
 * the whole 61-byte header written except the CRC (zero): the caller compresses if
 * asked and computes the CRC-32C with the crc32c package (hardware CRC).
 *
 * Header (big-endian): baseOffset int64 (0; the broker stamps it) | batchLength int32
 * | partitionLeaderEpoch int32 (-1) | magic int8 (2) | crc uint32 | attributes int16 (0)
 * | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 | producerId int64
 * (-1) | producerEpoch int16 (-1) | baseSequence int32 (-1) | recordsCount int32.
 *
 * Record (varints zigzag): length varint | attributes int8 (0) | timestampDelta varlong
 * | offsetDelta varint | keyLength varint (-1: null) | key | valueLength varint | value
 * | headerCount varint | { keyLength varint | UTF-8 key | valueLength varint | value }.
 *
 * Keys and values are None, bytes, str (encoded UTF-8), bytearray or a contiguous memoryview;
 * header keys str, header values None or bytes: what lkstream.format.produce accepts. Anything
 * else raises TypeError naming the record.
 *
 * Safety: between the two passes no Python code may run, or it could change the
 * records. Only exact str, bytes and None keys are looked up in `routes` (their
 * hashing and comparison are C), and nothing GC-tracked is allocated before the
 * second pass ends (bytearrays are not GC-tracked), so no collection, and no
 * finalizer, can run in between. A buffer whose length changed anyway is an error.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_v2_put.h"

#define HEADER_SIZE 61
#define LENGTH_AT 8
#define ATTRIBUTES_AT 21
/* batchLength counts the bytes after itself; it is an int32. */
#define MAX_BATCH_BYTES ((Py_ssize_t)INT32_MAX + 12)

/* -- fields ---------------------------------------------------------------------------------------- */

/* What a field may be: a key or value (bytes, str, bytearray, memoryview, None), or a header value
 * (bytes or None). The same sets as lkstream.format.produce.to_bytes and check_headers, so every
 * produce path accepts and rejects the same records. */
enum { ANY_BYTES, BYTES_ONLY };

/* Length of a field (-1 for None), or -2 with an exception set. */
static Py_ssize_t field_length(PyObject *obj, int allowed, const char *what, Py_ssize_t index) {
    if (PyBytes_Check(obj)) {
        return PyBytes_GET_SIZE(obj);
    }
    if (obj == Py_None) {
        return -1;
    }
    if (allowed == ANY_BYTES && PyUnicode_Check(obj)) {
        Py_ssize_t size;
        if (PyUnicode_AsUTF8AndSize(obj, &size) == NULL) {
            return -2;
        }
        return size;
    }
    if (allowed == ANY_BYTES && PyByteArray_Check(obj)) {
        return PyByteArray_GET_SIZE(obj);
    }
    if (allowed == ANY_BYTES && PyMemoryView_Check(obj)) {
        Py_buffer view;
        if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) {
            /* Not contiguous bytes: the caller's general path copies it with bytes(). */
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "record %zd: %s is a memoryview that is not contiguous bytes", index, what);
            return -2;
        }
        Py_ssize_t size = view.len;
        PyBuffer_Release(&view);
        return size;
    }
    PyErr_Format(PyExc_TypeError, "record %zd: %s must be %s, not %.100s", index, what,
                 allowed == ANY_BYTES ? "bytes, str or None" : "bytes or None", Py_TYPE(obj)->tp_name);
    return -2;
}

/* Write a field of `length` bytes (as measured by field_length, >= 0) at out; NULL on error. */
static uint8_t *put_field(uint8_t *out, PyObject *obj, Py_ssize_t length) {
    const char *data;
    if (PyBytes_Check(obj)) {
        data = PyBytes_AS_STRING(obj);
    } else if (PyUnicode_Check(obj)) {
        Py_ssize_t size;
        data = PyUnicode_AsUTF8AndSize(obj, &size); /* cached by the first pass */
        if (data == NULL) {
            return NULL;
        }
    } else if (PyByteArray_Check(obj)) {
        if (PyByteArray_GET_SIZE(obj) != length) {
            PyErr_SetString(PyExc_RuntimeError, "a bytearray changed size while its batch was encoded");
            return NULL;
        }
        data = PyByteArray_AS_STRING(obj);
    } else {
        Py_buffer view;
        if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) {
            return NULL;
        }
        if (view.len != length) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_RuntimeError, "a buffer changed size while its batch was encoded");
            return NULL;
        }
        memcpy(out, view.buf, (size_t)length);
        PyBuffer_Release(&view);
        return out + length;
    }
    memcpy(out, data, (size_t)length);
    return out + length;
}

/* -- one record ------------------------------------------------------------------------------------ */

typedef struct {
    PyObject *key;
    PyObject *value;
    PyObject *headers; /* a list or tuple of pairs, or NULL */
} Parts;

/* The key, value and headers of records[index] (item[2] unless `headers` is given). Borrowed. */
static int record_parts(PyObject *item, PyObject *headers, Py_ssize_t index, Parts *parts) {
    Py_ssize_t size;
    PyObject **fields;
    if (PyTuple_CheckExact(item)) {
        size = PyTuple_GET_SIZE(item);
        fields = &PyTuple_GET_ITEM(item, 0);
    } else if (PyList_CheckExact(item)) {
        size = PyList_GET_SIZE(item);
        fields = PySequence_Fast_ITEMS(item);
    } else {
        size = -1;
        fields = NULL;
    }
    if (size != 2 && size != 3) {
        PyErr_Format(PyExc_TypeError, "record %zd must be a (key, value) or (key, value, headers) tuple", index);
        return -1;
    }
    parts->key = fields[0];
    parts->value = fields[1];
    PyObject *own = headers != NULL ? PySequence_Fast_GET_ITEM(headers, index) : (size == 3 ? fields[2] : NULL);
    if (own == Py_None || (own != NULL && (PyTuple_CheckExact(own) || PyList_CheckExact(own)) &&
                           PySequence_Fast_GET_SIZE(own) == 0)) {
        own = NULL;
    }
    if (own != NULL && !PyTuple_CheckExact(own) && !PyList_CheckExact(own)) {
        PyErr_Format(PyExc_TypeError, "record %zd: headers must be a list of (str, bytes | None) pairs", index);
        return -1;
    }
    parts->headers = own;
    return 0;
}

/* The header pair headers[h] as (key, value); borrowed. */
static int header_pair(PyObject *headers, Py_ssize_t h, Py_ssize_t index, PyObject **key, PyObject **value) {
    PyObject *pair = PySequence_Fast_GET_ITEM(headers, h);
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
        PyErr_Format(PyExc_TypeError, "record %zd: header %zd must be a (str, bytes | None) pair", index, h);
        return -1;
    }
    *key = PyTuple_GET_ITEM(pair, 0);
    *value = PyTuple_GET_ITEM(pair, 1);
    return 0;
}

/* Bytes of the record body (everything after its length varint); -1 on error. Sets *kv to key + value bytes. */
static Py_ssize_t body_size(const Parts *parts, int64_t ts_delta, Py_ssize_t offset_delta, Py_ssize_t index,
                            Py_ssize_t *kv) {
    Py_ssize_t key = field_length(parts->key, ANY_BYTES, "key", index);
    if (key == -2) {
        return -1;
    }
    Py_ssize_t value = field_length(parts->value, ANY_BYTES, "value", index);
    if (value == -2) {
        return -1;
    }
    if (key > INT32_MAX || value > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "record %zd: a key or value of 2 GiB or more", index);
        return -1;
    }
    *kv = (key > 0 ? key : 0) + (value > 0 ? value : 0);
    Py_ssize_t size = 1 + varint_size(zigzag(ts_delta)) + varint_size(zigzag(offset_delta)) +
                      varint_size(zigzag(key)) + (key > 0 ? key : 0) + varint_size(zigzag(value)) +
                      (value > 0 ? value : 0);
    Py_ssize_t count = parts->headers == NULL ? 0 : PySequence_Fast_GET_SIZE(parts->headers);
    size += varint_size(zigzag(count));
    for (Py_ssize_t h = 0; h < count; h++) {
        PyObject *hkey, *hvalue;
        if (header_pair(parts->headers, h, index, &hkey, &hvalue) < 0) {
            return -1;
        }
        Py_ssize_t klen = field_length(hkey, ANY_BYTES, "header key", index);
        Py_ssize_t vlen = klen == -2 ? -2 : field_length(hvalue, BYTES_ONLY, "header value", index);
        if (vlen == -2) {
            return -1;
        }
        if (klen > INT32_MAX || vlen > INT32_MAX || size > MAX_BATCH_BYTES) {
            PyErr_Format(PyExc_OverflowError, "record %zd: headers of 2 GiB or more", index);
            return -1;
        }
        size += varint_size(zigzag(klen)) + klen + varint_size(zigzag(vlen)) + (vlen > 0 ? vlen : 0);
    }
    if (size > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "record %zd is 2 GiB or more", index);
        return -1;
    }
    return size;
}

static uint8_t *put_sized(uint8_t *out, PyObject *obj, Py_ssize_t length) {
    out = put_varint(out, zigzag(length));
    return length > 0 ? put_field(out, obj, length) : out;
}

static uint8_t *put_record(uint8_t *out, const Parts *parts, Py_ssize_t body, int64_t ts_delta,
                           Py_ssize_t offset_delta, Py_ssize_t index) {
    out = put_varint(out, zigzag(body));
    *out++ = 0; /* attributes */
    out = put_varint(out, zigzag(ts_delta));
    out = put_varint(out, zigzag(offset_delta));
    out = put_sized(out, parts->key, field_length(parts->key, ANY_BYTES, "key", index));
    if (out == NULL) {
        return NULL;
    }
    out = put_sized(out, parts->value, field_length(parts->value, ANY_BYTES, "value", index));
    Py_ssize_t count = parts->headers == NULL ? 0 : PySequence_Fast_GET_SIZE(parts->headers);
    if (out == NULL) {
        return NULL;
    }
    out = put_varint(out, zigzag(count));
    for (Py_ssize_t h = 0; h < count && out != NULL; h++) {
        PyObject *hkey, *hvalue;
        if (header_pair(parts->headers, h, index, &hkey, &hvalue) < 0) {
            return NULL;
        }
        out = put_sized(out, hkey, field_length(hkey, ANY_BYTES, "header key", index));
        if (out != NULL) {
            out = put_sized(out, hvalue, field_length(hvalue, BYTES_ONLY, "header value", index));
        }
    }
    return out;
}


/* -- encode ---------------------------------------------------------------------------------------- */

static int64_t *read_timestamps(PyObject *timestamps, Py_ssize_t count) {
    int64_t *out = PyMem_Malloc(sizeof(int64_t) * (size_t)count);
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *ts = PySequence_Fast_GET_ITEM(timestamps, i);
        if (!PyLong_CheckExact(ts)) {
            PyErr_Format(PyExc_TypeError, "record %zd: timestamp must be an int", i);
            PyMem_Free(out);
            return NULL;
        }
        long long value = PyLong_AsLongLong(ts);
        if (value == -1 && PyErr_Occurred()) {
            PyMem_Free(out);
            return NULL;
        }
        out[i] = value;
    }
    return out;
}

static PyObject *fast_or_none(PyObject *obj, Py_ssize_t count, const char *what) {
    if (obj == Py_None) {
        return NULL;
    }
    PyObject *fast = PySequence_Fast(obj, what);
    if (fast != NULL && PySequence_Fast_GET_SIZE(fast) != count) {
        PyErr_Format(PyExc_ValueError, "%s must have one entry per record", what);
        Py_DECREF(fast);
        return NULL;
    }
    return fast;
}

/* Fill `buf` (exactly sized) with the records; bodies[] from the first pass. */
static int write_records(uint8_t *buf, Py_ssize_t total, PyObject *records, PyObject *headers,
                         const Py_ssize_t *bodies, const int64_t *stamps, int64_t base_ts) {
    uint8_t *out = buf + HEADER_SIZE;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(records);
    for (Py_ssize_t i = 0; i < count; i++) {
        Parts parts;
        if (record_parts(PySequence_Fast_GET_ITEM(records, i), headers, i, &parts) < 0) {
            return -1;
        }
        out = put_record(out, &parts, bodies[i], stamps == NULL ? 0 : stamps[i] - base_ts, i, i);
        if (out == NULL) {
            return -1;
        }
    }
    if (out != buf + total) {
        PyErr_SetString(PyExc_RuntimeError, "records changed while their batch was encoded");
        return -1;
    }
    return 0;
}

static PyObject *encode(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *records_arg, *timestamps_arg, *headers_arg;
    long long timestamp;
    if (!PyArg_ParseTuple(args, "OLOO", &records_arg, &timestamp, &timestamps_arg, &headers_arg)) {
        return NULL;
    }
    PyObject *records = PySequence_Fast(records_arg, "records must be a list or tuple");
    if (records == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(records);
    PyObject *timestamps = NULL, *headers = NULL, *result = NULL, *batch = NULL;
    int64_t *stamps = NULL;
    Py_ssize_t *bodies = NULL;
    if (count == 0) {
        PyErr_SetString(PyExc_ValueError, "a batch needs at least one record");
        goto done;
    }
    timestamps = fast_or_none(timestamps_arg, count, "timestamps");
    headers = fast_or_none(headers_arg, count, "headers");
    if (PyErr_Occurred()) {
        goto done;
    }
    if (timestamps != NULL && (stamps = read_timestamps(timestamps, count)) == NULL) {
        goto done;
    }
    bodies = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)count);
    if (bodies == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t base_ts = stamps == NULL ? timestamp : stamps[0];
    int64_t max_ts = base_ts;
    Py_ssize_t total = HEADER_SIZE, largest = 0;
    for (Py_ssize_t i = 0; i < count; i++) { /* first pass: sizes */
        Parts parts;
        Py_ssize_t kv;
        int64_t delta = 0;
        if (stamps != NULL) {
            if (stamps[i] > max_ts) {
                max_ts = stamps[i];
            }
            if (__builtin_sub_overflow(stamps[i], base_ts, &delta)) {
                PyErr_Format(PyExc_OverflowError, "record %zd: timestamp delta overflows", i);
                goto done;
            }
        }
        if (record_parts(PySequence_Fast_GET_ITEM(records, i), headers, i, &parts) < 0) {
            goto done;
        }
        Py_ssize_t body = body_size(&parts, delta, i, i, &kv);
        if (body < 0) {
            goto done;
        }
        bodies[i] = body;
        total += varint_size(zigzag(body)) + body;
        if (kv > largest) {
            largest = kv;
        }
        if (total > MAX_BATCH_BYTES) {
            PyErr_SetString(PyExc_OverflowError, "the records take 2 GiB or more: too large for one batch");
            goto done;
        }
    }
    batch = PyByteArray_FromStringAndSize(NULL, total); /* not GC-tracked: no collection can run here */
    if (batch == NULL) {
        goto done;
    }
    uint8_t *buf = (uint8_t *)PyByteArray_AS_STRING(batch);
    put_header(buf, total, count, base_ts, max_ts);
    if (write_records(buf, total, records, headers, bodies, stamps, base_ts) < 0) {
        goto done;
    }
    result = Py_BuildValue("(On)", batch, largest);
done:
    Py_XDECREF(batch);
    PyMem_Free(bodies);
    PyMem_Free(stamps);
    Py_XDECREF(headers);
    Py_XDECREF(timestamps);
    Py_DECREF(records);
    return result;
}

/* -- encode_routed ---------------------------------------------------------------------------------- */

typedef struct {
    long pid;
    Py_ssize_t count;
    Py_ssize_t total;
    Py_ssize_t largest;
    uint8_t *out;
} Target;

/* The partition of a record's key from `routes` (exact str, bytes or None keys only). */
static long route_of(PyObject *routes, PyObject *key, long partitions, Py_ssize_t index) {
    if (!(key == Py_None || PyUnicode_CheckExact(key) || PyBytes_CheckExact(key))) {
        PyErr_Format(PyExc_TypeError, "record %zd: key must be bytes, str or None, not %.100s", index,
                     Py_TYPE(key)->tp_name);
        return -1;
    }
    PyObject *pid = PyDict_GetItemWithError(routes, key);
    if (pid == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_KeyError, "record %zd: its key has no route", index);
        }
        return -1;
    }
    long value = PyLong_AsLong(pid);
    if (value < 0 || value >= partitions) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "record %zd: route %ld is not a partition below %ld", index, value,
                         partitions);
        }
        return -1;
    }
    return value;
}

static PyObject *routed_result(Target *targets, Py_ssize_t used, PyObject **buffers, uint32_t *slots,
                               Py_ssize_t count) {
    PyObject *batches = PyList_New(used);
    PyObject *slot_bytes = PyBytes_FromStringAndSize((const char *)slots, (Py_ssize_t)sizeof(uint32_t) * count);
    if (batches == NULL || slot_bytes == NULL) {
        Py_XDECREF(batches);
        Py_XDECREF(slot_bytes);
        return NULL;
    }
    for (Py_ssize_t b = 0; b < used; b++) {
        PyObject *entry = Py_BuildValue("(lOn)", targets[b].pid, buffers[b], targets[b].largest);
        if (entry == NULL) {
            Py_DECREF(batches);
            Py_DECREF(slot_bytes);
            return NULL;
        }
        PyList_SET_ITEM(batches, b, entry);
    }
    PyObject *result = PyTuple_Pack(2, batches, slot_bytes);
    Py_DECREF(batches);
    Py_DECREF(slot_bytes);
    return result;
}

/* First pass of encode_routed: each record's target and body size; returns how many targets, or -1. */
static Py_ssize_t route_all(PyObject *records, PyObject *routes, long partitions, Target *targets,
                            int32_t *target_of_pid, uint32_t *slots, Py_ssize_t *bodies) {
    Py_ssize_t used = 0, count = PySequence_Fast_GET_SIZE(records);
    for (Py_ssize_t i = 0; i < count; i++) {
        Parts parts;
        Py_ssize_t kv;
        if (record_parts(PySequence_Fast_GET_ITEM(records, i), NULL, i, &parts) < 0) {
            return -1;
        }
        if (parts.headers != NULL) {
            PyErr_Format(PyExc_TypeError, "record %zd has headers: not routed here", i);
            return -1;
        }
        long pid = route_of(routes, parts.key, partitions, i);
        if (pid < 0) {
            return -1;
        }
        if (target_of_pid[pid] < 0) {
            target_of_pid[pid] = (int32_t)used;
            targets[used] = (Target){.pid = pid, .count = 0, .total = HEADER_SIZE, .largest = 0, .out = NULL};
            used++;
        }
        Target *target = &targets[target_of_pid[pid]];
        Py_ssize_t body = body_size(&parts, 0, target->count, i, &kv);
        if (body < 0) {
            return -1;
        }
        bodies[i] = body;
        slots[i] = (uint32_t)target_of_pid[pid];
        target->count++;
        target->total += varint_size(zigzag(body)) + body;
        if (kv > target->largest) {
            target->largest = kv;
        }
        if (target->total > MAX_BATCH_BYTES) {
            PyErr_SetString(PyExc_OverflowError, "one partition's records take 2 GiB or more");
            return -1;
        }
    }
    return used;
}

static PyObject *encode_routed(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *records_arg, *routes;
    long partitions;
    long long timestamp;
    if (!PyArg_ParseTuple(args, "OO!lL", &records_arg, &PyDict_Type, &routes, &partitions, &timestamp)) {
        return NULL;
    }
    if (partitions <= 0 || partitions > (1L << 20)) { /* max_partitions is at most 1,000,000 */
        PyErr_Format(PyExc_ValueError, "partitions must be in 1..2**20, not %ld", partitions);
        return NULL;
    }
    PyObject *records = PySequence_Fast(records_arg, "records must be a list or tuple");
    if (records == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(records), used = 0, written = 0;
    PyObject *result = NULL;
    PyObject **buffers = NULL;
    Py_ssize_t max_targets = count < partitions ? count : partitions;
    Target *targets = PyMem_Calloc((size_t)(max_targets > 0 ? max_targets : 1), sizeof(Target));
    int32_t *target_of_pid = PyMem_Malloc(sizeof(int32_t) * (size_t)partitions);
    uint32_t *slots = PyMem_Malloc(sizeof(uint32_t) * (size_t)(count > 0 ? count : 1));
    Py_ssize_t *bodies = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(count > 0 ? count : 1));
    if (targets == NULL || target_of_pid == NULL || slots == NULL || bodies == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (count == 0) {
        PyErr_SetString(PyExc_ValueError, "a batch needs at least one record");
        goto done;
    }
    for (long p = 0; p < partitions; p++) {
        target_of_pid[p] = -1;
    }
    used = route_all(records, routes, partitions, targets, target_of_pid, slots, bodies);
    if (used < 0) {
        goto done;
    }
    buffers = PyMem_Calloc((size_t)used, sizeof(PyObject *));
    if (buffers == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; written < used; written++) { /* bytearrays are not GC-tracked: no collection can run here */
        buffers[written] = PyByteArray_FromStringAndSize(NULL, targets[written].total);
        if (buffers[written] == NULL) {
            goto done;
        }
        uint8_t *buf = (uint8_t *)PyByteArray_AS_STRING(buffers[written]);
        put_header(buf, targets[written].total, targets[written].count, timestamp, timestamp);
        targets[written].out = buf + HEADER_SIZE;
        targets[written].count = 0; /* counts again in the second pass: the offset deltas */
    }
    for (Py_ssize_t i = 0; i < count; i++) { /* second pass: write */
        Parts parts;
        Target *target = &targets[slots[i]];
        if (record_parts(PySequence_Fast_GET_ITEM(records, i), NULL, i, &parts) < 0) {
            goto done;
        }
        target->out = put_record(target->out, &parts, bodies[i], 0, target->count, i);
        if (target->out == NULL) {
            goto done;
        }
        target->count++;
    }
    for (Py_ssize_t b = 0; b < used; b++) {
        if (targets[b].out != (uint8_t *)PyByteArray_AS_STRING(buffers[b]) + targets[b].total) {
            PyErr_SetString(PyExc_RuntimeError, "records changed while their batches were encoded");
            goto done;
        }
    }
    result = routed_result(targets, used, buffers, slots, count);
done:
    for (Py_ssize_t b = 0; b < written; b++) {
        Py_XDECREF(buffers[b]);
    }
    PyMem_Free(buffers);
    PyMem_Free(bodies);
    PyMem_Free(slots);
    PyMem_Free(target_of_pid);
    PyMem_Free(targets);
    Py_DECREF(records);
    return result;
}

/* -- results ------------------------------------------------------------------------------------------ */

/* (pid, offset) as a tuple the garbage collector does not track (it holds two ints; CPython
 * untracks such tuples itself at their first collection). Thousands are made per produce call
 * and live until the caller drops them: made tracked, the next collection walks them all before it
 * untracks them; made untracked, none does (their allocation still counts towards the next young
 * collection). Steals the reference to offset. */
static PyObject *untracked_pair(PyObject *pid, PyObject *offset) {
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(offset);
        return NULL;
    }
    Py_INCREF(pid);
    PyTuple_SET_ITEM(pair, 0, pid);
    PyTuple_SET_ITEM(pair, 1, offset);
    PyObject_GC_UnTrack(pair);
    return pair;
}

/* offsets(pid, base, count) -> [(pid, base), (pid, base + 1), ...]: one batch's results. */
static PyObject *offsets(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *pid;
    long long base;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "O!Ln", &PyLong_Type, &pid, &base, &count)) {
        return NULL;
    }
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must not be negative");
        return NULL;
    }
    PyObject *out = PyList_New(count);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *offset = PyLong_FromLongLong(base + i);
        PyObject *pair = offset == NULL ? NULL : untracked_pair(pid, offset);
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, pair);
    }
    return out;
}

static PyObject *results(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer slots;
    PyObject *pids, *bases;
    if (!PyArg_ParseTuple(args, "y*O!O!", &slots, &PyList_Type, &pids, &PyList_Type, &bases)) {
        return NULL;
    }
    Py_ssize_t count = slots.len / (Py_ssize_t)sizeof(uint32_t), targets = PyList_GET_SIZE(pids);
    PyObject *out = NULL;
    long long *next = NULL;
    if (PyList_GET_SIZE(bases) != targets) {
        PyErr_SetString(PyExc_ValueError, "one base offset per batch");
        goto done;
    }
    next = PyMem_Malloc(sizeof(long long) * (size_t)(targets > 0 ? targets : 1));
    if (next == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t b = 0; b < targets; b++) {
        next[b] = PyLong_AsLongLong(PyList_GET_ITEM(bases, b));
        if (next[b] == -1 && PyErr_Occurred()) {
            goto done;
        }
    }
    out = PyList_New(count);
    if (out == NULL) {
        goto done;
    }
    const uint32_t *slot = (const uint32_t *)slots.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint32_t b = slot[i];
        if ((Py_ssize_t)b >= targets) {
            PyErr_SetString(PyExc_ValueError, "a slot names no batch");
            Py_CLEAR(out);
            goto done;
        }
        PyObject *offset = PyLong_FromLongLong(next[b]++);
        if (offset == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyObject *pair = untracked_pair(PyList_GET_ITEM(pids, b), offset);
        if (pair == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, pair);
    }
done:
    PyMem_Free(next);
    PyBuffer_Release(&slots);
    return out;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS,
     "encode(records, timestamp, timestamps, headers) -> (batch, largest): one v2 batch without its CRC; "
     "largest is the biggest key + value in bytes."},
    {"encode_routed", encode_routed, METH_VARARGS,
     "encode_routed(records, routes, partitions, timestamp) -> ([(pid, batch, largest)], slots): one batch "
     "per partition that routes[key] names; slots holds each record's batch index as native uint32."},
    {"offsets", offsets, METH_VARARGS,
     "offsets(pid, base, count) -> [(pid, base), (pid, base + 1), ...]: one batch's results (untracked tuples)."},
    {"results", results, METH_VARARGS,
     "results(slots, pids, bases) -> [(partition, offset)] in record order, from each batch's base offset."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_encode", "v2 record batch encoder.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__encode(void) { return PyModule_Create(&module); }
