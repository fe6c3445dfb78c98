/* Stand-in libcudnn.so.9: cuDNN 9's dispatcher. Like NVIDIA's, it holds almost nothing itself:
 * at its first call it dlopen()s its sublibraries (cudnn_sub.c, built once per sublibrary) by
 * the names cuDNN 9.26's dispatcher tries, in its order: the full version
 * (libcudnn_graph.so.9.26.0), major.minor (.so.9.26), major (.so.9), then the bare name
 * (.so); found through its RPATH ($ORIGIN), LD_LIBRARY_PATH and the system's folders. Each
 * sublibrary's version (its cudnn_<name>_version, major << 16 | minor << 8 | patch, as NVIDIA's
 * cudnn_graph_version) must be the dispatcher's own. Which sublibraries, and its release, are
 * set when it is built, as NVIDIA's differ by release: CUDNN_MINOR, CUDNN_PATCH (9.26.0 unless
 * set) and CUDNN_EXT (9.26's dispatcher loads libcudnn_ext, 9.10.2's has none). Their names
 * are in its read-only data as NVIDIA's are ("libcudnn_graph.so"), where the guard and the
 * doctor read them.
 *
 * What fails, as with NVIDIA's: libcudnn_graph missing: every call returns
 * CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED (1008); a sublibrary of another version:
 * CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH (1002); libcudnn_cnn missing: the legacy
 * convolution returns 1008. cudnnGetLastErrorString says which file, and clears.
 * Failures are injected by the files a test leaves out or swaps (the stand-in's cudnn/,
 * cudnn-9.1/ and cudnn-9.10/ folders), and by the knobs of cudnn_sub.c. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAJOR 9
#ifndef CUDNN_MINOR
#define CUDNN_MINOR 26
#endif
#ifndef CUDNN_PATCH
#define CUDNN_PATCH 0
#endif
#define MINOR CUDNN_MINOR
#define PATCH CUDNN_PATCH

typedef int status_t;
enum { SUCCESS = 0, VERSION_MISMATCH = 1002, LOADING_FAILED = 1008 };

static __thread char last_error[256];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

struct sublibrary {
    const char *name; /* as NVIDIA's dispatcher holds it: "libcudnn_graph.so" */
    int tried;
    status_t status;
    void *handle;
};

/* In the dispatcher's load order, libcudnn_graph first (the handle's calls need it). */
static struct sublibrary subs[] = {
    {"libcudnn_graph.so", 0, 0, NULL},
    {"libcudnn_ops.so", 0, 0, NULL},
    {"libcudnn_cnn.so", 0, 0, NULL},
    {"libcudnn_adv.so", 0, 0, NULL},
#ifdef CUDNN_EXT
    {"libcudnn_ext.so", 0, 0, NULL},
#endif
};
#define GRAPH subs[0]
#define CNN subs[2]

/* Loads `sub` once, in cuDNN's order of names; its status (SUCCESS, LOADING_FAILED,
 * VERSION_MISMATCH) with the message set for cudnnGetLastErrorString. */
static status_t load(struct sublibrary *sub) {
    pthread_mutex_lock(&lock);
    if (!sub->tried) {
        sub->tried = 1;
        char name[128];
        const char *forms[] = {"%s.%d.%d.%d", "%s.%d.%d", "%s.%d", "%s"};
        for (size_t i = 0; i < sizeof forms / sizeof *forms && !sub->handle; i++) {
            snprintf(name, sizeof name, forms[i], sub->name, MAJOR, MINOR, PATCH);
            sub->handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        }
        if (!sub->handle) {
            sub->status = LOADING_FAILED;
        } else {
            char symbol[128];
            const char *short_name = sub->name + strlen("libcudnn_");
            snprintf(symbol, sizeof symbol, "cudnn_%.*s_version", (int)(strlen(short_name) - strlen(".so")), short_name);
            const uint32_t *v = dlsym(sub->handle, symbol);
            uint32_t own = MAJOR << 16 | MINOR << 8 | PATCH;
            sub->status = v && *v == own ? SUCCESS : VERSION_MISMATCH;
        }
    }
    status_t status = sub->status;
    pthread_mutex_unlock(&lock);
    if (status == LOADING_FAILED) {
        snprintf(last_error, sizeof last_error, "Could not load library %s.%d.%d.%d. Error: not found", sub->name, MAJOR, MINOR, PATCH);
    } else if (status == VERSION_MISMATCH) {
        snprintf(last_error, sizeof last_error, "%s.%d is not version %d.%d.%d (cudnnVersionCheck)", sub->name, MAJOR, MAJOR, MINOR, PATCH);
    }
    return status;
}

/* The sublibrary's function `name`, once it loaded (NULL and `*status` set otherwise). */
static void *function(struct sublibrary *sub, const char *name, status_t *status) {
    *status = load(sub);
    if (*status != SUCCESS) return NULL;
    void *f = dlsym(sub->handle, name);
    if (!f) *status = LOADING_FAILED;
    return f;
}

/* Every sublibrary the dispatcher holds but libcudnn_cnn, loaded at the legacy convolution's
 * first call (graph's first: the handle's calls need it). */
static status_t load_all(void) {
    status_t s = SUCCESS;
    for (size_t i = 0; i < sizeof subs / sizeof *subs && s == SUCCESS; i++) {
        if (&subs[i] != &CNN) s = load(&subs[i]);
    }
    return s;
}

