/* Copy with streaming (non-temporal) stores: the destination is written straight to
 * memory, neither read first nor pulled into the caches. Why compiled code: no library
 * offers such a copy to Python, and glibc's memcpy picks streaming stores only above a
 * size fixed at process start (docs/ring.md "Streaming stores"). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define STREAMING 1
#else
#define STREAMING 0
#endif

static void stream_copy(char *dst, const char *src, size_t n)
{
#if STREAMING
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15, body, i;

    if (head > n)
        head = n;
    memcpy(dst, src, head);  /* up to dst's first 16-byte boundary: the stores need it */
    dst += head;
    src += head;
    n -= head;
    body = n & ~(size_t)63;
    for (i = 0; i < body; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    memcpy(dst + body, src + body, n - body);
    _mm_sfence();  /* the streamed stores are weakly ordered: visible before we return */
#else
    memcpy(dst, src, n);
#endif
}

static PyObject *copy(PyObject *self, PyObject *args)
{
    PyObject *dst_obj, *src_obj;
    Py_buffer dst, src;
    char *d, *s;
    size_t n;

    (void)self;
    if (!PyArg_ParseTuple(args, "OO:copy", &dst_obj, &src_obj))
        return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&dst);
        return NULL;
    }
    if (dst.len != src.len) {
        PyErr_Format(PyExc_ValueError, "copy: destination has %zd bytes, source %zd",
                     dst.len, src.len);
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    d = (char *)dst.buf;
    s = (char *)src.buf;
    n = (size_t)dst.len;
    Py_BEGIN_ALLOW_THREADS
    if ((uintptr_t)d + n <= (uintptr_t)s || (uintptr_t)s + n <= (uintptr_t)d)
        stream_copy(d, s, n);
    else
        memmove(d, s, n);  /* overlapping: no streaming */
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"copy", copy, METH_VARARGS,
     "copy(dst, src): src's bytes into dst (both C-contiguous, the same size) with "
     "streaming stores."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_stream", "Copies with streaming stores.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__stream(void)
{
    PyObject *m = PyModule_Create(&module);

    if (m != NULL && PyModule_AddIntConstant(m, "STREAMING", STREAMING) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
