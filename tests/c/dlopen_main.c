/* Loads a cuBLAS-using library with dlopen(RTLD_LOCAL), as Python loads extension modules.
 * This program links no CUDA library itself, so libcublas and libcudart exist only in the
 * library's local scope, where dlsym(RTLD_NEXT) cannot see them. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("dlopen failed: %s\n", dlerror());
        return 4;
    }
    const char *entry = argc > 2 ? argv[2] : "scenario_lib_run";
    int (*run)(void) = (int (*)(void))dlsym(h, entry);
    int st = run ? run() : -2;
    printf("lib=%d\n", st);
    return st == 0 ? 0 : 1;
}
