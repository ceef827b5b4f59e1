/*
 * A fake libcuda.so.1 for TestFakeDriver: host memory stands in for device
 * memory, streams run work synchronously, and the one kernel it knows is
 * saxpy. Every entry point is defined with the prototype cuda.h declares, so
 * compiling this file checks the signatures the Go bindings assume, and the
 * test checks that arguments arrive where the header says.
 */
#define _GNU_SOURCE
#include "fake.h"

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct CUctx_st { int device; };
static struct CUctx_st primary;
static int initialized;
static int retained;
static __thread CUcontext current;

CUcontext fake_current_ctx(void) { return current; }

#define NEED_INIT do { if (!initialized) return CUDA_ERROR_NOT_INITIALIZED; } while (0)
#define NEED_CTX do { NEED_INIT; if (current != &primary || retained == 0) return CUDA_ERROR_INVALID_CONTEXT; } while (0)

/* Graphs and streams. */

struct op { fake_op_fn fn; void *arg; size_t size; };
struct CUgraph_st { struct op *ops; int n, cap; };
struct CUgraphExec_st { struct op *ops; int n; };
struct CUstream_st { struct CUgraph_st *capture; };

static void graph_append(struct CUgraph_st *g, fake_op_fn fn, const void *arg, size_t size) {
	if (g->n == g->cap) {
		g->cap = g->cap ? 2 * g->cap : 8;
		g->ops = realloc(g->ops, g->cap * sizeof *g->ops);
	}
	void *copy = malloc(size ? size : 1);
	memcpy(copy, arg, size);
	g->ops[g->n++] = (struct op){ fn, copy, size };
}

CUresult fake_submit(CUstream s, fake_op_fn fn, const void *arg, size_t size) {
	if (s && s->capture) {
		graph_append(s->capture, fn, arg, size);
		return CUDA_SUCCESS;
	}
	fn((void *)arg);
	return CUDA_SUCCESS;
}

/* Errors. */

