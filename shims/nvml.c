/* Stand-in libnvidia-ml.so.1: NVML as far as `cublasguard doctor` (and the guard's GPU health
 * readings) ask it, for the stand-in's devices. Its devices' names say what they are
 * ("cudashim stand-in NVML device N"), and cudashim_nvml_is_stand_in is exported by no NVIDIA
 * library. Exported under NVML's versioned names (nvmlInit_v2, nvmlDeviceGetCount_v2,
 * nvmlDeviceGetHandleByIndex_v2, nvmlEventSetWait_v2, ...), the ones nvml.h's macros call.
 * Every reading is healthy unless injected:
 *   CUDASHIM_DEVICE_COUNT=N          how many devices (default 1, as the stand-in driver)
 *   CUDASHIM_NVML_HANG=1             nvmlInit_v2 sleeps for an hour (a driver whose NVML hangs);
 *                                    =S: S seconds
 *   CUDASHIM_NVML_INIT_ERROR=N       nvmlInit_v2 returns N (18: driver/library version mismatch)
 *   CUDASHIM_NVML_XID=LIST           Xid events, delivered in order by nvmlEventSetWait_v2 to a
 *                                    set registered for nvmlEventTypeXidCriticalError: a comma
 *                                    list of Xids ("79", "13,79"), each optionally "D:X" for
 *                                    device D (default 0); "dbe" (or "D:dbe") is a double-bit
 *                                    ECC event (nvmlEventTypeDoubleBitEccError) instead
 *   CUDASHIM_NVML_XID_DELAY_MS=MS    the events arrive MS ms after the set's first registration
 *   CUDASHIM_NVML_ECC_CORRECTED=V[,A]    single-bit (corrected) ECC counts: volatile V and
 *                                        aggregate A (default A = V; both 0)
 *   CUDASHIM_NVML_ECC_UNCORRECTED=V[,A]  double-bit (uncorrected) ECC counts, likewise
 *   CUDASHIM_NVML_ECC_GROW_AFTER=N       after N calls of nvmlDeviceGetTotalEccErrors (any
 *                                        device, any counter), every count reads higher by:
 *   CUDASHIM_NVML_ECC_GROW_CORRECTED=C   C corrected errors (default 0), and
 *   CUDASHIM_NVML_ECC_GROW_UNCORRECTED=U U uncorrected ones (default 1)
 *   CUDASHIM_NVML_REMAPPED=C,U,P,F   nvmlDeviceGetRemappedRows: rows remapped for corrected (C)
 *                                    and uncorrected (U) errors, a remapping pending (P, 0/1),
 *                                    a remapping failed (F, 0/1); default 0,0,0,0
 *   CUDASHIM_NVML_RETIRED=S,D        pages retired for multiple single-bit (S) and double-bit
 *                                    (D) errors (default 0,0)
 *   CUDASHIM_NVML_RETIRED_PENDING=1  a page retirement waits for the next reset
 *   CUDASHIM_NVML_TEMP=C             GPU temperature in degrees C (default 45)
 *   CUDASHIM_NVML_TEMP_SLOWDOWN=C    the slowdown threshold (default 90)
 *   CUDASHIM_NVML_TEMP_SHUTDOWN=C    the shutdown threshold (default 95)
 *   CUDASHIM_NVML_CLOCK_REASONS=BITS clock event (throttle) reasons, decimal or 0x hex (default 0;
 *                                    SwPowerCap 0x4, HwSlowdown 0x8, SwThermal 0x20, HwThermal
 *                                    0x40, HwPowerBrake 0x80)
 *   CUDASHIM_NVML_PCIE_REPLAYS=N     the PCIe replay counter (default 0)
 *   CUDASHIM_NVML_PERSISTENCE=0|1    persistence mode (default 1)
 *   CUDASHIM_NVML_ECC_MODE=0|1       ECC mode, current and pending (default 1)
 * Outside nvmlInit_v2 .. nvmlShutdown every device call returns NVML_ERROR_UNINITIALIZED. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_DEVICES 16
#define MAX_EVENTS 64
#define EVENT_DOUBLE_BIT_ECC 0x2ULL
#define EVENT_XID 0x8ULL

struct nvmlDevice_st {
    unsigned index;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

struct nvmlEventSet_st {
    unsigned long long registered[MAX_DEVICES]; /* event types, per device */
    int next;                                   /* the next injected event to consider */
    struct timespec first_registration;
    int has_registration;
};
typedef struct nvmlEventSet_st *nvmlEventSet_t;

