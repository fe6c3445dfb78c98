/* A program with its own SIGSEGV handler, as JVMs, Julia and wasm runtimes have: it recovers
 * from faults on its own guard page (the handler makes the page accessible and returns) and
 * treats any other fault as fatal (default action, raise). It makes CUDA calls first, so the
 * guard installs its handler after the program's. Then it touches the guard page; with "crash"
 * it also dereferences a wild pointer. Prints what its handler saw. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static char *guard_page;
static size_t page;
static volatile int recovered, seen_code;

static void on_segv(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    char *addr = (char *)info->si_addr;
    if (addr >= guard_page && addr < guard_page + page && info->si_code == SEGV_ACCERR) {
        mprotect(guard_page, page, PROT_READ | PROT_WRITE);
        recovered++;
        seen_code = info->si_code;
        return;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

int main(int argc, char **argv) {
    page = (size_t)sysconf(_SC_PAGESIZE);
    guard_page = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);

    cublasHandle_t h;
    printf("cublasCreate=%d\n", (int)cublasCreate(&h));
    float *a;
    cudaMalloc((void **)&a, 64);
    const float one = 1, zero = 0;
    float nan_host[4] = {0.0f / 0.0f, 1, 1, 1};
    cudaMemcpy(a, nan_host, sizeof nan_host, cudaMemcpyHostToDevice);
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, a, 2, &zero, a + 8, 2); /* a fault */

    guard_page[0] = 42; /* recovered by the program's own handler */
    printf("recovered=%d si_code=%d value=%d\n", recovered, seen_code, guard_page[0]);
    fflush(stdout);
    if (argc > 1 && strcmp(argv[1], "crash") == 0) *(volatile int *)(uintptr_t)16 = 1;
    cublasDestroy(h);
    return 0;
}
