/* The stand-in GPU, linked into libcuda.so.1: device work (GEMMs, scan kernels, memsets,
 * asynchronous copies, stream memory operations, event records) is queued per stream and run
 * by one worker thread after the launching call has returned, as a GPU runs it.
 *
 * Ordering model. Every item carries its stream's identity and class. One worker runs one item
 * at a time: the oldest item that may start, where an item may start when no earlier item
 * (in submission order) is still queued on its own stream; an item on the legacy default stream
 * also waits for every earlier item on a blocking stream, and an item on a blocking stream for
 * every earlier legacy-stream item (CUDA's "legacy stream" rule); a non-blocking stream
 * (cudaStreamNonBlocking, CU_STREAM_NON_BLOCKING) orders only with itself. The per-thread
 * default stream (cudaStreamPerThread, the _ptsz entry points) is a blocking stream, as
 * NVIDIA's stream-sync-behavior page says ("not a non-blocking stream and will synchronize
 * with the legacy default stream"). Waits on events and on memory values (cuStreamWaitValue*)
 * hold their item, and only that stream, until they are met. One worker means no two items
 * ever overlap: stricter than a GPU, never looser, except that an item blocked on a wait does
 * not hold other streams back.
 *
 * Faults. An item that returns an error breaks the context when it runs: the error is sticky
 * from then on (every runtime and driver call returns it) and every item still queued, on any
 * stream, is dropped without running. Synchronisations wait for their work to run or be
 * dropped, then report the sticky error.
 *
 * Host-blocking calls. Every call that blocks the calling thread until device work has run
 * counts one "host_blocking" (and one under its own name) in the file CUDASHIM_COUNT_BLOCKING
 * names, written at exit with "gemms N" (GEMM-family launches), so a test can compute blocking
 * calls per GEMM.
 *
 * Knobs (read once):
 *   CUDASHIM_SYNC=1               run all work at the launching call, as the stand-in did before:
 *                                 a fault is pending until the next synchronisation, and work
 *                                 launched after it does not run
 *   CUDASHIM_WORKER_DELAY_US=N    the worker sleeps N microseconds before each item
 *   CUDASHIM_WORKER_HOLD=1        the worker starts held: it runs nothing until the program
 *                                 calls cudashim_worker_hold(0) (a gate for the stand-in's tests)
 *   CUDASHIM_COUNT_BLOCKING=FILE  the host-blocking counter's file (see above)
 *   CUDASHIM_KERNEL_LOG=FILE      the stand-in's kernel log: the first fault that breaks the
 *                                 context appends the line NVIDIA's kernel driver logs for it,
 *                                 "NVRM: Xid (PCI:0000:00:00): X, pid=P, name=..., ..." (dmesg's
 *                                 form), as the real driver does in the kernel log
 *   CUDASHIM_KERNEL_XID=X         the Xid of that line (default 13)
 *
 * fork(): the child has no worker and empty queues; its first submission starts a worker. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"

#define COUNT_CALLS_VARIABLE "CUDASHIM_COUNT_BLOCKING"
static const char HOST_BLOCKING[] = "host_blocking";
static const char GEMMS[] = "gemms";
/* Both lines are in the file even when 0. */
#define COUNT_ALWAYS_LISTED HOST_BLOCKING, GEMMS
#include "counting.h"

static void log_xid(int code);

enum stream_class { LEGACY, BLOCKING, INDEPENDENT };

struct item {
    struct item *next;
    unsigned long long seq;
    const void *key; /* the stream's identity */
    int cls;
    int running;
    shim_work_fn fn;
    shim_ready_fn ready;
    max_align_t arg[]; /* the launch's copy of the argument */
};

static pthread_mutex_t elock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER; /* the worker waits here */
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER; /* synchronising threads wait here */
static struct item *head, **tail = &head;
static unsigned long long next_seq = 1;
static int worker_running;
static int context_error; /* sticky, once set */
static int pending_fault; /* CUDASHIM_SYNC=1 only: a fault the next synchronisation reports */
static int held;
static int sync_mode;
static long delay_us;

static __thread char per_thread_stream; /* its address is the thread's default stream */

#define MAX_STREAMS 1024
static struct { const void *handle; unsigned int flags; } streams[MAX_STREAMS];

