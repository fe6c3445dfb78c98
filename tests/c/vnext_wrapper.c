/* A dlsym interposer as some profilers write one, preloaded before the guard: it finds "the
 * next dlsym" with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"), a versioned lookup, which never
 * matches the guard's unversioned dlsym. It counts the lookups it passes on. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

static void *(*next_dlsym)(void *, const char *);
static unsigned long calls;

void *dlsym(void *handle, const char *name) {
    if (!next_dlsym) next_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    calls++;
    return next_dlsym ? next_dlsym(handle, name) : NULL;
}

__attribute__((destructor)) static void report(void) { fprintf(stderr, "vnext wrapper dlsym calls>0: %d\n", calls > 0); }
