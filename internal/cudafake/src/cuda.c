/*
 * A fake libcuda.so.1: host memory stands in for device memory, streams run
 * work synchronously, and the one kernel it computes is saxpy; with
 * FLOWKIT_FAKE_CUDA_KERNELS=noop every kernel of a module launches and does
 * nothing. With FLOWKIT_FAKE_CUDA_STREAMS=async streams run their work only
 * when the host must wait for it, in an order chosen to break programs that
 * lack a wait (see "Asynchronous streams" below). Every entry point is defined with the prototype cuda.h declares,
 * so compiling this file checks the signatures the Go bindings assume, and
 * the tests check that arguments arrive where the header says.
 */
#define _GNU_SOURCE
#include "fake.h"

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct CUctx_st { int device; };
static struct CUctx_st primary;
static int initialized;
static int retained;
static __thread CUcontext current;
static int noop_kernels;
static int async_mode; /* FLOWKIT_FAKE_CUDA_STREAMS: 0 sync, ASYNC_NEWEST or ASYNC_OLDEST */
enum { ASYNC_NEWEST = 1, ASYNC_OLDEST = 2 };
static volatile int faulted;

/* The kernel emulator (FLOWKIT_FAKE_CUDA_KERNELS=emu): a library of
 * kernels compiled for the host, named by FLOWKIT_FAKE_CUDA_EMU (see
 * emu/emu.cc). */
static const void *(*emu_find)(const char *name, int *nparams, const unsigned char **sizes);
static int (*emu_launch)(const void *k, const unsigned grid[3], const unsigned block[3], void **params, char *err, size_t errlen);

/* lock guards the allocation table and the captures. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

CUcontext fake_current_ctx(void) { return current; }
void fake_fault(void) { faulted = 1; }
int fake_noop_kernels(void) { return noop_kernels; }

#define NEED_INIT do { if (!initialized) return CUDA_ERROR_NOT_INITIALIZED; } while (0)
#define NEED_CTX do { \
	NEED_INIT; \
	if (current != &primary || retained == 0) return CUDA_ERROR_INVALID_CONTEXT; \
	if (faulted) return CUDA_ERROR_ILLEGAL_ADDRESS; \
} while (0)

/* complain says on stderr why a call fails. */
static void complain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void complain(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "fake cuda: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* Allocations: device memory (cuMemAlloc) and page-locked host memory
 * (cuMemAllocHost), so that copies and kernels can be checked against them. */

struct alloc { uintptr_t base; size_t size; int host; };
static struct alloc *allocs;
static int nallocs, capallocs;

static void alloc_add(void *p, size_t size, int host) {
	pthread_mutex_lock(&lock);
	if (nallocs == capallocs) {
		capallocs = capallocs ? 2 * capallocs : 64;
		allocs = realloc(allocs, capallocs * sizeof *allocs);
	}
	allocs[nallocs++] = (struct alloc){ (uintptr_t)p, size, host };
	pthread_mutex_unlock(&lock);
}

/* alloc_remove forgets the allocation at p and reports whether there was one. */
static int alloc_remove(void *p, int host) {
	int found = 0;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < nallocs; i++)
		if (allocs[i].base == (uintptr_t)p && allocs[i].host == host) {
			allocs[i] = allocs[--nallocs];
			found = 1;
			break;
		}
	pthread_mutex_unlock(&lock);
	return found;
}

/* inside reports whether [p, p+n) lies in one allocation of the kind
 * (host: 0 device, 1 page-locked host, -1 either); end-inclusive for n = 0. */
static int inside(uintptr_t p, size_t n, int host) {
	int ok = 0;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < nallocs && !ok; i++) {
		const struct alloc *a = &allocs[i];
		ok = (host < 0 || a->host == host) && p >= a->base && p - a->base <= a->size && n <= a->size - (p - a->base);
	}
	pthread_mutex_unlock(&lock);
	return ok;
}

int fake_device_range(const char *call, const char *what, const void *p, size_t n) {
	if (n == 0 || inside((uintptr_t)p, n, 0)) return 1;
	complain("%s: %s [%p, +%zu bytes) is not inside one device allocation", call, what, p, n);
	return 0;
}

/* pinned_range checks the host side of a captured copy: CUDA cannot
 * capture copies from pageable memory. */
static int pinned_range(const char *call, const void *p, size_t n) {
	if (n == 0 || inside((uintptr_t)p, n, 1)) return 1;
	complain("%s: host [%p, +%zu bytes) is not page-locked memory from cuMemAllocHost, and the stream is capturing", call, p, n);
	return 0;
}

/* Graphs, streams and captures. */

struct op {
	fake_op_fn fn;
	void *arg;
	size_t size;
	CUstream stream; /* a captured op's stream, and its number there (the stream's seq after it) */
	long seq;
};
/* A graph's ops in capture order, and the dependencies between them that
 * capture order does not imply: ops of one stream in order, and event
 * waits between streams (edge: op from before op to). */
struct edge { int from, to; };
struct CUgraph_st { struct op *ops; int n, cap; struct edge *edges; int nedges; };
struct CUgraphExec_st { struct op *ops; int n; struct edge *edges; int nedges; };

/* A capture in progress: its graph, the streams that joined it, and the
 * cross-stream dependencies (an event recorded on from after its seq-th
 * op, waited on by to), which EndCapture checks join every stream back. */
struct dep { CUstream from; long seq; CUstream to; long to_seq; };
struct capture {
	unsigned id;
	struct CUgraph_st *graph;
	CUstream origin;
	CUstream *members;
	int nmembers, capmembers;
	struct dep *deps;
	int ndeps, capdeps;
};
struct qop;
struct CUstream_st {
	struct capture *capture;
	long seq; /* ops captured */
	/* FLOWKIT_FAKE_CUDA_STREAMS=async: the ops enqueued and not yet run,
	 * q[head:n], and how many were enqueued (enq) and have run (done). */
	struct qop *q;
	int head, n, cap;
	long enq, done;
	struct CUstream_st *next; /* in the live streams' list */
};

