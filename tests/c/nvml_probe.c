/* Asks the NVML the loader finds (the stand-in's: shims/nvml.c) by its versioned names, as the
 * guard and the doctor do through dlopen.
 *   nvml_probe events [DEVICES [WAITS]]  registers Xid and double-bit ECC events on the first
 *                                DEVICES devices (default all), then prints each event waited
 *                                for (100 ms a wait) until WAITS waits in a row (default 2) time out
 *   nvml_probe ecc N             reads the volatile uncorrected ECC count N times
 *   nvml_probe init              prints what nvmlInit_v2 returned */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    void *device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} event_data;

#define NEED(name) dlsym_or_die(lib, #name)
static void *dlsym_or_die(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    if (!f) {
        printf("missing %s\n", name);
        exit(2);
    }
    return f;
}

int main(int argc, char **argv) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) {
        printf("no nvml: %s\n", dlerror());
        return 2;
    }
    int (*init)(void) = (int (*)(void))NEED(nvmlInit_v2);
    int rc = init();
    const char *mode = argc > 1 ? argv[1] : "init";
    if (!strcmp(mode, "init") || rc != 0) {
        printf("init %d\n", rc);
        return 0;
    }
    int (*count)(unsigned *) = (int (*)(unsigned *))NEED(nvmlDeviceGetCount_v2);
    int (*handle)(unsigned, void **) = (int (*)(unsigned, void **))NEED(nvmlDeviceGetHandleByIndex_v2);
    int (*index_of)(void *, unsigned *) = (int (*)(void *, unsigned *))NEED(nvmlDeviceGetIndex);
    unsigned n = 0;
    count(&n);
    if (!strcmp(mode, "events")) {
        int (*create)(void **) = (int (*)(void **))NEED(nvmlEventSetCreate);
        int (*reg)(void *, unsigned long long, void *) = (int (*)(void *, unsigned long long, void *))NEED(nvmlDeviceRegisterEvents);
        int (*wait)(void *, event_data *, unsigned) = (int (*)(void *, event_data *, unsigned))NEED(nvmlEventSetWait_v2);
        int (*release)(void *) = (int (*)(void *))NEED(nvmlEventSetFree);
        void *set = NULL;
        create(&set);
        unsigned devices = argc > 2 ? (unsigned)atoi(argv[2]) : n;
        for (unsigned i = 0; i < devices && i < n; i++) {
            void *d = NULL;
            handle(i, &d);
            reg(d, 0x8ULL | 0x2ULL, set);
        }
        int waits = argc > 3 ? atoi(argv[3]) : 2;
        for (int timeouts = 0; timeouts < waits;) {
            event_data e;
            int w = wait(set, &e, 100);
            if (w == 10) {
                printf("timeout\n");
                timeouts++;
                continue;
            }
            timeouts = 0;
            unsigned i = 99;
            index_of(e.device, &i);
            printf("event type %llu data %llu device %u\n", e.eventType, e.eventData, i);
        }
        release(set);
        return 0;
    }
    if (!strcmp(mode, "ecc")) {
        int (*ecc)(void *, int, int, unsigned long long *) = (int (*)(void *, int, int, unsigned long long *))NEED(nvmlDeviceGetTotalEccErrors);
        void *d = NULL;
        handle(0, &d);
        int times = argc > 2 ? atoi(argv[2]) : 1;
        for (int i = 0; i < times; i++) {
            unsigned long long v = 0;
            ecc(d, 1, 0, &v);
            printf("uncorrected %llu\n", v);
        }
        return 0;
    }
    printf("unknown mode %s\n", mode);
    return 2;
}
