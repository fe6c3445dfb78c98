/* A native library two Python threads share under the program's own lock, the pattern of a
 * ctypes or pybind11 extension: `fault_under_lock` (called through ctypes.CDLL, which releases
 * the GIL) takes the lock and makes a GEMM with NaN in A while holding it; `wait_for_lock`
 * (called through ctypes.PyDLL, which keeps the GIL) waits for that lock. Bare, the worker's
 * call returns, the lock is released and both finish; a guard that waits for the GIL at the
 * fault deadlocks them. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int locked;

int fault_under_lock(void) {
    cublasHandle_t h;
    if (cublasCreate(&h)) return -1;
    float host[4] = {NAN, 1, 1, 1};
    float *a;
    cudaMalloc((void **)&a, 64);
    cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice);
    pthread_mutex_lock(&lock);
    locked = 1;
    /* Long enough for the main thread to be waiting for the lock while holding the GIL. */
    usleep(300 * 1000);
    const float one = 1, zero = 0;
    int st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, a, 2, &zero, a + 8, 2);
    pthread_mutex_unlock(&lock);
    return st;
}

int is_locked(void) { return locked; }

int wait_for_lock(void) {
    pthread_mutex_lock(&lock);
    pthread_mutex_unlock(&lock);
    return 0;
}