static struct nvmlDevice_st devices[MAX_DEVICES];
static int initialised; /* nvmlInit_v2 calls not yet shut down */
static unsigned long ecc_queries;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* A forked child gets the lock anew: a parent thread may have held it. */
static void reset_lock(void) { pthread_mutex_init(&lock, NULL); }
__attribute__((constructor)) static void install_fork_handler(void) { pthread_atfork(NULL, NULL, reset_lock); }

/* Exported by no NVIDIA library: how `cublasguard doctor` knows the stand-in. */
int cudashim_nvml_is_stand_in(void) { return 1; }

static long long env_ll(const char *name, long long fallback) {
    const char *v = getenv(name);
    return (v && *v) ? strtoll(v, NULL, 0) : fallback;
}

/* Up to `n` comma-separated numbers of `name` into `out` (unset ones keep their value); how many were given. */
static int env_list(const char *name, unsigned long long *out, int n) {
    const char *v = getenv(name);
    int given = 0;
    while (v && *v && given < n) {
        char *end;
        unsigned long long x = strtoull(v, &end, 0);
        if (end == v) break;
        out[given++] = x;
        v = *end == ',' ? end + 1 : end;
        if (*end != ',') break;
    }
    return given;
}

static int device_count(void) {
    long long n = env_ll("CUDASHIM_DEVICE_COUNT", 1);
    return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : (int)n;
}

static int is_initialised(void) {
    pthread_mutex_lock(&lock);
    int on = initialised > 0;
    pthread_mutex_unlock(&lock);
    return on;
}

/* The device behind a handle, or NULL (not initialised, or not a handle of this library). */
static struct nvmlDevice_st *device_of(nvmlDevice_t d) {
    if (!is_initialised() || !d || d < devices || d >= devices + device_count()) return NULL;
    return d;
}

#define DEVICE_OR_RETURN(d)                                                      \
    do {                                                                         \
        if (!is_initialised()) return NVML_ERROR_UNINITIALIZED;                  \
        if (!device_of(d)) return NVML_ERROR_INVALID_ARGUMENT;                   \
    } while (0)