static void after_fork_in_child(void) {
    pthread_mutex_init(&elock, NULL);
    pthread_cond_init(&work_cv, NULL);
    pthread_cond_init(&done_cv, NULL);
    head = NULL; /* the parent's items are the parent's: leaked here, never run */
    tail = &head;
    worker_running = 0;
}

static void before_fork(void) { pthread_mutex_lock(&elock); }
static void after_fork_in_parent(void) { pthread_mutex_unlock(&elock); }

static long env_long(const char *name) {
    const char *v = getenv(name);
    return v && *v ? atol(v) : 0;
}

__attribute__((constructor)) static void start_engine(void) {
    sync_mode = env_long("CUDASHIM_SYNC") != 0;
    delay_us = env_long("CUDASHIM_WORKER_DELAY_US");
    held = env_long("CUDASHIM_WORKER_HOLD") != 0;
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

static void resolve(const void *stream, int per_thread, const void **key, int *cls) {
    uintptr_t s = (uintptr_t)stream;
    if (s == 0 && per_thread) s = 2;
    if (s == 0 || s == 1) { /* NULL, cudaStreamLegacy, CU_STREAM_LEGACY */
        *key = (const void *)1;
        *cls = LEGACY;
    } else if (s == 2) { /* cudaStreamPerThread, CU_STREAM_PER_THREAD */
        *key = &per_thread_stream;
        *cls = BLOCKING;
    } else {
        *key = stream;
        *cls = BLOCKING;
        for (int i = 0; i < MAX_STREAMS; i++)
            if (streams[i].handle == stream) *cls = (streams[i].flags & 1) ? INDEPENDENT : BLOCKING;
    }
}

/* Under elock: whether `it` orders after `earlier`. */
static int orders_after(const struct item *it, const struct item *earlier) {
    return earlier->key == it->key || (it->cls == LEGACY && earlier->cls == BLOCKING) ||
           (it->cls == BLOCKING && earlier->cls == LEGACY);
}

static int may_start(struct item *it) {
    for (struct item *j = head; j != it; j = j->next)
        if (orders_after(it, j)) return 0;
    return !it->ready || it->ready(it->arg);
}

/* Under elock: the context broke, so nothing queued will run (an item running now finishes). */
static void drop_queued(void) {
    struct item **p = &head;
    while (*p) {
        struct item *it = *p;
        if (it->running) {
            p = &it->next;
            continue;
        }
        *p = it->next;
        free(it);
    }
    tail = p;
    pthread_cond_broadcast(&done_cv);
}

static void unlink_item(struct item *it) {
    struct item **p = &head;
    while (*p != it) p = &(*p)->next;
    *p = it->next;
    if (!*p) tail = p;
}

static void *worker(void *unused) {
    (void)unused;
    pthread_mutex_lock(&elock);
    for (;;) {
        struct item *pick = NULL;
        int waiting = 0; /* an item waits on memory: look again soon, nobody will signal */
        if (context_error) drop_queued();
        if (!held) {
            for (struct item *it = head; it; it = it->next) {
                if (it->running) continue;
                if (may_start(it)) {
                    pick = it;
                    break;
                }
                if (it->ready) waiting = 1;
            }
        }
        if (!pick) {
            if (waiting) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_nsec += 200000;
                if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
                pthread_cond_timedwait(&work_cv, &elock, &until);
            } else {
                pthread_cond_wait(&work_cv, &elock);
            }
            continue;
        }
        pick->running = 1;
        pthread_mutex_unlock(&elock);
        if (delay_us > 0) usleep((useconds_t)delay_us);
        int code = pick->fn ? pick->fn(pick->arg) : 0;
        if (code) log_xid(code);
        pthread_mutex_lock(&elock);
        unlink_item(pick);
        free(pick);
        if (code && !context_error) context_error = code;
        pthread_cond_broadcast(&done_cv);
    }
    return NULL;
}

struct event;
static void stamp_record(struct event *ev, struct item *it);
static void record_now(struct event *ev, void *arg, unsigned long long seq);

/* `record`: an event this item records (its seq is set under the lock, so a record's seq is
 * always its own item's). */
