/* Call counting for the stand-in's libraries: each counted entry point calls count_call(__func__),
 * and at exit the counts go to the file named by COUNT_CALLS_VARIABLE ("name count" lines).
 * Include once per translation unit, after defining COUNT_CALLS_VARIABLE. */
#ifndef CUDASHIM_COUNTING_H
#define CUDASHIM_COUNTING_H
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_COUNTED 64
static struct { const char *name; unsigned long count; } counted[MAX_COUNTED];
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *count_path;

static void write_counts(void) {
    FILE *f = fopen(count_path, "w");
    if (!f) return;
    for (int i = 0; i < MAX_COUNTED && counted[i].name; i++) fprintf(f, "%s %lu\n", counted[i].name, counted[i].count);
    fclose(f);
}

static void count_call(const char *name) {
    if (!count_path) return;
    pthread_mutex_lock(&count_lock);
    for (int i = 0; i < MAX_COUNTED; i++) {
        if (!counted[i].name) counted[i].name = name;
        if (counted[i].name == name) {
            counted[i].count++;
            break;
        }
    }
    pthread_mutex_unlock(&count_lock);
}

/* COUNT_ALWAYS_LISTED (optional): names whose lines the file has even when they count 0. */
__attribute__((constructor)) static void start_counting(void) {
    const char *path = getenv(COUNT_CALLS_VARIABLE);
    if (path && *path) {
        count_path = path;
        atexit(write_counts);
#ifdef COUNT_ALWAYS_LISTED
        const char *listed[] = {COUNT_ALWAYS_LISTED};
        for (size_t i = 0; i < sizeof listed / sizeof *listed; i++) {
            count_call(listed[i]);
            counted[i].count = 0;
        }
#endif
    }
}
#endif
