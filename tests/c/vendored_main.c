/* Loads an extension (argv[1]) with RTLD_LOCAL, as Python loads extension modules, and runs
 * its GEMM. The program itself links no cuBLAS. With "reload" (and argv[3], the soname of the
 * extension's cuBLAS), the extension is closed, which unmaps its cuBLAS; the pages that held
 * it (read from /proc/self/maps: a dlsym would return the guard's copy, not cuBLAS's address)
 * are then taken (inaccessible), so the extension, loaded again, gets its cuBLAS elsewhere and a
 * pointer kept from the first load faults. The GEMM runs a second time. */
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
    uintptr_t old[16][2];
    int ranges = 0;
    if (reload_soname) {
        FILE *maps = fopen("/proc/self/maps", "r");
        char line[512];
        while (maps && ranges < 16 && fgets(line, sizeof line, maps)) {
            unsigned long start, end;
            if (strstr(line, reload_soname) && sscanf(line, "%lx-%lx", &start, &end) == 2) {
                old[ranges][0] = start;
                old[ranges][1] = end;
                ranges++;
            }
        }
        if (maps) fclose(maps);
    }
    dlclose(ext);
    if (reload_soname) {
        void *still = dlopen(reload_soname, RTLD_NOW | RTLD_NOLOAD);
        printf("cublas unloaded=%d\n", still == NULL);
        if (still) dlclose(still);
        int taken = 0;
        for (int i = 0; i < ranges; i++) {
            void *at = (void *)old[i][0];
            taken += mmap(at, old[i][1] - old[i][0], PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == at;
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