/* The kernel log's line for the fault that broke the context, once (CUDASHIM_KERNEL_LOG). */
static void log_xid(int code) {
    static int logged;
    const char *path = getenv("CUDASHIM_KERNEL_LOG");
    if (!path || !*path || __atomic_exchange_n(&logged, 1, __ATOMIC_ACQ_REL)) return;
    const char *xid = getenv("CUDASHIM_KERNEL_XID");
    char name[32] = "unknown";
    FILE *comm = fopen("/proc/self/comm", "r");
    if (comm) {
        if (fgets(name, sizeof name, comm)) name[strcspn(name, "\n")] = 0;
        fclose(comm);
    }
    FILE *log = fopen(path, "a");
    if (!log) return;
    fprintf(log, "[ 4242.000001] NVRM: Xid (PCI:0000:00:00): %s, pid=%d, name=%s, Graphics Exception: stand-in fault %d\n",
            xid && *xid ? xid : "13", (int)getpid(), name, code);
    fclose(log);
}

/* ---- stream capture (CUDA graphs), as NVIDIA documents it ----
 * A stream in capture records the work submitted to it instead of running it; the capture
 * ends as a graph (its recorded work, in order), which each graph launch submits again on the
 * launch's stream. The capture modes (cudaStreamCaptureMode) decide which host calls are
 * legal meanwhile: a "potentially unsafe" call (an allocation, cuMemHostRegister, a module
 * load, a synchronous copy, a device-wide synchronisation) made by a thread in Global mode is
 * refused (900, cudaErrorStreamCaptureUnsupported) while that thread captures (in any mode
 * but Relaxed) or any other thread runs a Global capture; in ThreadLocal mode only the
 * thread's own capture counts; in Relaxed mode nothing does. The refusal invalidates the
 * captures that forbade the call, whose cudaStreamEndCapture then returns 901
 * (cudaErrorStreamCaptureInvalidated). A thread's mode is Global until
 * cudaThreadExchangeStreamCaptureMode changes it. Synchronising or querying a capturing
 * stream is always refused, and invalidates its capture. */
#define MAX_CAPTURES 64
#define CAPTURE_ACTIVE 1
#define CAPTURE_INVALIDATED 2
#define MODE_GLOBAL 0
#define MODE_THREAD_LOCAL 1
#define MODE_RELAXED 2
struct captured {
    struct captured *next;
    shim_work_fn fn;
    size_t size;
    max_align_t arg[];
};
static struct capture {
    const void *key; /* NULL: a free slot */
    int status;
    int mode;
    pthread_t thread;
    struct captured *items, **tail;
} captures[MAX_CAPTURES];
/* A graph: what its capture recorded; an executable graph is the same object. */
struct shim_graph {
    struct shim_graph *next;
    struct captured *items;
};
static struct shim_graph *graphs;
static __thread int thread_capture_mode; /* MODE_GLOBAL */

/* Under elock. */
static struct capture *capture_of(const void *key) {
    for (int i = 0; i < MAX_CAPTURES; i++)
        if (captures[i].key && captures[i].key == key) return &captures[i];
    return NULL;
}

static void free_items(struct captured *it) {
    while (it) {
        struct captured *next = it->next;
        free(it);
        it = next;
    }
}

/* Work submitted to a capturing stream is recorded: 0, or 901 when its capture was
 * invalidated; -1 when the stream is not capturing. */
static int capture_record(const void *key, shim_work_fn fn, const void *arg, size_t size, int is_record) {
    pthread_mutex_lock(&elock);
    struct capture *c = capture_of(key);
    int code = -1;
    if (c && c->status == CAPTURE_INVALIDATED) {
        code = 901;
    } else if (c && (is_record || !fn)) {
        code = 0; /* events and waits: ordering only, inside one stream's graph */
    } else if (c) {
        struct captured *it = malloc(sizeof *it + size);
        if (it) {
            it->next = NULL;
            it->fn = fn;
            it->size = size;
            memcpy(it->arg, arg, size);
            *c->tail = it;
            c->tail = &it->next;
            code = 0;
        } else {
            code = 2;
        }
    }
    pthread_mutex_unlock(&elock);
    return code;
}

int cudashim_engine_capture_begin(const void *stream, int per_thread, int mode) {
    const void *key;
    int cls;
    resolve(stream, per_thread, &key, &cls);
    if (cls == LEGACY) return 900; /* the legacy stream cannot be captured */
    if (mode < MODE_GLOBAL || mode > MODE_RELAXED) return 1;
    pthread_mutex_lock(&elock);
    int code = 900;
    if (!capture_of(key)) {
        for (int i = 0; i < MAX_CAPTURES; i++) {
            if (!captures[i].key) {
                captures[i] = (struct capture){key, CAPTURE_ACTIVE, mode, pthread_self(), NULL, NULL};
                captures[i].tail = &captures[i].items;
                code = 0;
                break;
            }
        }
    }
    pthread_mutex_unlock(&elock);
    return code;
}

