/* Just enough of CPython's C API for the guard's look at a faulting thread's Python frames
 * (crates/preload/src/ffi/host/python.rs), loaded RTLD_GLOBAL by tests/c/loader_cases.c. With
 * fake_python_exit_in_ensure set, taking the GIL (PyEval_RestoreThread, or PyGILState_Ensure)
 * ends the calling thread, as CPython's does for a daemon thread once the interpreter is
 * finalizing. */
#include <pthread.h>
#include <stddef.h>

int fake_python_exit_in_ensure;
static int thread_state;

int Py_IsInitialized(void) { return 1; }
int Py_IsFinalizing(void) { return 0; }
void *PyGILState_GetThisThreadState(void) { return &thread_state; }
int PyGILState_Ensure(void) {
    if (fake_python_exit_in_ensure) pthread_exit((void *)9);
    return 0;
}
void PyGILState_Release(int state) { (void)state; }
static int interpreter, reader_state;
void *PyInterpreterState_Main(void) { return &interpreter; }
void *PyThreadState_New(void *interp) { (void)interp; return &reader_state; }
void PyEval_RestoreThread(void *tstate) {
    (void)tstate;
    if (fake_python_exit_in_ensure) pthread_exit((void *)9);
}
void PyThreadState_Clear(void *tstate) { (void)tstate; }
void PyThreadState_DeleteCurrent(void) {}
void *PyThreadState_GetFrame(void *tstate) { (void)tstate; return NULL; }
void *PyFrame_GetBack(void *f) { (void)f; return NULL; }
void *PyFrame_GetCode(void *f) { (void)f; return NULL; }
int PyFrame_GetLineNumber(void *f) { (void)f; return 0; }
void *PyObject_GetAttrString(void *o, const char *name) { (void)o, (void)name; return NULL; }
const char *PyUnicode_AsUTF8(void *o) { (void)o; return NULL; }
void Py_DecRef(void *o) { (void)o; }
void *PyErr_Occurred(void) { return NULL; }
void PyErr_Clear(void) {}
const char *Py_GetVersion(void) { return "3.12.0 (a stand-in)"; }
