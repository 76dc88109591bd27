/*
 * lkstream.storage._keymap: the cleaner's bounded key map, in C.
 *
 * KeyMap(slots, seed) is an open-addressing hash table of `slots` entries, each
 * 24 bytes: the 128-bit SipHash-2-4 of a record key (keyed with the 16-byte
 * `seed`, random per map) and the offset of the key's latest record. The table is
 * allocated once and never grows: put() refuses a new key once `max_entries`
 * (90% of the slots, Kafka's log.cleaner.io.buffer.load.factor) are taken, which
 * is how the cleaner knows where one pass must stop (lkstream.storage.cleaner).
 *
 * Why a 128-bit digest: two keys with one digest share an entry, and the older
 * key's latest record would be removed as if superseded. With 128 bits, and a
 * keyed hash an outside producer cannot aim at, that needs ~2^64 keys in one map
 * (Kafka keeps a 16-byte MD5 per key for the same reason).
 *
 * Memory: 24 bytes per slot, 26.7 bytes per key at the 90% load the map fills to. The table is
 * calloc'ed and an empty slot is all zeros (a slot stores offset + 1), so pages no key reached
 * are never touched: a large budget costs what the keys of a pass use, and freeing returns it.
 * Not thread-safe: one cleaner thread owns a map.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint64_t h0;
    uint64_t h1;
    int64_t next; /* the key's latest offset + 1; 0: the slot is empty */
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    Py_ssize_t size;
    Py_ssize_t max_entries;
    Py_ssize_t count;
    uint64_t k0;
    uint64_t k1;
} KeyMap;

/* -- SipHash-2-4 with a 128-bit tag (Aumasson and Bernstein's reference algorithm) ------------ */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                                   \
    do {                                                                                                           \
        v0 += v1;                                                                                                  \
        v1 = ROTL(v1, 13);                                                                                         \
        v1 ^= v0;                                                                                                  \
        v0 = ROTL(v0, 32);                                                                                         \
        v2 += v3;                                                                                                  \
        v3 = ROTL(v3, 16);                                                                                         \
        v3 ^= v2;                                                                                                  \
        v0 += v3;                                                                                                  \
        v3 = ROTL(v3, 21);                                                                                         \
        v3 ^= v0;                                                                                                  \
        v2 += v1;                                                                                                  \
        v1 = ROTL(v1, 17);                                                                                         \
        v1 ^= v2;                                                                                                  \
        v2 = ROTL(v2, 32);                                                                                         \
    } while (0)