/* 0 with the graph; 901 when the capture was invalidated; 908 from another thread (a capture
 * begun in Global or ThreadLocal mode ends on its own thread); 401 when not capturing. */
int cudashim_engine_capture_end(const void *stream, int per_thread, void **graph) {
    const void *key;
    int cls;
    resolve(stream, per_thread, &key, &cls);
    pthread_mutex_lock(&elock);
    struct capture *c = capture_of(key);
    int code = 0;
    if (!c) {
        code = 401; /* cudaErrorIllegalState */
    } else if (c->mode != MODE_RELAXED && !pthread_equal(c->thread, pthread_self())) {
        code = 908; /* cudaErrorStreamCaptureWrongThread: the capture goes on, invalidated */
        c->status = CAPTURE_INVALIDATED;
    } else {
        struct captured *items = c->items;
        int status = c->status;
        c->key = NULL;
        struct shim_graph *g = status == CAPTURE_ACTIVE ? malloc(sizeof *g) : NULL;
        if (!g) {
            free_items(items);
            code = status == CAPTURE_ACTIVE ? 2 : 901;
        } else {
            g->items = items;
            g->next = graphs;
            graphs = g;
            *graph = g;
        }
    }
    pthread_mutex_unlock(&elock);
    return code;
}

/* 0: not capturing, 1: capturing, 2: its capture was invalidated. */
int cudashim_engine_capture_status(const void *stream, int per_thread) {
    const void *key;
    int cls;
    resolve(stream, per_thread, &key, &cls);
    pthread_mutex_lock(&elock);
    struct capture *c = capture_of(key);
    int status = c ? c->status : 0;
    pthread_mutex_unlock(&elock);
    return status;
}

/* A synchronisation or query of `stream`: 900, and its capture invalidated, while it captures. */
int cudashim_engine_capture_conflict(const void *stream, int per_thread) {
    const void *key;
    int cls;
    resolve(stream, per_thread, &key, &cls);
    pthread_mutex_lock(&elock);
    struct capture *c = capture_of(key);
    int code = 0;
    if (c && c->status == CAPTURE_ACTIVE) {
        c->status = CAPTURE_INVALIDATED;
        code = 900;
    }
    pthread_mutex_unlock(&elock);
    return code;
}

/* A potentially unsafe call by the calling thread: 0 when its capture mode allows it, else
 * 900 with the captures that forbid it invalidated. */
int cudashim_engine_capture_unsafe(void) {
    int mode = thread_capture_mode;
    if (mode == MODE_RELAXED) return 0;
    pthread_t self = pthread_self();
    int code = 0;
    pthread_mutex_lock(&elock);
    for (int i = 0; i < MAX_CAPTURES; i++) {
        struct capture *c = &captures[i];
        if (!c->key || c->status != CAPTURE_ACTIVE) continue;
        int own = pthread_equal(c->thread, self);
        if ((own && c->mode != MODE_RELAXED) || (!own && mode == MODE_GLOBAL && c->mode == MODE_GLOBAL)) {
            c->status = CAPTURE_INVALIDATED;
            code = 900;
        }
    }
    pthread_mutex_unlock(&elock);
    return code;
}

/* cudaThreadExchangeStreamCaptureMode: the thread's mode becomes *mode, *mode the old one. */
int cudashim_engine_capture_exchange_mode(int *mode) {
    if (!mode || *mode < MODE_GLOBAL || *mode > MODE_RELAXED) return 1;
    int old = thread_capture_mode;
    thread_capture_mode = *mode;
    *mode = old;
    return 0;
}

static int submit(const void *stream, int per_thread, shim_work_fn fn, shim_ready_fn ready, const void *arg,
                  size_t size, struct event *record);

/* cudaGraphExecUpdate: the executable runs `graph`'s work from now on. 0, or 400 for a graph or
 * an executable the stand-in never made. */
int cudashim_engine_graph_update(void *exec, void *graph) {
    pthread_mutex_lock(&elock);
    struct shim_graph *e = NULL, *g = NULL;
    for (struct shim_graph *it = graphs; it; it = it->next) {
        if (it == exec) e = it;
        if (it == graph) g = it;
    }
    if (e && g) e->items = g->items;
    pthread_mutex_unlock(&elock);
    return e && g ? 0 : 400;
}

