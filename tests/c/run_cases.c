/* Programs for tests/suite/hardening_run.rs: processes of one `cublasguard run` that write traces
 * under a fixed path, a squatter of the guard's claim names, and senders of queued signals.
 *
 *   fork_child_fault   a clean parent whose child, forked after CUDA started, faults
 *   fault_then_crash   a stored fault, then a segfault (a crash record)
 *   clean              clean calls only
 *   fork_first         a child forked before CUDA writes its trace after its parent's fault
 *   squat NAME...      binds each abstract socket NAME as user nobody (a leading '!': bound,
 *                      not listening), says "ready", and holds them until stdin closes
 *   sigqueue PID SIG   sends SIG to PID with sigqueue (si_code SI_QUEUE)
 *   tgkill PID SIG     sends SIG to PID's main thread with tgkill (si_code SI_TKILL)
 */
#define _GNU_SOURCE
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 4

static const float one = 1.0f, zero = 0.0f;

/* One GEMM on fresh operands; `nan`: a NaN in A (a stored fault). */
static int gemm_once(int nan) {
    cublasHandle_t handle;
    if (cublasCreate(&handle)) return 3;
    float a[N * N], b[N * N];
    for (int i = 0; i < N * N; i++) a[i] = b[i] = 1.0f;
    if (nan) a[0] = NAN;
    float *da, *db, *dc;
    cudaMalloc((void **)&da, sizeof a);
    cudaMalloc((void **)&db, sizeof b);
    cudaMalloc((void **)&dc, sizeof a);
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
    int st = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, da, N, db, N, &zero, dc, N);
    printf("sgemm status=%d\n", st);
    fflush(stdout);
    return 0;
}

static int squat(int argc, char **argv) {
    if (setgid(65534) || setuid(65534)) {
        perror("setuid");
        return 5;
    }
    for (int i = 2; i < argc; i++) {
        const char *name = argv[i];
        int listening = name[0] != '!';
        if (!listening) name++;
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un addr;
        memset(&addr, 0, sizeof addr);
        addr.sun_family = AF_UNIX;
        size_t len = strlen(name);
        memcpy(addr.sun_path + 1, name, len);
        if (bind(fd, (struct sockaddr *)&addr, (socklen_t)(sizeof(sa_family_t) + 1 + len)) || (listening && listen(fd, 8))) {
            perror(name);
            return 6;
        }
    }
    printf("ready\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *s = argc > 1 ? argv[1] : "clean";
    if (!strcmp(s, "squat")) return squat(argc, argv);
    if (!strcmp(s, "sigqueue") || !strcmp(s, "tgkill")) {
        if (argc < 4) return 2;
        pid_t pid = (pid_t)atoi(argv[2]);
        int sig = atoi(argv[3]);
        union sigval value = {.sival_int = 7};
        int r = !strcmp(s, "sigqueue") ? sigqueue(pid, sig, value) : (int)syscall(SYS_tgkill, pid, pid, sig);
        if (r) perror(s);
        return r ? 1 : 0;
    }
    if (!strcmp(s, "clean")) return gemm_once(0);
    if (!strcmp(s, "fault_then_crash")) {
        gemm_once(1);
        *(volatile int *)(uintptr_t)argc = 1;
        return 0;
    }
    if (!strcmp(s, "fork_child_fault")) {
        gemm_once(0);
        pid_t child = fork();
        if (child == 0) {
            cublasHandle_t handle;
            int cs = cublasCreate(&handle); /* the child's own fault: CUDA is unusable here */
            printf("child cublasCreate=%d\n", cs);
            fflush(stdout);
            exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        printf("child exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 0;
    }
    if (!strcmp(s, "fork_first")) {
        /* This process makes no CUDA call: it adopts the grandchild (a subreaper) and lets it
         * go on only once its parent, the one with the fault, is gone and reaped. */
        prctl(PR_SET_CHILD_SUBREAPER, 1);
        int go[2];
        if (pipe(go)) return 4;
        pid_t parent = fork();
        if (parent == 0) {
            close(go[1]);
            pid_t child = fork(); /* before any CUDA call */
            if (child == 0) {
                char c;
                while (read(go[0], &c, 1) > 0) {
                }
                return gemm_once(0);
            }
            return gemm_once(1);
        }
        close(go[0]);
        int status = 0;
        waitpid(parent, &status, 0);
        close(go[1]);
        while (wait(&status) > 0 || errno == EINTR) {
        }
        printf("fork_first done\n");
        return 0;
    }
    fprintf(stderr, "unknown case %s\n", s);
    return 2;
}
