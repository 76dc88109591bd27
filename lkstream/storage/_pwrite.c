/*
 * lkstream.storage._pwrite: a positional write that keeps the GIL (issue 14, row 3).
 *
 * pwrite_holding_gil(fd, data, offset) -> bytes written
 *
 * os.pwrite lets go of the GIL for the system call. An append calls it while holding its
 * partition log's lock, so every append invited the group-commit thread to run exactly while
 * that lock was held: the committer then queued on the lock, woke up holding it but not the
 * GIL, and the event loop's next append waited for both (docs/benchmarks.md, "Row 3 after
 * phase 2"). Copying a small batch into the page cache takes microseconds, so keeping the GIL
 * costs the other threads nothing they would notice, and a thread that runs Python can then
 * never find the log lock held by an append. Callers use it for small writes only: a large
 * write, or one the kernel stalls (a journal commit), holds every other Python thread up.
 *
 * Same contract as os.pwrite: returns the count written (maybe short), retries on EINTR after
 * running signal handlers (PEP 475), raises OSError with errno set.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <unistd.h>

static PyObject *pwrite_holding_gil(PyObject *Py_UNUSED(self), PyObject *args) {
    int fd;
    Py_buffer data;
    long long offset;
    if (!PyArg_ParseTuple(args, "iy*L", &fd, &data, &offset)) {
        return NULL;
    }
    ssize_t written;
    for (;;) {
        written = pwrite(fd, data.buf, (size_t)data.len, (off_t)offset);
        if (written >= 0 || errno != EINTR) {
            break;
        }
        if (PyErr_CheckSignals() < 0) {
            PyBuffer_Release(&data);
            return NULL;
        }
    }
    PyBuffer_Release(&data);
    if (written < 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSsize_t(written);
}

static PyMethodDef methods[] = {
    {"pwrite_holding_gil", pwrite_holding_gil, METH_VARARGS,
     "pwrite_holding_gil(fd, data, offset) -> int: os.pwrite without releasing the GIL (small writes only)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pwrite", "A positional write that keeps the GIL.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__pwrite(void) { return PyModule_Create(&module); }