/* One launch of a graph (an executable graph, the same object) on `stream`: its recorded work,
 * in order. 0, 400 for a graph the stand-in never made, or the context's error. */
int cudashim_engine_graph_launch(void *graph, const void *stream, int per_thread) {
    pthread_mutex_lock(&elock);
    struct shim_graph *g = graphs;
    while (g && g != graph) g = g->next;
    struct captured *items = g ? g->items : NULL;
    pthread_mutex_unlock(&elock);
    if (!g) return 400;
    /* A graph's recorded work is never freed (a graph lives as long as the process here). */
    for (struct captured *it = items; it; it = it->next) {
        int code = submit(stream, per_thread, it->fn, NULL, it->arg, it->size, NULL);
        if (code) return code;
    }
    return 0;
}

static int submit(const void *stream, int per_thread, shim_work_fn fn, shim_ready_fn ready, const void *arg,
                  size_t size, struct event *record) {
    {
        const void *key;
        int cls;
        resolve(stream, per_thread, &key, &cls);
        int captured = cls == LEGACY ? -1 : capture_record(key, fn, arg, size, record != NULL);
        if (captured >= 0) return captured;
    }
    if (sync_mode) {
        if (context_error) return context_error;
        max_align_t copy[size / sizeof(max_align_t) + 1];
        memcpy(copy, arg, size);
        if (record) {
            pthread_mutex_lock(&elock);
            record_now(record, (void *)copy, next_seq++);
            pthread_mutex_unlock(&elock);
        }
        /* All earlier work already ran: a wait is met or never will be. After a fault nothing
         * runs, as on a GPU whose context broke: the host learns of it at the next
         * synchronisation, but work queued after it (a breadcrumb's write) never lands. */
        pthread_mutex_lock(&elock);
        int broken = pending_fault;
        pthread_mutex_unlock(&elock);
        int code = fn && !broken ? fn(copy) : 0;
        if (code) log_xid(code);
        pthread_mutex_lock(&elock);
        if (code && !pending_fault) pending_fault = code;
        pthread_mutex_unlock(&elock);
        return 0;
    }
    struct item *it = malloc(sizeof *it + size);
    if (!it) return 2; /* out of memory */
    it->next = NULL;
    it->running = 0;
    it->fn = fn;
    it->ready = ready;
    memcpy(it->arg, arg, size);
    pthread_mutex_lock(&elock);
    if (context_error) {
        int code = context_error;
        pthread_mutex_unlock(&elock);
        free(it);
        return code;
    }
    resolve(stream, per_thread, &it->key, &it->cls);
    it->seq = next_seq++;
    if (record) stamp_record(record, it);
    *tail = it;
    tail = &it->next;
    if (!worker_running) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* As the driver's own threads do, the GPU's thread takes no signal sent to the process:
         * it starts with every asynchronous one blocked (the caller's mask is put back). */
        sigset_t all, old;
        sigfillset(&all);
        sigdelset(&all, SIGSEGV), sigdelset(&all, SIGBUS), sigdelset(&all, SIGFPE);
        sigdelset(&all, SIGILL), sigdelset(&all, SIGTRAP), sigdelset(&all, SIGSYS);
        int masked = pthread_sigmask(SIG_BLOCK, &all, &old) == 0;
        if (pthread_create(&t, &attr, worker, NULL) == 0) worker_running = 1;
        if (masked) pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
    }
    pthread_cond_signal(&work_cv);
    pthread_mutex_unlock(&elock);
    return 0;
}

int cudashim_engine_submit(const void *stream, int per_thread, shim_work_fn fn, shim_ready_fn ready, const void *arg,
                           size_t size) {
    return submit(stream, per_thread, fn, ready, arg, size, NULL);
}

/* Under elock: the error a synchronisation reports; under CUDASHIM_SYNC=1 the pending fault
 * becomes sticky here, as the stand-in always did. */
static int settle(void) {
    if (pending_fault && !context_error) context_error = pending_fault;
    pending_fault = 0;
    return context_error;
}

static void count_blocking(const char *who) {
    if (!who) return;
    count_call(HOST_BLOCKING);
    count_call(who);
}

