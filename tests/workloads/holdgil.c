/*
 * Ground truth for GIL-wait accuracy: holdgil.hold(ms) keeps the GIL for
 * exactly `ms` milliseconds (busy-waiting on CLOCK_MONOTONIC, never releasing
 * it) and returns the nanoseconds it really held it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static PyObject *hold(PyObject *self, PyObject *args)
{
	double ms;
	if (!PyArg_ParseTuple(args, "d", &ms))
		return NULL;
	long long start = now_ns(), end = start + (long long)(ms * 1e6), t;
	while ((t = now_ns()) < end)
		;
	return PyLong_FromLongLong(t - start);
}

static PyMethodDef methods[] = {
	{"hold", hold, METH_VARARGS, "Hold the GIL for ms milliseconds; returns ns held."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "holdgil", NULL, -1, methods};

PyMODINIT_FUNC PyInit_holdgil(void)
{
	return PyModule_Create(&module);
}
