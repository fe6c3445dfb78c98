/* A malloc interposer of the common kind, preloaded beside the guard: its first malloc looks up
 * the real one with dlsym(RTLD_NEXT), which goes through the guard's dlsym; dlsym's own
 * allocations meanwhile come from a static arena. Says how many calls it wrapped at exit. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static void *(*real_malloc)(size_t);
static void (*real_free)(void *);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static char arena[1 << 16];
static size_t used;
static int resolving;
static unsigned long calls;

static void *from_arena(size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (used + n > sizeof arena) return NULL;
    void *p = arena + used;
    used += n;
    return p;
}

static int in_arena(void *p) { return (char *)p >= arena && (char *)p < arena + sizeof arena; }

static void resolve(void) {
    if (real_malloc || resolving) return;
    resolving = 1;
    real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    resolving = 0;
}

void *malloc(size_t n) {
    resolve();
    if (!real_malloc) return from_arena(n);
    calls++;
    return real_malloc(n);
}

void *calloc(size_t a, size_t b) {
    resolve();
    if (!real_calloc) return from_arena(a * b); /* the arena is zeroed */
    calls++;
    return real_calloc(a, b);
}

void *realloc(void *p, size_t n) {
    resolve();
    if (in_arena(p) || !real_realloc) {
        void *q = real_malloc ? real_malloc(n) : from_arena(n);
        if (q && p) memcpy(q, p, n);
        return q;
    }
    calls++;
    return real_realloc(p, n);
}

void free(void *p) {
    if (!p || in_arena(p)) return;
    resolve();
    if (real_free) real_free(p);
}

__attribute__((destructor)) static void report(void) { fprintf(stderr, "malloc wrapper calls>0: %d\n", calls > 0); }