int cudashim_engine_wait_stream(const void *stream, int per_thread, const char *who) {
    count_blocking(who);
    const void *key;
    int cls;
    resolve(stream, per_thread, &key, &cls);
    pthread_mutex_lock(&elock);
    for (;;) {
        int outstanding = 0;
        for (struct item *it = head; it && !outstanding; it = it->next)
            /* The legacy stream's synchronisation waits for everything that orders with it. */
            outstanding = cls == LEGACY ? it->cls != INDEPENDENT : it->key == key;
        if (!outstanding) break;
        pthread_cond_wait(&done_cv, &elock);
    }
    int code = settle();
    pthread_mutex_unlock(&elock);
    return code;
}

int cudashim_engine_wait_all(const char *who) {
    count_blocking(who);
    pthread_mutex_lock(&elock);
    while (head) pthread_cond_wait(&done_cv, &elock);
    int code = settle();
    pthread_mutex_unlock(&elock);
    return code;
}

int cudashim_engine_block(const void *stream, int per_thread, int all, const char *who) {
    if (sync_mode) {
        count_blocking(who);
        return 0;
    }
    int code = all ? cudashim_engine_wait_all(who) : cudashim_engine_wait_stream(stream, per_thread, who);
    return code;
}

/* A query reports the context's error as a synchronisation does (a GPU answers a query of a
 * stream whose kernel faulted with the fault); under CUDASHIM_SYNC=1 nothing is ever queued,
 * so it only settles the pending fault. */
int cudashim_engine_query_stream(const void *stream, int per_thread) {
    const void *key;
    int cls;
    resolve(stream, per_thread, &key, &cls);
    pthread_mutex_lock(&elock);
    int code = settle();
    for (struct item *it = head; it && !code; it = it->next)
        if (it->key == key) code = 600; /* cudaErrorNotReady, CUDA_ERROR_NOT_READY */
    pthread_mutex_unlock(&elock);
    return code;
}

int cudashim_engine_error(void) { return __atomic_load_n(&context_error, __ATOMIC_ACQUIRE); }

void cudashim_engine_poison(int code) {
    log_xid(code);
    pthread_mutex_lock(&elock);
    if (!context_error) context_error = code;
    pthread_cond_broadcast(&work_cv);
    pthread_cond_broadcast(&done_cv);
    pthread_mutex_unlock(&elock);
}

void cudashim_engine_raise(int code) {
    if (!sync_mode) {
        cudashim_engine_poison(code);
        return;
    }
    log_xid(code);
    pthread_mutex_lock(&elock);
    if (!pending_fault) pending_fault = code;
    pthread_mutex_unlock(&elock);
}

int cudashim_engine_is_sync(void) { return sync_mode; }

void cudashim_engine_stream_created(const void *stream, unsigned int flags) {
    pthread_mutex_lock(&elock);
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (!streams[i].handle || streams[i].handle == stream) {
            streams[i].handle = stream;
            streams[i].flags = flags;
            break;
        }
    }
    pthread_mutex_unlock(&elock);
}

