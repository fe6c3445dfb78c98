/* Issue 46's programs (hardening, round three), one mode each:
 *   round_three sigwait     a NaN GEMM (the guard's verdict thread starts, and NVML's where
 *                           NVML is there), then a server's shutdown: SIGTERM blocked, sent to
 *                           the process with kill() and taken with sigwait(). Prints the guard's
 *                           threads it saw ("thread NAME") and "got 15"; exits 0.
 *   round_three nans N      N GEMMs that read a NaN, then a synchronisation
 *   round_three order N     two threads, each with its own handle and stream, each N GEMMs
 *                           reading the same NaN input; then a synchronisation
 *   round_three fork N HOW  N GEMMs that read a NaN, then fork(): the child exits at once
 *                           (HOW exit: exit(0); _exit: _exit(0)), makes a GEMM first (gemm), or
 *                           outlives the parent by 300 ms (outlive); the parent waits for it
 *                           (but for outlive) and exits */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static cublasHandle_t h;
static float *a, *b, *c;

static void setup(void) {
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) exit(3);
    float host[4] = {0.0f / 0.0f, 2, 3, 4};
    cudaMalloc((void **)&a, sizeof host);
    cudaMalloc((void **)&b, sizeof host);
    cudaMalloc((void **)&c, 8 * sizeof host);
    cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice);
    host[0] = 1;
    cudaMemcpy(b, host, sizeof host, cudaMemcpyHostToDevice);
}

static int gemm(float *out) {
    const float one = 1, zero = 0;
    return cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, b, 2, &zero, out, 2);
}

/* Whether a thread named `name` is in this process now. */
static int has_thread(const char *name) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[300], comm[64] = {0};
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(comm, sizeof comm, f)) {
            comm[strcspn(comm, "\n")] = 0;
            found = !strcmp(comm, name);
        }
        fclose(f);
    }
    closedir(d);
    return found;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int rounds;

/* One of the "order" threads: its own handle and stream, the shared NaN input. */
static void *orderly(void *arg) {
    long k = (long)arg;
    cublasHandle_t own;
    cudaStream_t stream;
    if (cublasCreate(&own) != CUBLAS_STATUS_SUCCESS) return NULL;
    cudaStreamCreate(&stream);
    cublasSetStream(own, stream);
    const float one = 1, zero = 0;
    for (int i = 0; i < rounds; i++)
        cublasSgemm(own, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, b, 2, &zero, c + 4 * (k + 1), 2);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int n = argc > 2 ? atoi(argv[2]) : 1;
    setup();
    if (!strcmp(argv[1], "sigwait")) {
        gemm(c);
        cudaDeviceSynchronize();
        /* Give the guard's threads up to 2 s to be there (the test asks which were). */
        const char *names[] = {"cublasguard-ver", "cublasguard-nvm"}; /* comm: 15 characters */
        for (int i = 0; i < 200 && !(has_thread(names[0]) && has_thread(names[1])); i++) sleep_ms(10);
        for (int i = 0; i < 2; i++)
            if (has_thread(names[i])) printf("thread %s\n", names[i]);
        fflush(stdout);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        kill(getpid(), SIGTERM);
        int sig = 0;
        sigwait(&set, &sig);
        printf("got %d\n", sig);
        return 0;
    }
    if (!strcmp(argv[1], "nans")) {
        for (int i = 0; i < n; i++) gemm(c);
        return cudaDeviceSynchronize();
    }
    if (!strcmp(argv[1], "order")) {
        rounds = n;
        pthread_t t[2];
        for (long k = 0; k < 2; k++) pthread_create(&t[k], NULL, orderly, (void *)k);
        for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
        return cudaDeviceSynchronize();
    }
    if (!strcmp(argv[1], "fork")) {
        for (int i = 0; i < n; i++) gemm(c);
        fflush(stdout);
        const char *how = argc > 3 ? argv[3] : "exit";
        pid_t child = fork();
        if (child == 0) {
            if (!strcmp(how, "_exit")) _exit(0);
            if (!strcmp(how, "gemm")) gemm(c);
            if (!strcmp(how, "outlive")) sleep_ms(300);
            exit(0);
        }
        int status = 0;
        if (!strcmp(how, "outlive")) return 0;
        if (child > 0) waitpid(child, &status, 0);
        printf("child=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 0;
    }
    return 2;
}
