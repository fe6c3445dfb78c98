/* A program that has used up its file descriptors (a leak, or a low `ulimit -n`) when it first
 * touches CUDA: the runtime cannot even open libcuda.so.1. It then closes what it opened, so
 * that the trace can be written at exit, and exits 0. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

int main(void) {
    struct rlimit limit = {64, 64};
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return 2;
    int first = -1, last = -1, fd;
    while ((fd = open("/dev/null", O_RDONLY)) >= 0) {
        if (first < 0) first = fd;
        last = fd;
    }
    void *p = NULL;
    int status = cudaMalloc(&p, 64);
    for (fd = first; fd >= 0 && fd <= last; fd++) close(fd);
    printf("cudaMalloc=%d\n", status);
    return 0;
}