static const struct { CUresult code; const char *name, *text; } errors[] = {
	{ CUDA_SUCCESS, "CUDA_SUCCESS", "no error" },
	{ CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
	{ CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
	{ CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
	{ CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
	{ CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed" },
	{ CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
	{ CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
	{ CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready" },
	{ CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing" },
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
	snprintf(name, len, "Fake H200");
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

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
	if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
	*bytes = (size_t)143771 << 20;
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
	retained--;
	return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
	NEED_INIT;
	if (ctx != NULL && ctx != &primary) return CUDA_ERROR_INVALID_CONTEXT;
	current = ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) { NEED_CTX; return CUDA_SUCCESS; }

/* Memory. */

CUresult cuMemGetInfo(size_t *free, size_t *total) {
	NEED_CTX;
	*total = (size_t)143771 << 20;
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
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr dptr) {
	NEED_CTX;
	if (dptr % 256) return CUDA_ERROR_INVALID_VALUE;
	free((void *)(uintptr_t)dptr);
	return CUDA_SUCCESS;
}

CUresult cuMemAllocHost(void **pp, size_t bytesize) {
	NEED_CTX;
	*pp = aligned_alloc(4096, (bytesize + 4095) & ~(size_t)4095);
	return *pp ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemFreeHost(void *p) { NEED_CTX; free(p); return CUDA_SUCCESS; }

struct copy_op { void *dst; const void *src; size_t n; };
static void run_copy(void *arg) { struct copy_op *c = arg; memmove(c->dst, c->src, c->n); }

CUresult cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream) {
	NEED_CTX;
	struct copy_op c = { (void *)(uintptr_t)dstDevice, srcHost, ByteCount };
	return fake_submit(hStream, run_copy, &c, sizeof c);
}

CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
	NEED_CTX;
	struct copy_op c = { dstHost, (const void *)(uintptr_t)srcDevice, ByteCount };
	return fake_submit(hStream, run_copy, &c, sizeof c);
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
	NEED_CTX;
	struct copy_op c = { (void *)(uintptr_t)dstDevice, (const void *)(uintptr_t)srcDevice, ByteCount };
	return fake_submit(hStream, run_copy, &c, sizeof c);
}

struct memset_op { unsigned int *dst; unsigned int v; size_t n; };
static void run_memset(void *arg) {
	struct memset_op *m = arg;
	for (size_t i = 0; i < m->n; i++) m->dst[i] = m->v;
}

CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
	NEED_CTX;
	if (dstDevice % 4) return CUDA_ERROR_INVALID_VALUE;
	struct memset_op m = { (unsigned int *)(uintptr_t)dstDevice, ui, N };
	return fake_submit(hStream, run_memset, &m, sizeof m);
}

/* Streams and capture. */

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
	NEED_CTX;
	if (Flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE; /* what the bindings ask for */
	*phStream = calloc(1, sizeof(struct CUstream_st));
	return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream hStream) { NEED_CTX; free(hStream); return CUDA_SUCCESS; }

CUresult cuStreamSynchronize(CUstream hStream) {
	NEED_CTX;
	return hStream && hStream->capture ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
	NEED_CTX;
	return hEvent && Flags == CU_EVENT_WAIT_DEFAULT ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode) {
	NEED_CTX;
	if (!hStream || hStream->capture) return CUDA_ERROR_ILLEGAL_STATE;
	if (mode != CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE; /* what the bindings ask for */
	hStream->capture = calloc(1, sizeof(struct CUgraph_st));
	return CUDA_SUCCESS;
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
	NEED_CTX;
	if (!hStream || !hStream->capture) return CUDA_ERROR_ILLEGAL_STATE;
	*phGraph = hStream->capture;
	hStream->capture = NULL;
	return CUDA_SUCCESS;
}

CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
	NEED_CTX;
	if (nodes != NULL) return CUDA_ERROR_INVALID_VALUE; /* the bindings only count */
	*numNodes = hGraph->n;
	return CUDA_SUCCESS;
}

static void free_ops(struct op *ops, int n) {
	for (int i = 0; i < n; i++) free(ops[i].arg);
	free(ops);
}

CUresult cuGraphDestroy(CUgraph hGraph) { NEED_CTX; free_ops(hGraph->ops, hGraph->n); free(hGraph); return CUDA_SUCCESS; }

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
	NEED_CTX;
	if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
	struct CUgraphExec_st *x = calloc(1, sizeof *x);
	x->n = hGraph->n;
	x->ops = calloc(x->n ? x->n : 1, sizeof *x->ops);
	for (int i = 0; i < x->n; i++) {
		struct op o = hGraph->ops[i];
		x->ops[i] = (struct op){ o.fn, malloc(o.size ? o.size : 1), o.size };
		memcpy(x->ops[i].arg, o.arg, o.size);
	}
	*phGraphExec = x;
	return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
	NEED_CTX;
	if (hStream && hStream->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	for (int i = 0; i < hGraphExec->n; i++) hGraphExec->ops[i].fn(hGraphExec->ops[i].arg);
	return CUDA_SUCCESS;
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) { NEED_CTX; free_ops(hGraphExec->ops, hGraphExec->n); free(hGraphExec); return CUDA_SUCCESS; }

/* Events. */

struct CUevent_st { unsigned int flags; int recorded; double ms; };

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

CUresult cuEventDestroy(CUevent hEvent) { NEED_CTX; free(hEvent); return CUDA_SUCCESS; }

static void run_record(void *arg) {
	CUevent e = *(CUevent *)arg;
	e->recorded = 1;
	e->ms = now_ms();
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
	NEED_CTX;
	if (hStream && hStream->capture) return CUDA_SUCCESS; /* a dependency, not a node */
	run_record(&hEvent);
	return CUDA_SUCCESS;
}

CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
	NEED_CTX;
	if (flags != CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE; /* what the bindings ask for */
	return fake_submit(hStream, run_record, &hEvent, sizeof hEvent);
}

CUresult cuEventSynchronize(CUevent hEvent) { NEED_CTX; return CUDA_SUCCESS; }
CUresult cuEventQuery(CUevent hEvent) { NEED_CTX; return hEvent->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY; }

CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
	NEED_CTX;
	if ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
	if (!hStart->recorded || !hEnd->recorded) return CUDA_ERROR_NOT_READY;
	*pMilliseconds = (float)(hEnd->ms - hStart->ms);
	return CUDA_SUCCESS;
}

/* Modules and the saxpy kernel. */

struct CUmod_st { char *ptx; };
struct CUfunc_st { int saxpy; unsigned max_shared; };
static struct CUfunc_st saxpy_fn = { 1, 0 };

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
	if (!memchr(ptx, 0, 1 << 20)) return CUDA_ERROR_INVALID_IMAGE; /* must be NUL-terminated */
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

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
	NEED_CTX;
	char entry[256];
	snprintf(entry, sizeof entry, ".entry %s(", name);
	if (!strstr(hmod->ptx, entry) || strcmp(name, "saxpy") != 0) return CUDA_ERROR_NOT_FOUND;
	*hfunc = &saxpy_fn;
	return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod) { NEED_CTX; free(hmod->ptx); free(hmod); return CUDA_SUCCESS; }

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

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra) {
	NEED_CTX;
	if (f != &saxpy_fn || extra != NULL || kernelParams == NULL) return CUDA_ERROR_INVALID_VALUE;
	if (!gridDimX || !gridDimY || !gridDimZ || !blockDimX || !blockDimY || !blockDimZ) return CUDA_ERROR_INVALID_VALUE;
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
