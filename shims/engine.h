/* The stand-in GPU (engine.c, linked into libcuda.so.1): stream queues one worker thread runs.
 * Private to the stand-in (not part of CUDA): the driver calls it directly, the runtime finds
 * it with dlsym on the driver, cuBLAS and cublasLt reach it through the runtime's cudashim_*
 * functions. Every function here is safe to call from any host thread. */
#ifndef CUDASHIM_ENGINE_H
#define CUDASHIM_ENGINE_H
#include <stddef.h>

/* A piece of device work: runs on the worker with a copy of the argument the launch gave;
 * returns 0, or the CUDA error (700, ...) that breaks the context: a fault. */
typedef int (*shim_work_fn)(void *arg);
/* NULL, or 1 once the work may start (a wait on an event or on a memory value). */
typedef int (*shim_ready_fn)(void *arg);

/* Enqueues `fn` on `stream` (NULL with per_thread: the calling thread's default stream), with
 * a copy of `size` bytes at `arg`. Returns 0, or the context's sticky error (nothing enqueued).
 * Under CUDASHIM_SYNC=1 it runs the work now, and a fault waits for the next synchronisation. */
int cudashim_engine_submit(const void *stream, int per_thread, shim_work_fn fn, shim_ready_fn ready, const void *arg,
                           size_t size);
/* Blocks until the stream's work (for the legacy stream: all work that orders with it) ran; a
 * host-blocking call named `who` when `who` is not NULL. Returns the context's error, if any. */
int cudashim_engine_wait_stream(const void *stream, int per_thread, const char *who);
/* Blocks until all work ran (cudaDeviceSynchronize, cuCtxSynchronize, implicit syncs). */
int cudashim_engine_wait_all(const char *who);
/* As wait_stream (all: wait_all) for the driver's calls: under CUDASHIM_SYNC=1 it only counts,
 * and reports nothing (the driver never saw a fault there). */
int cudashim_engine_block(const void *stream, int per_thread, int all, const char *who);
/* 0 when the stream has no work outstanding, 600 (not ready) when it has, or the sticky error. */
int cudashim_engine_query_stream(const void *stream, int per_thread);
/* The context's sticky error, 0 while it works. */
int cudashim_engine_error(void);
/* A sticky error raised by the host side (an injected one): the context breaks now. */
void cudashim_engine_poison(int code);
/* A fault in work the calling thread runs itself, now (the BLAS family, runtime kernels): under
 * CUDASHIM_SYNC=1 it is pending until the next synchronisation, as before; else sticky now. */
void cudashim_engine_raise(int code);
/* 1 under CUDASHIM_SYNC=1. */
int cudashim_engine_is_sync(void);
/* Streams the runtime or the driver created, with their flags (1: non-blocking). */
void cudashim_engine_stream_created(const void *stream, unsigned int flags);
void cudashim_engine_stream_destroyed(const void *stream);
/* One more GEMM-family launch, for the host-blocking counter's "gemms" line. */
void cudashim_engine_count_gemm(void);

/* Events, shared by the runtime (cudaEvent_t) and the driver (CUevent). */
int cudashim_engine_event_create(void **event, unsigned int flags);
int cudashim_engine_event_destroy(void *event);
int cudashim_engine_event_record(void *event, const void *stream, int per_thread);
int cudashim_engine_event_query(void *event);
int cudashim_engine_event_synchronize(void *event, const char *who);
int cudashim_engine_event_elapsed(float *ms, void *start, void *end);
int cudashim_engine_stream_wait_event(const void *stream, int per_thread, void *event);

/* Stream capture (engine.c describes the rules). Each returns 0 or the CUDA error. */
int cudashim_engine_capture_begin(const void *stream, int per_thread, int mode);
int cudashim_engine_capture_end(const void *stream, int per_thread, void **graph);
int cudashim_engine_capture_status(const void *stream, int per_thread);
int cudashim_engine_capture_conflict(const void *stream, int per_thread);
int cudashim_engine_capture_unsafe(void);
int cudashim_engine_capture_exchange_mode(int *mode);
int cudashim_engine_graph_launch(void *graph, const void *stream, int per_thread);
int cudashim_engine_graph_update(void *exec, void *graph);

/* The test gate (CUDASHIM_WORKER_HOLD): while held, the worker starts no work. */
void cudashim_worker_hold(int held);
#endif