static unsigned next_capture = 1;
static struct capture *captures[64]; /* active ones */
static int ncaptures;

static struct capture *capture_by_id(unsigned id) {
	for (int i = 0; i < ncaptures; i++)
		if (captures[i]->id == id) return captures[i];
	return NULL;
}

static void graph_append(struct CUgraph_st *g, fake_op_fn fn, const void *arg, size_t size, CUstream s, long seq) {
	if (g->n == g->cap) {
		g->cap = g->cap ? 2 * g->cap : 8;
		g->ops = realloc(g->ops, g->cap * sizeof *g->ops);
	}
	void *copy = malloc(size ? size : 1);
	memcpy(copy, arg, size);
	g->ops[g->n++] = (struct op){ fn, copy, size, s, seq };
}

/* Events: an event recorded by cuEventRecord in a capturing stream is a
 * point in that capture (capture id, stream, position), not a time. */
struct CUevent_st {
	unsigned int flags;
	int recorded;
	double ms;
	unsigned cap_id;
	CUstream cap_stream;
	long cap_seq;
	/* async: records enqueued, and the latest that has run */
	long enq_gen, done_gen;
};

/* Asynchronous streams (FLOWKIT_FAKE_CUDA_STREAMS=async or async-oldest).
 *
 * Work enqueued on a stream waits in the stream's queue until the host must
 * wait for it: cuStreamSynchronize, cuEventSynchronize, cuEventQuery,
 * cuCtxSynchronize, a copy into pageable host memory (which CUDA completes
 * before returning), and the calls that free what queued work may use. A
 * drain then runs queued work, one op at a time, choosing among the streams
 * whose next op may run (a wait may run once the record it waits for has)
 * the one whose next op was enqueued last (async), or first
 * (async-oldest). The newest-first order runs a consumer before a producer
 * on another stream unless an event orders them, and it keeps a copy from
 * page-locked memory queued until the host waits: a missing
 * cuStreamWaitEvent, or page-locked memory overwritten before the copy
 * that reads it has run, changes the results, as it may on a GPU. Copies
 * from pageable memory take their source when enqueued, as CUDA's staging
 * does. A graph launch is one op, whose ops run in the newest-first order
 * their captured dependencies allow (see run_graph). */
struct qop {
	struct op op;   /* fn NULL: a wait */
	long stamp;     /* enqueue order over all streams */
	long seq;       /* the stream's enq after this op */
	CUevent wait;   /* a wait's event, and the record it waits for */
	long wait_gen;
};

static pthread_mutex_t sched = PTHREAD_MUTEX_INITIALIZER; /* the queues, the live list, event generations */
static CUstream live;                                       /* streams, newest first */
static long stamps;

/* enqueue_locked appends fn(copy of arg), or a wait for the wait_gen-th
 * record of wait when fn is NULL, to s's queue and returns its sequence
 * number on s. sched is held; enqueue takes it. */
static long enqueue_locked(CUstream s, fake_op_fn fn, const void *arg, size_t size, CUevent wait, long wait_gen) {
	if (s->n == s->cap) {
		if (s->head > 0) { /* compact */
			memmove(s->q, s->q + s->head, (s->n - s->head) * sizeof *s->q);
			s->n -= s->head;
			s->head = 0;
		}
		if (s->n == s->cap) {
			s->cap = s->cap ? 2 * s->cap : 64;
			s->q = realloc(s->q, s->cap * sizeof *s->q);
		}
	}
	void *copy = NULL;
	if (fn) {
		copy = malloc(size ? size : 1);
		memcpy(copy, arg, size);
	}
	long seq = ++s->enq;
	s->q[s->n++] = (struct qop){ { fn, copy, size, NULL, 0 }, ++stamps, seq, wait, wait_gen };
	return seq;
}

static long enqueue(CUstream s, fake_op_fn fn, const void *arg, size_t size, CUevent wait, long wait_gen) {
	pthread_mutex_lock(&sched);
	long seq = enqueue_locked(s, fn, arg, size, wait, wait_gen);
	pthread_mutex_unlock(&sched);
	return seq;
}

/* runnable reports whether s's next op may run. sched is held. */
static int runnable(CUstream s) {
	if (s->head == s->n) return 0;
	const struct qop *h = &s->q[s->head];
	return !h->wait || h->wait->done_gen >= h->wait_gen;
}

/* drain runs queued ops until done(ctx) holds. It reports a deadlock (no op
 * may run, and done does not hold) and faults. */
static void drain(int (*done)(const void *), const void *ctx) {
	pthread_mutex_lock(&sched);
	while (!done(ctx)) {
		CUstream pick = NULL;
		for (CUstream s = live; s; s = s->next) {
			if (!runnable(s)) continue;
			long st = s->q[s->head].stamp, best = pick ? pick->q[pick->head].stamp : 0;
			if (!pick || (async_mode == ASYNC_NEWEST ? st > best : st < best)) pick = s;
		}
		if (!pick) {
			complain("streams deadlocked: the host waits for work behind waits on events that are never recorded");
			fake_fault();
			break;
		}
		struct qop h = pick->q[pick->head++];
		if (h.op.fn) {
			if (!faulted) h.op.fn(h.op.arg); /* after a fault the device runs nothing more */
			free(h.op.arg);
		}
		pick->done = h.seq;
	}
	pthread_mutex_unlock(&sched);
}

