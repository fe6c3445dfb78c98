/* Loads an extension (argv[1]) with RTLD_LOCAL, as Python loads extension modules, and runs
 * its GEMM. The program itself links no cuBLAS. With "reload" (and argv[3], the soname of the
 * extension's cuBLAS), the extension is closed, which unmaps its cuBLAS; the pages that held
 * cublasCreate_v2 and cublasSgemm_v2 are then taken (inaccessible), so the extension, loaded
 * again, gets its cuBLAS elsewhere and a pointer kept from the first load faults. The GEMM
 * runs a second time. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int (*gemm_fn)(float *);

static int load_and_run(const char *path, const char *reload_soname) {
    void *ext = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!ext) {
        printf("dlopen: %s\n", dlerror());
        return 1;
    }
    gemm_fn gemm = (gemm_fn)dlsym(ext, "ext_gemm");
    float c[4] = {0};
    int st = gemm(c);
    printf("gemm=%d C= %g %g %g %g\n", st, c[0], c[1], c[2], c[3]);
    void *old[2] = {NULL, NULL};
    if (reload_soname) {
        void *lib = dlopen(reload_soname, RTLD_NOW | RTLD_NOLOAD);
        if (lib) {
            old[0] = dlsym(lib, "cublasCreate_v2");
            old[1] = dlsym(lib, "cublasSgemm_v2");
            dlclose(lib);
        }
    }
    dlclose(ext);
    if (reload_soname) {
        void *still = dlopen(reload_soname, RTLD_NOW | RTLD_NOLOAD);
        printf("cublas unloaded=%d\n", still == NULL);
        if (still) dlclose(still);
        long page = sysconf(_SC_PAGESIZE);
        int taken = 0;
        for (int i = 0; i < 2; i++) {
            void *at = (void *)((uintptr_t)old[i] & ~(uintptr_t)(page - 1));
            taken += old[i] && mmap(at, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == at;
        }
        printf("old pages taken=%d\n", taken > 0);
    }
    return st != 0;
}

int main(int argc, char **argv) {
    int reload = argc > 2 && !strcmp(argv[2], "reload");
    const char *soname = argc > 3 ? argv[3] : "libcublas-5e3a1f0c.so.12";
    int bad = load_and_run(argv[1], reload ? soname : NULL);
    if (reload) bad |= load_and_run(argv[1], NULL);
    return bad;
}