void cudashim_engine_stream_destroyed(const void *stream) {
    pthread_mutex_lock(&elock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (streams[i].handle == stream) streams[i].flags = 0; /* kept: queued work still names it */
    pthread_mutex_unlock(&elock);
}

void cudashim_engine_count_gemm(void) { count_call(GEMMS); }

void cudashim_worker_hold(int hold) {
    pthread_mutex_lock(&elock);
    held = hold;
    pthread_cond_broadcast(&work_cv);
    pthread_mutex_unlock(&elock);
}

/* ---- events ---- */
#define EVENT_MAGIC 0x45564e54u
#define MAX_EVENTS 4096
#define EVENT_DISABLE_TIMING 0x2 /* cudaEventDisableTiming, CU_EVENT_DISABLE_TIMING */

struct event {
    unsigned int magic;
    unsigned int flags;
    unsigned long long record_seq; /* the latest record's item; 0: never recorded */
    int done;                      /* that record ran */
    struct timespec when;
};

/* A static pool: a record still queued for a destroyed event finds the slot, never freed memory. */
static struct event events[MAX_EVENTS];

static struct event *live_event(void *e) {
    uintptr_t p = (uintptr_t)e, first = (uintptr_t)&events[0];
    if (p < first || p >= first + sizeof events || (p - first) % sizeof(struct event)) return NULL;
    struct event *ev = e;
    return ev->magic == EVENT_MAGIC ? ev : NULL;
}

int cudashim_engine_event_create(void **event, unsigned int flags) {
    if (!event || flags > 0xf) return 1;
    pthread_mutex_lock(&elock);
    for (int i = 0; i < MAX_EVENTS; i++) {
        if (events[i].magic != EVENT_MAGIC) {
            events[i] = (struct event){EVENT_MAGIC, flags, 0, 0, {0, 0}};
            *event = &events[i];
            pthread_mutex_unlock(&elock);
            return 0;
        }
    }
    pthread_mutex_unlock(&elock);
    return 2;
}

int cudashim_engine_event_destroy(void *event) {
    pthread_mutex_lock(&elock);
    struct event *ev = live_event(event);
    if (ev) ev->magic = 0;
    pthread_mutex_unlock(&elock);
    return ev ? 0 : 400;
}

struct record_arg {
    struct event *ev;
    unsigned long long seq;
};

static int run_record(void *arg) {
    struct record_arg *r = arg;
    pthread_mutex_lock(&elock);
    if (r->ev->magic == EVENT_MAGIC && r->ev->record_seq == r->seq) {
        clock_gettime(CLOCK_MONOTONIC, &r->ev->when);
        r->ev->done = 1;
    }
    pthread_mutex_unlock(&elock);
    return 0;
}

/* Under elock: the event's latest record is this item. */
static void record_now(struct event *ev, void *arg, unsigned long long seq) {
    ev->record_seq = seq;
    ev->done = 0;
    ((struct record_arg *)arg)->seq = seq;
}

static void stamp_record(struct event *ev, struct item *it) { record_now(ev, it->arg, it->seq); }

int cudashim_engine_event_record(void *event, const void *stream, int per_thread) {
    pthread_mutex_lock(&elock);
    struct event *ev = live_event(event);
    pthread_mutex_unlock(&elock);
    if (!ev) return 400;
    struct record_arg r = {ev, 0}; /* seq: set by submit */
    return submit(stream, per_thread, run_record, NULL, &r, sizeof r, ev);
}

int cudashim_engine_event_query(void *event) {
    pthread_mutex_lock(&elock);
    struct event *ev = live_event(event);
    int code = !ev ? 400 : settle() ? context_error : (ev->record_seq && !ev->done) ? 600 : 0;
    pthread_mutex_unlock(&elock);
    return code;
}

int cudashim_engine_event_synchronize(void *event, const char *who) {
    pthread_mutex_lock(&elock);
    struct event *ev = live_event(event);
    if (!ev) {
        pthread_mutex_unlock(&elock);
        return 400;
    }
    pthread_mutex_unlock(&elock);
    count_blocking(who);
    pthread_mutex_lock(&elock);
    while (ev->magic == EVENT_MAGIC && ev->record_seq && !ev->done && !context_error) pthread_cond_wait(&done_cv, &elock);
    int code = settle();
    pthread_mutex_unlock(&elock);
    return code;
}

int cudashim_engine_event_elapsed(float *ms, void *start, void *end) {
    pthread_mutex_lock(&elock);
    struct event *a = live_event(start), *b = live_event(end);
    int code = 0;
    if (!ms) code = 1;
    else if (!a || !b || !a->record_seq || !b->record_seq || ((a->flags | b->flags) & EVENT_DISABLE_TIMING)) code = 400;
    else if (context_error) code = context_error;
    else if (!a->done || !b->done) code = 600;
    else *ms = (float)((double)(b->when.tv_sec - a->when.tv_sec) * 1e3 + (double)(b->when.tv_nsec - a->when.tv_nsec) / 1e6);
    pthread_mutex_unlock(&elock);
    return code;
}

/* Under elock (the worker asks): the awaited record ran, or a later record replaced it. */
static int record_ran(void *arg) {
    struct record_arg *r = arg;
    return r->ev->magic != EVENT_MAGIC || r->ev->record_seq != r->seq || r->ev->done;
}

int cudashim_engine_stream_wait_event(const void *stream, int per_thread, void *event) {
    pthread_mutex_lock(&elock);
    struct event *ev = live_event(event);
    struct record_arg r = {ev, ev ? ev->record_seq : 0};
    int pending = ev && ev->record_seq && !ev->done;
    pthread_mutex_unlock(&elock);
    if (!ev) return 400;
    if (!pending || sync_mode) return context_error; /* never recorded, or already ran: no wait */
    return cudashim_engine_submit(stream, per_thread, NULL, record_ran, &r, sizeof r);
}