static int all_done(const void *ctx) {
	(void)ctx;
	for (CUstream s = live; s; s = s->next)
		if (s->done != s->enq) return 0;
	return 1;
}
static int stream_done(const void *ctx) {
	CUstream s = (CUstream)ctx;
	return s->done == s->enq;
}
static int event_done(const void *ctx) {
	CUevent e = (CUevent)ctx;
	return e->done_gen >= e->enq_gen;
}
struct op_ref { CUstream s; long seq; };
static int op_done(const void *ctx) {
	const struct op_ref *r = ctx;
	return r->s->done >= r->seq;
}

/* drain_all runs every queued op (async), e.g. before memory that queued
 * work may use is freed. */
static void drain_all(void) {
	if (async_mode) drain(all_done, NULL);
}

CUresult fake_submit(CUstream s, fake_op_fn fn, const void *arg, size_t size) {
	pthread_mutex_lock(&lock);
	if (s && s->capture) {
		s->seq++;
		graph_append(s->capture->graph, fn, arg, size, s, s->seq);
		pthread_mutex_unlock(&lock);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&lock);
	if (async_mode && s) {
		enqueue(s, fn, arg, size, NULL, 0);
	} else {
		if (async_mode) drain_all(); /* the legacy stream follows all work */
		fn((void *)arg);
	}
	return faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

static int capturing(CUstream s) {
	pthread_mutex_lock(&lock);
	int c = s && s->capture;
	pthread_mutex_unlock(&lock);
	return c;
}

/* Errors. */

static const struct { CUresult code; const char *name, *text; } errors[] = {
	{ CUDA_SUCCESS, "CUDA_SUCCESS", "no error" },
	{ CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
	{ CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
	{ CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
	{ CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid" },
	{ CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
	{ CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed" },
	{ CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
	{ CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state" },
	{ CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
	{ CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready" },
	{ CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered" },
	{ CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing" },
	{ CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not initiated in this stream" },
	{ CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work" },
	{ CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency created on uncaptured work in another stream" },
	{ CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream" },
};

CUresult cuGetErrorName(CUresult error, const char **pStr) {
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
		if (errors[i].code == error) { *pStr = errors[i].name; return CUDA_SUCCESS; }
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **pStr) {
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
		if (errors[i].code == error) { *pStr = errors[i].text; return CUDA_SUCCESS; }
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

/* Initialization and devices. */

CUresult cuInit(unsigned int Flags) {
	if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
	const char *k = getenv("FLOWKIT_FAKE_CUDA_KERNELS");
	noop_kernels = k && strcmp(k, "noop") == 0;
	const char *st = getenv("FLOWKIT_FAKE_CUDA_STREAMS");
	async_mode = !st || !*st || strcmp(st, "sync") == 0 ? 0 : strcmp(st, "async") == 0 ? ASYNC_NEWEST
	             : strcmp(st, "async-oldest") == 0                  ? ASYNC_OLDEST
	                                                                 : -1;
	if (async_mode < 0) {
		complain("cuInit: FLOWKIT_FAKE_CUDA_STREAMS=%s: want sync, async or async-oldest", st);
		async_mode = 0;
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (k && strcmp(k, "emu") == 0 && !emu_launch) {
		const char *path = getenv("FLOWKIT_FAKE_CUDA_EMU");
		void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
		if (!lib) {
			complain("cuInit: FLOWKIT_FAKE_CUDA_KERNELS=emu: cannot load FLOWKIT_FAKE_CUDA_EMU=%s: %s", path ? path : "(unset)",
			         path ? dlerror() : "");
			return CUDA_ERROR_NO_DEVICE;
		}
		*(void **)&emu_find = dlsym(lib, "flowkit_emu_find");
		*(void **)&emu_launch = dlsym(lib, "flowkit_emu_launch");
		if (!emu_find || !emu_launch) {
			complain("cuInit: %s is not a kernel emulator library", path);
			emu_launch = NULL;
			return CUDA_ERROR_NO_DEVICE;
		}
	}
	initialized = 1;
	return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion) { *driverVersion = 13000; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int *count) { NEED_INIT; *count = 1; return CUDA_SUCCESS; }

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
	NEED_INIT;
	if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
	*device = 0;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
	if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
	if (len < 2) return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, len, "NVIDIA H200");
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
	if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
	case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *pi = 50 << 20; break;
	case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *pi = 1980000; break;
	case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *pi = 2619000; break;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *pi = 6144; break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *pi = 232448; break;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* An H200's 143771 MiB (150.7 GB). */
#define TOTAL_MEM ((size_t)143771 << 20)

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
	if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
	*bytes = TOTAL_MEM;
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
	NEED_INIT;
	if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
	retained++;
	*pctx = &primary;
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
	if (dev != 0 || retained == 0) return CUDA_ERROR_INVALID_DEVICE;
	drain_all();
	retained--;
	return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
	NEED_INIT;
	if (ctx != NULL && ctx != &primary) return CUDA_ERROR_INVALID_CONTEXT;
	current = ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
	NEED_CTX;
	pthread_mutex_lock(&lock);
	int active = ncaptures;
	pthread_mutex_unlock(&lock);
	if (active) {
		complain("cuCtxSynchronize while a stream is capturing");
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	drain_all();
	return faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

/* Memory. */

CUresult cuMemGetInfo(size_t *free, size_t *total) {
	NEED_CTX;
	*total = TOTAL_MEM;
	*free = *total - ((size_t)1 << 30);
	return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
	NEED_CTX;
	if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
	if (bytesize > ((size_t)1 << 40)) return CUDA_ERROR_OUT_OF_MEMORY;
	void *p = aligned_alloc(256, (bytesize + 255) & ~(size_t)255);
	if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
	memset(p, 0xA5, bytesize);
	alloc_add(p, bytesize, 0);
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr dptr) {
	NEED_CTX;
	drain_all(); /* cuMemFree waits for the device */
	if (!alloc_remove((void *)(uintptr_t)dptr, 0)) {
		complain("cuMemFree_v2(%#llx): not a device allocation", dptr);
		return CUDA_ERROR_INVALID_VALUE;
	}
	free((void *)(uintptr_t)dptr);
	return CUDA_SUCCESS;
}

CUresult cuMemAllocHost(void **pp, size_t bytesize) {
	NEED_CTX;
	if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
	*pp = aligned_alloc(4096, (bytesize + 4095) & ~(size_t)4095);
	if (!*pp) return CUDA_ERROR_OUT_OF_MEMORY;
	alloc_add(*pp, bytesize, 1);
	return CUDA_SUCCESS;
}

CUresult cuMemFreeHost(void *p) {
	NEED_CTX;
	drain_all();
	if (!alloc_remove(p, 1)) {
		complain("cuMemFreeHost(%p): not from cuMemAllocHost", p);
		return CUDA_ERROR_INVALID_VALUE;
	}
	free(p);
	return CUDA_SUCCESS;
}

/* A copy checks its device operands when it runs, too: a graph may be
 * replayed after its memory was freed. */
struct copy_op { void *dst; const void *src; size_t n; int dst_dev, src_dev; void *owned; };
static void run_copy(void *arg) {
	struct copy_op *c = arg;
	if ((c->dst_dev && !fake_device_range("copy", "destination", c->dst, c->n)) ||
	    (c->src_dev && !fake_device_range("copy", "source", c->src, c->n))) {
		fake_fault();
	} else {
		memmove(c->dst, c->src, c->n);
	}
	free(c->owned); /* a queued copy's snapshot of its pageable source */
	c->owned = NULL;
}

static CUresult copy(const char *call, CUstream s, void *dst, int dst_dev, const void *src, int src_dev, size_t n) {
	if (n == 0) return CUDA_SUCCESS;
	if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
	if (dst_dev && !fake_device_range(call, "destination", dst, n)) return CUDA_ERROR_INVALID_VALUE;
	if (src_dev && !fake_device_range(call, "source", src, n)) return CUDA_ERROR_INVALID_VALUE;
	if (capturing(s) && ((!dst_dev && !pinned_range(call, dst, n)) || (!src_dev && !pinned_range(call, src, n))))
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	struct copy_op c = { dst, src, n, dst_dev, src_dev, NULL };
	if (!async_mode || !s || capturing(s)) return fake_submit(s, run_copy, &c, sizeof c);
	/* Queued. CUDA stages a pageable source before returning, and returns
	 * from a copy into pageable memory once it is done. */
	if (!src_dev && !inside((uintptr_t)src, n, 1)) {
		c.owned = malloc(n);
		memcpy(c.owned, src, n);
		c.src = c.owned;
	}
	struct op_ref r = { s, enqueue(s, run_copy, &c, sizeof c, NULL, 0) };
	if (!dst_dev && !inside((uintptr_t)dst, n, 1)) drain(op_done, &r);
	return faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream) {
	NEED_CTX;
	return copy("cuMemcpyHtoDAsync_v2", hStream, (void *)(uintptr_t)dstDevice, 1, srcHost, 0, ByteCount);
}

CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
	NEED_CTX;
	return copy("cuMemcpyDtoHAsync_v2", hStream, dstHost, 0, (const void *)(uintptr_t)srcDevice, 1, ByteCount);
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
	NEED_CTX;
	return copy("cuMemcpyDtoDAsync_v2", hStream, (void *)(uintptr_t)dstDevice, 1, (const void *)(uintptr_t)srcDevice, 1, ByteCount);
}

struct memset_op { unsigned int *dst; unsigned int v; size_t n; };
static void run_memset(void *arg) {
	struct memset_op *m = arg;
	if (!fake_device_range("memset", "destination", m->dst, 4 * m->n)) {
		fake_fault();
		return;
	}
	for (size_t i = 0; i < m->n; i++) m->dst[i] = m->v;
}

CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
	NEED_CTX;
	if (dstDevice % 4) return CUDA_ERROR_INVALID_VALUE;
	if (!fake_device_range("cuMemsetD32Async", "destination", (void *)(uintptr_t)dstDevice, 4 * N)) return CUDA_ERROR_INVALID_VALUE;
	struct memset_op m = { (unsigned int *)(uintptr_t)dstDevice, ui, N };
	return fake_submit(hStream, run_memset, &m, sizeof m);
}

/* Streams and capture. */

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
	NEED_CTX;
	if (Flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE; /* what the bindings ask for */
	CUstream st = calloc(1, sizeof(struct CUstream_st));
	pthread_mutex_lock(&sched);
	st->next = live;
	live = st;
	pthread_mutex_unlock(&sched);
	*phStream = st;
	return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream hStream) {
	NEED_CTX;
	if (capturing(hStream)) {
		complain("cuStreamDestroy_v2 of a capturing stream");
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	if (async_mode) drain(stream_done, hStream); /* CUDA finishes it after the call returns */
	pthread_mutex_lock(&sched);
	for (CUstream *p = &live; *p; p = &(*p)->next)
		if (*p == hStream) { *p = hStream->next; break; }
	pthread_mutex_unlock(&sched);
	free(hStream->q);
	free(hStream);
	return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream hStream) {
	NEED_CTX;
	if (capturing(hStream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (async_mode && hStream) drain(stream_done, hStream);
	if (async_mode && !hStream) drain_all();
	return faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

static void add_member(struct capture *c, CUstream s) {
	if (c->nmembers == c->capmembers) {
		c->capmembers = c->capmembers ? 2 * c->capmembers : 8;
		c->members = realloc(c->members, c->capmembers * sizeof *c->members);
	}
	c->members[c->nmembers++] = s;
	s->capture = c;
}

static void add_dep(struct capture *c, CUstream from, long seq, CUstream to) {
	if (c->ndeps == c->capdeps) {
		c->capdeps = c->capdeps ? 2 * c->capdeps : 16;
		c->deps = realloc(c->deps, c->capdeps * sizeof *c->deps);
	}
	c->deps[c->ndeps++] = (struct dep){ from, seq, to, to->seq };
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
	NEED_CTX;
	if (!hStream || !hEvent || Flags != CU_EVENT_WAIT_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	struct capture *c = hEvent->cap_id ? capture_by_id(hEvent->cap_id) : NULL;
	if (hEvent->cap_id && !c) {
		complain("cuStreamWaitEvent on an event last recorded in a capture that has ended");
		r = CUDA_ERROR_CAPTURED_EVENT;
	} else if (c && hStream->capture && hStream->capture != c) {
		r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
	} else if (c) {
		if (!hStream->capture) add_member(c, hStream); /* a fork: the stream joins the capture */
		add_dep(c, hEvent->cap_stream, hEvent->cap_seq, hStream);
	} else if (hStream->capture) {
		complain("cuStreamWaitEvent: a capturing stream waits on an event recorded outside its capture");
		r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
	}
	int queue = r == CUDA_SUCCESS && !c && async_mode;
	pthread_mutex_unlock(&lock);
	if (queue) { /* waits for the event's latest record, as of now */
		pthread_mutex_lock(&sched);
		enqueue_locked(hStream, NULL, NULL, 0, hEvent, hEvent->enq_gen);
		pthread_mutex_unlock(&sched);
	}
	return r;
}

CUresult cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode) {
	NEED_CTX;
	if (mode != CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE; /* what the bindings ask for */
	pthread_mutex_lock(&lock);
	if (!hStream || hStream->capture || ncaptures == (int)(sizeof captures / sizeof captures[0])) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	struct capture *c = calloc(1, sizeof *c);
	c->id = next_capture++;
	c->graph = calloc(1, sizeof(struct CUgraph_st));
	c->origin = hStream;
	add_member(c, hStream);
	captures[ncaptures++] = c;
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

static void free_ops(struct op *ops, int n) {
	for (int i = 0; i < n; i++) free(ops[i].arg);
	free(ops);
}

/* joined reports whether every stream of c reaches the origin's end: its
 * last work is followed by an event some joined stream waited on. */
static int joined(struct capture *c) {
	char *ok = calloc(c->nmembers, 1);
	ok[0] = 1; /* the origin */
	for (int changed = 1; changed;) {
		changed = 0;
		for (int i = 1; i < c->nmembers; i++) {
			if (ok[i]) continue;
			for (int d = 0; d < c->ndeps && !ok[i]; d++) {
				const struct dep *e = &c->deps[d];
				if (e->from != c->members[i] || e->seq != c->members[i]->seq) continue;
				for (int j = 0; j < c->nmembers; j++)
					if (ok[j] && c->members[j] == e->to) { ok[i] = changed = 1; break; }
			}
		}
	}
	int all = 1;
	for (int i = 0; i < c->nmembers; i++) all &= ok[i];
	free(ok);
	return all;
}

static void add_edge(struct CUgraph_st *g, int from, int to) {
	if (g->nedges % 64 == 0) g->edges = realloc(g->edges, (g->nedges + 64) * sizeof *g->edges);
	g->edges[g->nedges++] = (struct edge){ from, to };
}

/* graph_edges sets c's graph's edges: each op after the previous op of its
 * stream, and, for each event wait, the first op the waiting stream
 * captured after the wait after the op the event was recorded behind. */
static void graph_edges(struct capture *c) {
	struct CUgraph_st *g = c->graph;
	for (int i = 0; i < g->n; i++)
		for (int j = i - 1; j >= 0; j--)
			if (g->ops[j].stream == g->ops[i].stream) {
				add_edge(g, j, i);
				break;
			}
	for (int d = 0; d < c->ndeps; d++) {
		const struct dep *e = &c->deps[d];
		int from = -1, to = -1;
		for (int i = 0; i < g->n; i++) {
			if (g->ops[i].stream == e->from && g->ops[i].seq == e->seq) from = i;
			if (to < 0 && g->ops[i].stream == e->to && g->ops[i].seq > e->to_seq) to = i;
		}
		if (from >= 0 && to >= 0) add_edge(g, from, to);
	}
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
	NEED_CTX;
	pthread_mutex_lock(&lock);
	struct capture *c = hStream ? hStream->capture : NULL;
	if (!c) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	if (c->origin != hStream) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
	}
	int ok = joined(c);
	for (int i = 0; i < c->nmembers; i++) c->members[i]->capture = NULL;
	for (int i = 0; i < ncaptures; i++)
		if (captures[i] == c) { captures[i] = captures[--ncaptures]; break; }
	pthread_mutex_unlock(&lock);
	CUresult r = CUDA_SUCCESS;
	if (ok) {
		graph_edges(c);
		*phGraph = c->graph;
	} else {
		complain("cuStreamEndCapture: a stream that joined the capture was not joined back");
		free_ops(c->graph->ops, c->graph->n);
		free(c->graph->edges);
		free(c->graph);
		*phGraph = NULL;
		r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
	}
	free(c->members);
	free(c->deps);
	free(c);
	return r;
}

CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
	NEED_CTX;
	if (nodes != NULL) return CUDA_ERROR_INVALID_VALUE; /* the bindings only count */
	*numNodes = hGraph->n;
	return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hGraph) {
	NEED_CTX;
	free_ops(hGraph->ops, hGraph->n);
	free(hGraph->edges);
	free(hGraph);
	return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
	NEED_CTX;
	if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
	struct CUgraphExec_st *x = calloc(1, sizeof *x);
	x->n = hGraph->n;
	x->ops = calloc(x->n ? x->n : 1, sizeof *x->ops);
	for (int i = 0; i < x->n; i++) {
		struct op o = hGraph->ops[i];
		x->ops[i] = (struct op){ o.fn, malloc(o.size ? o.size : 1), o.size, NULL, 0 };
		memcpy(x->ops[i].arg, o.arg, o.size);
	}
	x->nedges = hGraph->nedges;
	x->edges = malloc((x->nedges ? x->nedges : 1) * sizeof *x->edges);
	memcpy(x->edges, hGraph->edges, x->nedges * sizeof *x->edges);
	*phGraphExec = x;
	return CUDA_SUCCESS;
}

/* run_graph runs a graph's ops in capture order, or, with async streams
 * (newest first), in an order that keeps only the graph's edges: of the
 * ops whose predecessors have run, the one captured last, so that an op
 * that lacks a dependency on an earlier op of another stream runs before
 * it. */
static void run_graph(void *arg) {
	CUgraphExec x = *(CUgraphExec *)arg;
	if (async_mode != ASYNC_NEWEST) {
		for (int i = 0; i < x->n && !faulted; i++) x->ops[i].fn(x->ops[i].arg);
		return;
	}
	int *waiting = calloc(x->n ? x->n : 1, sizeof *waiting); /* predecessors not yet run; -1: ran */
	for (int e = 0; e < x->nedges; e++) waiting[x->edges[e].to]++;
	for (int done = 0; done < x->n && !faulted; done++) {
		int next = -1;
		for (int i = x->n - 1; i >= 0 && next < 0; i--)
			if (waiting[i] == 0) next = i;
		if (next < 0) break; /* a cycle: cannot come from a capture */
		x->ops[next].fn(x->ops[next].arg);
		waiting[next] = -1;
		for (int e = 0; e < x->nedges; e++)
			if (x->edges[e].from == next) waiting[x->edges[e].to]--;
	}
	free(waiting);
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
	NEED_CTX;
	if (capturing(hStream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	return fake_submit(hStream, run_graph, &hGraphExec, sizeof hGraphExec);
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
	NEED_CTX;
	drain_all(); /* queued launches run its ops */
	free_ops(hGraphExec->ops, hGraphExec->n);
	free(hGraphExec->edges);
	free(hGraphExec);
	return CUDA_SUCCESS;
}

/* Event operations. */

static double now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
	NEED_CTX;
	if (Flags & ~(unsigned)CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_VALUE;
	*phEvent = calloc(1, sizeof(struct CUevent_st));
	(*phEvent)->flags = Flags;
	return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent hEvent) {
	NEED_CTX;
	drain_all(); /* queued records and waits name it */
	free(hEvent);
	return CUDA_SUCCESS;
}

static void run_record(void *arg) {
	CUevent e = *(CUevent *)arg;
	e->recorded = 1;
	e->ms = now_ms();
}

/* A queued record: the event's gen-th. */
struct record_op { CUevent e; long gen; };
static void run_record_gen(void *arg) {
	struct record_op *r = arg;
	run_record(&r->e);
	if (r->gen > r->e->done_gen) r->e->done_gen = r->gen;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
	NEED_CTX;
	if (!hEvent) return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&lock);
	if (hStream && hStream->capture) { /* a point in the capture, not a node */
		hEvent->cap_id = hStream->capture->id;
		hEvent->cap_stream = hStream;
		hEvent->cap_seq = hStream->seq;
		pthread_mutex_unlock(&lock);
		return CUDA_SUCCESS;
	}
	hEvent->cap_id = 0;
	pthread_mutex_unlock(&lock);
	if (!async_mode) {
		run_record(&hEvent);
		return CUDA_SUCCESS;
	}
	if (!hStream) drain_all();
	pthread_mutex_lock(&sched);
	struct record_op r = { hEvent, ++hEvent->enq_gen };
	if (hStream)
		enqueue_locked(hStream, run_record_gen, &r, sizeof r, NULL, 0);
	else
		run_record_gen(&r);
	pthread_mutex_unlock(&sched);
	return CUDA_SUCCESS;
}

CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
	NEED_CTX;
	if (flags != CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE; /* what the bindings ask for */
	if (!capturing(hStream)) {
		complain("cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL) outside stream capture");
		return CUDA_ERROR_INVALID_VALUE; /* cuda.h: "invalid when used outside of capture" */
	}
	pthread_mutex_lock(&lock);
	hEvent->cap_id = 0;
	pthread_mutex_unlock(&lock);
	return fake_submit(hStream, run_record, &hEvent, sizeof hEvent);
}

/* captured reports an event whose last record was inside a capture, which
 * cannot be waited for or timed from the host. */
static int captured(CUevent e, const char *call) {
	pthread_mutex_lock(&lock);
	int c = e->cap_id != 0;
	pthread_mutex_unlock(&lock);
	if (c) complain("%s on an event last recorded in a capturing stream", call);
	return c;
}

CUresult cuEventSynchronize(CUevent hEvent) {
	NEED_CTX;
	if (captured(hEvent, "cuEventSynchronize")) return CUDA_ERROR_CAPTURED_EVENT;
	if (async_mode) drain(event_done, hEvent);
	return faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent hEvent) {
	NEED_CTX;
	if (captured(hEvent, "cuEventQuery")) return CUDA_ERROR_CAPTURED_EVENT;
	if (!async_mode) return hEvent->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
	drain(event_done, hEvent); /* a poll would wait forever on queued work */
	return faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
	NEED_CTX;
	if ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
	if (captured(hStart, "cuEventElapsedTime") || captured(hEnd, "cuEventElapsedTime")) return CUDA_ERROR_CAPTURED_EVENT;
	if (!hStart->recorded || !hEnd->recorded || !event_done(hStart) || !event_done(hEnd)) return CUDA_ERROR_NOT_READY;
	*pMilliseconds = (float)(hEnd->ms - hStart->ms);
	return CUDA_SUCCESS;
}

/* Modules and kernels. */

#define MAX_PARAMS 64

struct CUfunc_st {
	int saxpy;
	unsigned max_shared;
	char name[128];
	unsigned maxntid; /* threads per block the entry allows; 0: not declared */
	int nparams;
	unsigned char psize[MAX_PARAMS]; /* bytes of each parameter */
	const void *emu;                 /* the emulator's kernel; NULL: a no-op */
	struct CUfunc_st *next;
};
struct CUmod_st { char *ptx; struct CUfunc_st *funcs; };
static struct CUfunc_st saxpy_fn = { .saxpy = 1, .name = "saxpy" };

static void write_log(void *buf, void **size_slot, const char *msg) {
	size_t cap = (uintptr_t)*size_slot;
	size_t n = strlen(msg) + 1;
	if (n > cap) n = cap;
	memcpy(buf, msg, n);
	((char *)buf)[n - 1] = 0;
	*size_slot = (void *)(uintptr_t)n;
}

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options, void **optionValues) {
	NEED_CTX;
	const CUjit_option want[] = { CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
	if (numOptions != 4) return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < 4; i++)
		if (options[i] != want[i]) return CUDA_ERROR_INVALID_VALUE;
	if ((uintptr_t)optionValues[1] < 1024 || (uintptr_t)optionValues[3] < 1024) return CUDA_ERROR_INVALID_VALUE;
	const char *ptx = image;
	if (!memchr(ptx, 0, 8 << 20)) return CUDA_ERROR_INVALID_IMAGE; /* must be NUL-terminated, within 8 MiB */
	if (!strstr(ptx, ".version") || strstr(ptx, "bogus")) {
		write_log(optionValues[0], &optionValues[1], "");
		write_log(optionValues[2], &optionValues[3], "ptxas fake, line 6; error   : Unknown instruction 'bogus'\nptxas fatal   : Ptx assembly aborted due to errors\n");
		return CUDA_ERROR_INVALID_PTX;
	}
	write_log(optionValues[0], &optionValues[1], "ptxas info    : 0 bytes gmem");
	write_log(optionValues[2], &optionValues[3], "");
	*module = calloc(1, sizeof(struct CUmod_st));
	(*module)->ptx = strdup(ptx);
	return CUDA_SUCCESS;
}

/* parse_entry reads an entry's parameter sizes and .maxntid from the PTX
 * after ".entry NAME(": ".param .u64 x" is 8 bytes, ".param .align A .b8
 * x[N]" N bytes. */
static int parse_entry(struct CUfunc_st *f, const char *p) {
	const char *close = strchr(p, ')');
	if (!close) return 0;
	for (const char *q = strstr(p, ".param"); q && q < close; q = strstr(q + 1, ".param")) {
		if (f->nparams == MAX_PARAMS) return 0;
		const char *type = q + strlen(".param");
		while (*type == ' ' || *type == '\t') type++;
		unsigned size = 0;
		if (strncmp(type, ".align", 6) == 0) {
			const char *br = strchr(type, '[');
			if (!br || br > close) return 0;
			size = (unsigned)strtoul(br + 1, NULL, 10);
		} else if (type[0] == '.' && strchr("usbf", type[1])) {
			size = (unsigned)strtoul(type + 2, NULL, 10) / 8;
		}
		if (size == 0) return 0;
		f->psize[f->nparams++] = (unsigned char)size;
	}
	const char *body = strchr(close, '{');
	const char *m = strstr(close, ".maxntid");
	if (m && body && m < body) {
		unsigned x = 1, y = 1, z = 1;
		if (sscanf(m, ".maxntid %u, %u, %u", &x, &y, &z) < 1) return 0;
		f->maxntid = x * y * z;
	}
	return 1;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
	NEED_CTX;
	char entry[256];
	snprintf(entry, sizeof entry, ".entry %s(", name);
	const char *at = strstr(hmod->ptx, entry);
	if (!at) return CUDA_ERROR_NOT_FOUND;
	if (strcmp(name, "saxpy") == 0) {
		*hfunc = &saxpy_fn;
		return CUDA_SUCCESS;
	}
	if (!noop_kernels && !emu_launch) return CUDA_ERROR_NOT_FOUND;
	for (struct CUfunc_st *f = hmod->funcs; f; f = f->next)
		if (strcmp(f->name, name) == 0) { *hfunc = f; return CUDA_SUCCESS; }
	struct CUfunc_st *f = calloc(1, sizeof *f);
	snprintf(f->name, sizeof f->name, "%s", name);
	if (!parse_entry(f, at + strlen(entry))) {
		complain("cuModuleGetFunction(%s): cannot read the entry's parameters", name);
		free(f);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	if (emu_launch) {
		int n = 0;
		const unsigned char *sizes = NULL;
		f->emu = emu_find(name, &n, &sizes);
		if (!f->emu) {
			complain("cuModuleGetFunction(%s): the PTX has the entry, the kernel emulator does not (stale PTX?)", name);
			free(f);
			return CUDA_ERROR_NOT_FOUND;
		}
		int same = n == f->nparams;
		for (int i = 0; same && i < n; i++) same = sizes[i] == f->psize[i];
		if (!same) {
			complain("cuModuleGetFunction(%s): the PTX's parameters differ from the emulated kernel's (stale PTX?)", name);
			free(f);
			return CUDA_ERROR_INVALID_IMAGE;
		}
	}
	f->next = hmod->funcs;
	hmod->funcs = f;
	*hfunc = f;
	return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod) {
	NEED_CTX;
	drain_all(); /* queued launches name its functions */
	for (struct CUfunc_st *f = hmod->funcs, *next; f; f = next) {
		next = f->next;
		free(f);
	}
	free(hmod->ptx);
	free(hmod);
	return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
	NEED_CTX;
	if (attrib != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES || value < 0 || value > 232448) return CUDA_ERROR_INVALID_VALUE;
	hfunc->max_shared = value;
	return CUDA_SUCCESS;
}

/* saxpy(.u32 n, .f32 a, .u64 x, .u64 y): y[i] = a*x[i] + y[i]. */
struct saxpy_op { unsigned threads; unsigned n; float a; const float *x; float *y; };
static void run_saxpy(void *arg) {
	struct saxpy_op *k = arg;
	for (unsigned i = 0; i < k->threads && i < k->n; i++) k->y[i] = k->a * k->x[i] + k->y[i];
}

/* A no-op kernel keeps its function, for a debugger's sake. */
struct noop_op { CUfunction f; };
static void run_noop(void *arg) { (void)arg; }

/* An emulated launch carries its arguments' values, copied at the launch as
 * the driver copies them, 16-byte aligned each. */
struct emu_op {
	CUfunction f;
	unsigned grid[3], block[3];
	unsigned char args[MAX_PARAMS][16];
};
static void run_emu(void *arg) {
	struct emu_op *k = arg;
	void *params[MAX_PARAMS];
	char err[600];
	for (int i = 0; i < k->f->nparams; i++) params[i] = k->args[i];
	if (emu_launch(k->f->emu, k->grid, k->block, params, err, sizeof err) != 0) {
		complain("emulated kernel %s failed: %s", k->f->name, err);
		fake_fault();
	}
}

/* pointer_ok rejects a 64-bit argument that points into the span of the
 * allocations but into none of them: a device pointer gone astray. Values
 * outside the span are taken for integers. */
static int pointer_ok(uint64_t v) {
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < nallocs; i++) {
		if (allocs[i].base < lo) lo = allocs[i].base;
		if (allocs[i].base + allocs[i].size > hi) hi = allocs[i].base + allocs[i].size;
	}
	pthread_mutex_unlock(&lock);
	return v < lo || v > hi || inside((uintptr_t)v, 0, -1);
}

static CUresult launch_checked(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shared, CUstream s, void **params) {
	unsigned long long threads = (unsigned long long)bx * by * bz;
	if (gx > 0x7fffffffu || gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64 || threads > 1024) {
		complain("cuLaunchKernel(%s): grid (%u, %u, %u) block (%u, %u, %u) out of range", f->name, gx, gy, gz, bx, by, bz);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (f->maxntid && threads > f->maxntid) {
		complain("cuLaunchKernel(%s): %llu threads per block, the entry's .maxntid allows %u", f->name, threads, f->maxntid);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (shared > (f->max_shared > 48 * 1024 ? f->max_shared : 48 * 1024)) {
		complain("cuLaunchKernel(%s): %u bytes of dynamic shared memory", f->name, shared);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (f->nparams > 0 && !params) {
		complain("cuLaunchKernel(%s): kernelParams is NULL, the entry has %d parameters", f->name, f->nparams);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (int i = 0; i < f->nparams; i++) {
		if (!params[i]) {
			complain("cuLaunchKernel(%s): parameter %d is NULL", f->name, i);
			return CUDA_ERROR_INVALID_VALUE;
		}
		if (f->psize[i] == 8) {
			uint64_t v;
			memcpy(&v, params[i], 8);
			if (!pointer_ok(v)) {
				complain("cuLaunchKernel(%s): parameter %d = %#llx points into no allocation", f->name, i, (unsigned long long)v);
				return CUDA_ERROR_INVALID_VALUE;
			}
		}
	}
	if (!f->emu) {
		struct noop_op k = { f };
		return fake_submit(s, run_noop, &k, sizeof k);
	}
	struct emu_op *k = calloc(1, sizeof *k);
	if (!k) return CUDA_ERROR_OUT_OF_MEMORY;
	*k = (struct emu_op){ .f = f, .grid = { gx, gy, gz }, .block = { bx, by, bz } };
	for (int i = 0; i < f->nparams; i++) {
		if (f->psize[i] > sizeof k->args[i]) {
			complain("cuLaunchKernel(%s): parameter %d has %u bytes, the emulator takes up to %zu", f->name, i, f->psize[i], sizeof k->args[i]);
			free(k);
			return CUDA_ERROR_INVALID_VALUE;
		}
		memcpy(k->args[i], params[i], f->psize[i]);
	}
	CUresult r = fake_submit(s, run_emu, k, sizeof *k);
	free(k);
	return r;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra) {
	NEED_CTX;
	if (!f || extra != NULL) return CUDA_ERROR_INVALID_VALUE;
	if (!gridDimX || !gridDimY || !gridDimZ || !blockDimX || !blockDimY || !blockDimZ) return CUDA_ERROR_INVALID_VALUE;
	if (!f->saxpy)
		return launch_checked(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams);
	if (kernelParams == NULL) return CUDA_ERROR_INVALID_VALUE;
	if (blockDimX * blockDimY * blockDimZ > 1024 || sharedMemBytes > 48 * 1024 + f->max_shared) return CUDA_ERROR_INVALID_VALUE;
	struct saxpy_op k = {
		gridDimX * blockDimX * gridDimY * blockDimY * gridDimZ * blockDimZ,
		*(unsigned *)kernelParams[0],
		*(float *)kernelParams[1],
		*(const float **)kernelParams[2],
		*(float **)kernelParams[3],
	};
	return fake_submit(hStream, run_saxpy, &k, sizeof k);
}