nvmlReturn_t nvmlInit_v2(void) {
    long long hang = env_ll("CUDASHIM_NVML_HANG", 0);
    if (hang > 0) {
        unsigned left = hang == 1 ? 3600 : (unsigned)hang;
        while (left > 0) left = sleep(left);
    }
    long long error = env_ll("CUDASHIM_NVML_INIT_ERROR", 0);
    if (error) return (nvmlReturn_t)error;
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < MAX_DEVICES; i++) devices[i].index = i;
    initialised++;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return nvmlInit_v2();
}

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    int was = initialised;
    if (initialised > 0) initialised--;
    pthread_mutex_unlock(&lock);
    return was > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!is_initialised()) return NVML_ERROR_UNINITIALIZED;
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    const char *text = "cudashim stand-in";
    if (length < strlen(text) + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(version, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    if (!is_initialised()) return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount) return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned)device_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!is_initialised()) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned)device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEVICE_OR_RETURN(device);
    if (!name) return NVML_ERROR_INVALID_ARGUMENT;
    char text[64];
    int n = snprintf(text, sizeof text, "cudashim stand-in NVML device %u", device->index);
    if (length < (unsigned)n + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(name, text, (size_t)n + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    DEVICE_OR_RETURN(device);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

/* sensorType 0: NVML_TEMPERATURE_GPU, the only sensor. */
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensorType, unsigned int *temp) {
    DEVICE_OR_RETURN(device);
    if (!temp || sensorType != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = (unsigned)env_ll("CUDASHIM_NVML_TEMP", 45);
    return NVML_SUCCESS;
}

/* thresholdType 0: shutdown, 1: slowdown (nvmlTemperatureThresholds_t); others not supported. */
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, int thresholdType, unsigned int *temp) {
    DEVICE_OR_RETURN(device);
    if (!temp) return NVML_ERROR_INVALID_ARGUMENT;
    switch (thresholdType) {
    case 0: *temp = (unsigned)env_ll("CUDASHIM_NVML_TEMP_SHUTDOWN", 95); return NVML_SUCCESS;
    case 1: *temp = (unsigned)env_ll("CUDASHIM_NVML_TEMP_SLOWDOWN", 90); return NVML_SUCCESS;
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
}

/* errorType 0: corrected, 1: uncorrected; counterType 0: volatile, 1: aggregate. */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType, unsigned long long *eccCounts) {
    DEVICE_OR_RETURN(device);
    if (!eccCounts || errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (!env_ll("CUDASHIM_NVML_ECC_MODE", 1)) return NVML_ERROR_NOT_SUPPORTED;
    unsigned long long counts[2] = {0, 0};
    int given = env_list(errorType == 0 ? "CUDASHIM_NVML_ECC_CORRECTED" : "CUDASHIM_NVML_ECC_UNCORRECTED", counts, 2);
    if (given == 1) counts[1] = counts[0];
    pthread_mutex_lock(&lock);
    unsigned long query = ++ecc_queries;
    pthread_mutex_unlock(&lock);
    long long after = env_ll("CUDASHIM_NVML_ECC_GROW_AFTER", -1);
    unsigned long long count = counts[counterType];
    if (after >= 0 && query > (unsigned long long)after)
        count += (unsigned long long)(errorType == 0 ? env_ll("CUDASHIM_NVML_ECC_GROW_CORRECTED", 0) : env_ll("CUDASHIM_NVML_ECC_GROW_UNCORRECTED", 1));
    *eccCounts = count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows, unsigned int *isPending,
                                       unsigned int *failureOccurred) {
    DEVICE_OR_RETURN(device);
    if (!corrRows || !uncRows || !isPending || !failureOccurred) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long v[4] = {0, 0, 0, 0};
    env_list("CUDASHIM_NVML_REMAPPED", v, 4);
    *corrRows = (unsigned)v[0];
    *uncRows = (unsigned)v[1];
    *isPending = v[2] != 0;
    *failureOccurred = v[3] != 0;
    return NVML_SUCCESS;
}

/* cause 0: multiple single-bit errors, 1: a double-bit error. Addresses and times are made up. */
static nvmlReturn_t retired_pages(int cause, unsigned int *pageCount, unsigned long long *addresses, unsigned long long *timestamps) {
    if (!pageCount || cause < 0 || cause > 1) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long v[2] = {0, 0};
    env_list("CUDASHIM_NVML_RETIRED", v, 2);
    unsigned have = (unsigned)v[cause];
    unsigned room = *pageCount;
    *pageCount = have;
    if (room < have) return NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned i = 0; i < have; i++) {
        if (addresses) addresses[i] = 0x100000ULL * (i + 1);
        if (timestamps) timestamps[i] = 1700000000000000ULL + i;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int *pageCount, unsigned long long *addresses) {
    DEVICE_OR_RETURN(device);
    return retired_pages(cause, pageCount, addresses, NULL);
}

nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, int cause, unsigned int *pageCount, unsigned long long *addresses,
                                          unsigned long long *timestamps) {
    DEVICE_OR_RETURN(device);
    return retired_pages(cause, pageCount, addresses, timestamps);
}

/* isPending: nvmlEnableState_t (0 disabled, 1 enabled). */
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *isPending) {
    DEVICE_OR_RETURN(device);
    if (!isPending) return NVML_ERROR_INVALID_ARGUMENT;
    *isPending = env_ll("CUDASHIM_NVML_RETIRED_PENDING", 0) != 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *clocksEventReasons) {
    DEVICE_OR_RETURN(device);
    if (!clocksEventReasons) return NVML_ERROR_INVALID_ARGUMENT;
    *clocksEventReasons = (unsigned long long)env_ll("CUDASHIM_NVML_CLOCK_REASONS", 0);
    return NVML_SUCCESS;
}