static inline uint64_t load_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static void siphash128(const uint8_t *in, size_t len, uint64_t k0, uint64_t k1, uint64_t *out0, uint64_t *out1) {
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0;
    uint64_t v1 = 0x646f72616e646f6dULL ^ k1 ^ 0xee;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0;
    uint64_t v3 = 0x7465646279746573ULL ^ k1;
    const uint8_t *end = in + (len - len % 8);
    for (; in != end; in += 8) {
        uint64_t m = load_le64(in);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = ((uint64_t)len) << 56;
    for (size_t i = 0; i < len % 8; i++) {
        b |= ((uint64_t)in[i]) << (8 * i);
    }
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xee;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    *out0 = v0 ^ v1 ^ v2 ^ v3;
    v1 ^= 0xdd;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    *out1 = v0 ^ v1 ^ v2 ^ v3;
}

static void store_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

/* -- the table ---------------------------------------------------------------------------------- */

/* The slot holding (h0, h1), or the empty slot where it would go. The table is never full. */
static Slot *find(KeyMap *self, uint64_t h0, uint64_t h1) {
    Py_ssize_t i = (Py_ssize_t)(h0 % (uint64_t)self->size);
    for (;;) {
        Slot *slot = &self->slots[i];
        if (slot->next == 0 || (slot->h0 == h0 && slot->h1 == h1)) {
            return slot;
        }
        i = i + 1 == self->size ? 0 : i + 1;
    }
}

static int KeyMap_init(KeyMap *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"slots", "seed", NULL};
    Py_ssize_t size;
    Py_buffer seed;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "ny*", kwlist, &size, &seed)) {
        return -1;
    }
    if (seed.len != 16) {
        PyBuffer_Release(&seed);
        PyErr_SetString(PyExc_ValueError, "seed must be 16 bytes");
        return -1;
    }
    self->k0 = load_le64((const uint8_t *)seed.buf);
    self->k1 = load_le64((const uint8_t *)seed.buf + 8);
    PyBuffer_Release(&seed);
    if (size < 2 || (size_t)size > SIZE_MAX / sizeof(Slot)) {
        PyErr_SetString(PyExc_ValueError, "slots must be at least 2 and fit in memory");
        return -1;
    }
    Slot *slots = PyMem_RawCalloc((size_t)size, sizeof(Slot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyMem_RawFree(self->slots);
    self->slots = slots;
    self->size = size;
    /* At least one slot stays empty, so a probe always ends. */
    self->max_entries = size * 9 / 10 < size - 1 ? size * 9 / 10 : size - 1;
    if (self->max_entries < 1) {
        self->max_entries = 1;
    }
    self->count = 0;
    return 0;
}

static void KeyMap_dealloc(KeyMap *self) {
    PyMem_RawFree(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *KeyMap_put(KeyMap *self, PyObject *args) {
    Py_buffer key;
    long long offset;
    if (!PyArg_ParseTuple(args, "y*L", &key, &offset)) {
        return NULL;
    }
    if (offset < 0 || offset == INT64_MAX) {
        PyBuffer_Release(&key);
        PyErr_SetString(PyExc_ValueError, "offset must be in 0..2**63-2");
        return NULL;
    }
    uint64_t h0, h1;
    siphash128((const uint8_t *)key.buf, (size_t)key.len, self->k0, self->k1, &h0, &h1);
    PyBuffer_Release(&key);
    Slot *slot = find(self, h0, h1);
    if (slot->next == 0) {
        if (self->count >= self->max_entries) {
            Py_RETURN_FALSE;
        }
        slot->h0 = h0;
        slot->h1 = h1;
        self->count++;
    }
    if (offset + 1 > slot->next) {
        slot->next = offset + 1;
    }
    Py_RETURN_TRUE;
}

static PyObject *KeyMap_get(KeyMap *self, PyObject *args) {
    Py_buffer key;
    if (!PyArg_ParseTuple(args, "y*", &key)) {
        return NULL;
    }
    uint64_t h0, h1;
    siphash128((const uint8_t *)key.buf, (size_t)key.len, self->k0, self->k1, &h0, &h1);
    PyBuffer_Release(&key);
    return PyLong_FromLongLong((long long)find(self, h0, h1)->next - 1);
}

static PyObject *KeyMap_digest(KeyMap *self, PyObject *args) {
    Py_buffer key;
    if (!PyArg_ParseTuple(args, "y*", &key)) {
        return NULL;
    }
    uint64_t h0, h1;
    siphash128((const uint8_t *)key.buf, (size_t)key.len, self->k0, self->k1, &h0, &h1);
    PyBuffer_Release(&key);
    uint8_t out[16];
    store_le64(out, h0);
    store_le64(out + 8, h1);
    return PyBytes_FromStringAndSize((const char *)out, 16);
}

static PyObject *KeyMap_clear(KeyMap *self, PyObject *Py_UNUSED(ignored)) {
    /* A fresh calloc rather than a memset: the pages the keys touched go back to the system. */
    Slot *slots = PyMem_RawCalloc((size_t)self->size, sizeof(Slot));
    if (slots == NULL) {
        return PyErr_NoMemory();
    }
    PyMem_RawFree(self->slots);
    self->slots = slots;
    self->count = 0;
    Py_RETURN_NONE;
}

static Py_ssize_t KeyMap_len(KeyMap *self) { return self->count; }

static PyObject *KeyMap_get_max_entries(KeyMap *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->max_entries);
}

static PyObject *KeyMap_get_nbytes(KeyMap *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSize_t((size_t)self->size * sizeof(Slot));
}

static PyMethodDef KeyMap_methods[] = {
    {"put", (PyCFunction)KeyMap_put, METH_VARARGS,
     "put(key, offset) -> bool: remember offset as key's latest (the larger one wins); False, and "
     "nothing stored, when the key is new and the map is full."},
    {"get", (PyCFunction)KeyMap_get, METH_VARARGS, "get(key) -> the key's latest offset, or -1."},
    {"digest", (PyCFunction)KeyMap_digest, METH_VARARGS, "digest(key) -> the 16-byte SipHash-2-4 of key (tests)."},
    {"clear", (PyCFunction)KeyMap_clear, METH_NOARGS, "Forget every key."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef KeyMap_getset[] = {
    {"max_entries", (getter)KeyMap_get_max_entries, NULL, "Keys the map takes before put() refuses.", NULL},
    {"nbytes", (getter)KeyMap_get_nbytes, NULL, "Bytes of the table.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods KeyMap_as_sequence = {.sq_length = (lenfunc)KeyMap_len};

static PyTypeObject KeyMapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lkstream.storage._keymap.KeyMap",
    .tp_basicsize = sizeof(KeyMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "KeyMap(slots, seed): a fixed-size map from record keys (hashed) to their latest offset.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)KeyMap_init,
    .tp_dealloc = (destructor)KeyMap_dealloc,
    .tp_methods = KeyMap_methods,
    .tp_getset = KeyMap_getset,
    .tp_as_sequence = &KeyMap_as_sequence,
};

static PyObject *siphash128_py(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer key, data;
    if (!PyArg_ParseTuple(args, "y*y*", &key, &data)) {
        return NULL;
    }
    if (key.len != 16) {
        PyBuffer_Release(&key);
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "key must be 16 bytes");
        return NULL;
    }
    uint64_t h0, h1;
    siphash128((const uint8_t *)data.buf, (size_t)data.len, load_le64((const uint8_t *)key.buf),
               load_le64((const uint8_t *)key.buf + 8), &h0, &h1);
    PyBuffer_Release(&key);
    PyBuffer_Release(&data);
    uint8_t out[16];
    store_le64(out, h0);
    store_le64(out + 8, h1);
    return PyBytes_FromStringAndSize((const char *)out, 16);
}

static PyMethodDef module_methods[] = {
    {"siphash128", siphash128_py, METH_VARARGS, "siphash128(key16, data) -> SipHash-2-4 128-bit tag (16 bytes)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_keymap", "The cleaner's bounded key map.", -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__keymap(void) {
    if (PyType_Ready(&KeyMapType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&KeyMapType);
    if (PyModule_AddObject(m, "KeyMap", (PyObject *)&KeyMapType) < 0) {
        Py_DECREF(&KeyMapType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