size_t cudnnGetVersion(void) { return MAJOR * 10000 + MINOR * 100 + PATCH; }

size_t cudnnGetCudartVersion(void) {
    status_t s;
    size_t (*f)(void) = (size_t (*)(void))function(&GRAPH, "cudnnGetCudartVersion", &s);
    return f ? f() : 0;
}

void cudnnGetLastErrorString(char *message, size_t max_size) {
    if (!message || !max_size) return;
    if (last_error[0]) {
        snprintf(message, max_size, "%s", last_error);
        last_error[0] = 0;
        return;
    }
    message[0] = 0;
    if (GRAPH.handle) {
        void (*f)(char *, size_t) = (void (*)(char *, size_t))dlsym(GRAPH.handle, "cudnnGetLastErrorString");
        if (f) f(message, max_size);
    }
}

/* Forwards to the graph sublibrary's function of the same name. */
#define FORWARD(ret_name, params, args)                                     \
    status_t ret_name params {                                              \
        status_t s = load_all();                                            \
        if (s != SUCCESS) return s;                                         \
        status_t(*f) params = (status_t(*) params)function(&GRAPH, #ret_name, &s); \
        return f ? f args : s;                                              \
    }

FORWARD(cudnnCreate, (void **handle), (handle))
FORWARD(cudnnDestroy, (void *handle), (handle))
FORWARD(cudnnSetStream, (void *handle, void *stream), (handle, stream))
FORWARD(cudnnGetStream, (void *handle, void **stream), (handle, stream))
FORWARD(cudnnBackendCreateDescriptor, (int type, void **desc), (type, desc))
FORWARD(cudnnBackendDestroyDescriptor, (void *desc), (desc))
FORWARD(cudnnBackendSetAttribute, (void *desc, int name, int type, int64_t count, const void *elements), (desc, name, type, count, elements))
FORWARD(cudnnBackendGetAttribute, (void *desc, int name, int type, int64_t requested, int64_t *count, void *elements),
        (desc, name, type, requested, count, elements))
FORWARD(cudnnBackendFinalize, (void *desc), (desc))
FORWARD(cudnnBackendExecute, (void *handle, void *plan, void *pack), (handle, plan, pack))

/* The legacy convolution lives in libcudnn_cnn, loaded at its first call. */
status_t cudnnConvolutionForward(void *handle, const void *alpha, void *x_desc, const void *x, void *w_desc, const void *w, void *conv, int algo,
                                 void *ws, size_t ws_bytes, const void *beta, void *y_desc, void *y) {
    status_t s = load_all();
    if (s != SUCCESS) return s;
    typedef status_t (*fn)(void *, const void *, void *, const void *, void *, const void *, void *, int, void *, size_t, const void *, void *, void *);
    fn f = (fn)function(&CNN, "cudnnConvolutionForward", &s);
    return f ? f(handle, alpha, x_desc, x, w_desc, w, conv, algo, ws, ws_bytes, beta, y_desc, y) : s;
}

/* The other legacy entry points the guard hooks (those PyTorch 2.15 runs on the device): here so
 * that every hooked function has a definition to find, not computed by the stand-in. Their
 * arguments are never read. */
#define NOT_IN_STANDIN(name)                                                                   \
    status_t name(void *first, ...) {                                                          \
        (void)first;                                                                           \
        snprintf(last_error, sizeof last_error, "%s is not implemented by the stand-in", #name); \
        return 3000; /* CUDNN_STATUS_NOT_SUPPORTED */                                          \
    }

NOT_IN_STANDIN(cudnnConvolutionBackwardData)
NOT_IN_STANDIN(cudnnConvolutionBackwardFilter)
NOT_IN_STANDIN(cudnnConvolutionBiasActivationForward)
NOT_IN_STANDIN(cudnnFindConvolutionForwardAlgorithmEx)
NOT_IN_STANDIN(cudnnFindConvolutionBackwardDataAlgorithmEx)
NOT_IN_STANDIN(cudnnFindConvolutionBackwardFilterAlgorithmEx)
NOT_IN_STANDIN(cudnnBatchNormalizationForwardInference)
NOT_IN_STANDIN(cudnnBatchNormalizationForwardTrainingEx)
NOT_IN_STANDIN(cudnnBatchNormalizationBackwardEx)
NOT_IN_STANDIN(cudnnPoolingForward)
NOT_IN_STANDIN(cudnnAddTensor)
NOT_IN_STANDIN(cudnnCTCLoss)
NOT_IN_STANDIN(cudnnCTCLoss_v8)
NOT_IN_STANDIN(cudnnRNNForward)
NOT_IN_STANDIN(cudnnRNNBackwardData_v8)
NOT_IN_STANDIN(cudnnRNNBackwardWeights_v8)
NOT_IN_STANDIN(cudnnSpatialTfGridGeneratorForward)
NOT_IN_STANDIN(cudnnSpatialTfGridGeneratorBackward)
NOT_IN_STANDIN(cudnnSpatialTfSamplerForward)
NOT_IN_STANDIN(cudnnSpatialTfSamplerBackward)
NOT_IN_STANDIN(cudnnSetDropoutDescriptor)
NOT_IN_STANDIN(cudnnRestoreDropoutDescriptor)