/* The name before NVML 12.2 (r535), kept by newer drivers. */
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *clocksThrottleReasons) {
    return nvmlDeviceGetCurrentClocksEventReasons(device, clocksThrottleReasons);
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value) {
    DEVICE_OR_RETURN(device);
    if (!value) return NVML_ERROR_INVALID_ARGUMENT;
    *value = (unsigned)env_ll("CUDASHIM_NVML_PCIE_REPLAYS", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int *mode) {
    DEVICE_OR_RETURN(device);
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = env_ll("CUDASHIM_NVML_PERSISTENCE", 1) != 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, int *current, int *pending) {
    DEVICE_OR_RETURN(device);
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = env_ll("CUDASHIM_NVML_ECC_MODE", 1) != 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
    DEVICE_OR_RETURN(device);
    if (!eventTypes) return NVML_ERROR_INVALID_ARGUMENT;
    *eventTypes = EVENT_DOUBLE_BIT_ECC | EVENT_XID;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (!is_initialised()) return NVML_ERROR_UNINITIALIZED;
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof **set);
    return *set ? NVML_SUCCESS : NVML_ERROR_MEMORY;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
    DEVICE_OR_RETURN(device);
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~(EVENT_DOUBLE_BIT_ECC | EVENT_XID)) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&lock);
    set->registered[device->index] |= eventTypes;
    if (!set->has_registration) {
        clock_gettime(CLOCK_MONOTONIC, &set->first_registration);
        set->has_registration = 1;
    }
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

/* The `index`th injected event: its device and type (0 past the end of the list). */
static unsigned long long injected_event(int index, unsigned *dev, unsigned long long *xid) {
    const char *v = getenv("CUDASHIM_NVML_XID");
    for (int i = 0; v && *v; i++) {
        const char *end = strchr(v, ',');
        size_t len = end ? (size_t)(end - v) : strlen(v);
        char item[32];
        if (len >= sizeof item) len = sizeof item - 1;
        memcpy(item, v, len);
        item[len] = 0;
        if (i == index) {
            char *text = item, *colon = strchr(item, ':');
            *dev = 0;
            if (colon) {
                *colon = 0;
                *dev = (unsigned)strtoul(item, NULL, 10);
                text = colon + 1;
            }
            if (strcmp(text, "dbe") == 0) {
                *xid = 0;
                return EVENT_DOUBLE_BIT_ECC;
            }
            *xid = strtoull(text, NULL, 10);
            return EVENT_XID;
        }
        v = end ? end + 1 : v + len;
    }
    return 0;
}

static long ms_since(const struct timespec *t) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - t->tv_sec) * 1000L + (now.tv_nsec - t->tv_nsec) / 1000000L;
}

/* The next injected event this set registered for, else NVML_ERROR_TIMEOUT after the timeout. */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    if (!is_initialised()) return NVML_ERROR_UNINITIALIZED;
    if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
    long delay = (long)env_ll("CUDASHIM_NVML_XID_DELAY_MS", 0);
    long waited = 0;
    for (;;) {
        pthread_mutex_lock(&lock);
        int ready = set->has_registration && ms_since(&set->first_registration) >= delay;
        while (ready) {
            unsigned dev = 0;
            unsigned long long xid = 0;
            unsigned long long type = injected_event(set->next, &dev, &xid);
            if (!type) break;
            set->next++;
            if (dev < MAX_DEVICES && (set->registered[dev] & type) && (int)dev < device_count()) {
                pthread_mutex_unlock(&lock);
                memset(data, 0, sizeof *data);
                data->device = &devices[dev];
                data->eventType = type;
                data->eventData = xid;
                return NVML_SUCCESS;
            }
        }
        pthread_mutex_unlock(&lock);
        if (waited >= (long)timeoutms) return NVML_ERROR_TIMEOUT;
        long step = (long)timeoutms - waited < 10 ? (long)timeoutms - waited : 10;
        usleep((useconds_t)step * 1000);
        waited += step;
    }
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!is_initialised()) return NVML_ERROR_UNINITIALIZED;
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    free(set);
    return NVML_SUCCESS;
}
