/*
 * Shared by the fake libcuda, libcublas and libcublasLt: the stream model
 * and the memory checks. Work submitted to a stream runs at once (or, with
 * FLOWKIT_FAKE_CUDA_STREAMS=async, waits in the stream's queue until the
 * host waits for it), or is appended to the stream's graph while the
 * stream is being captured.
 */
#ifndef FAKE_H
#define FAKE_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*fake_op_fn)(void *arg);

/* fake_submit runs fn(arg) now, or queues it on s (async streams), or, when
 * s is capturing, appends it to the captured graph; queued and captured
 * ops run on a copy of the size bytes at arg. It returns the sticky error
 * a run may have set (see fake_fault). */
CUresult fake_submit(CUstream s, fake_op_fn fn, const void *arg, size_t size);

/* fake_current_ctx returns the calling thread's current context. */
CUcontext fake_current_ctx(void);

/* fake_device_range reports whether the n bytes at p lie inside one device
 * allocation (n == 0 always does). If not, it says so on stderr, naming
 * call and what. */
int fake_device_range(const char *call, const char *what, const void *p, size_t n);

/* fake_fault makes every later driver call fail with
 * CUDA_ERROR_ILLEGAL_ADDRESS, as a kernel's bad access does on a GPU. Run
 * functions call it when their operands are no longer valid (a graph
 * replayed after its memory was freed). */
void fake_fault(void);

/* fake_noop_kernels reports whether kernels are no-ops
 * (FLOWKIT_FAKE_CUDA_KERNELS=noop). Numbers do not matter then, so the
 * cuBLAS fakes read every element of their operands and write every
 * element of the result, but do not spend m·n·k operations on a product. */
int fake_noop_kernels(void);

/* fake_touch reads a byte of every 256 of the n bytes at p, and the last,
 * so that an operand not all mapped faults. */
static inline void fake_touch(const void *p, size_t n) {
	volatile unsigned char sink = 0;
	for (size_t i = 0; i < n; i += 256) sink ^= ((const unsigned char *)p)[i];
	if (n) sink ^= ((const unsigned char *)p)[n - 1];
	(void)sink;
}

static inline float fake_bf16_to_f32(uint16_t b) {
	union { uint32_t u; float f; } v = { .u = (uint32_t)b << 16 };
	return v.f;
}

static inline uint16_t fake_f32_to_bf16(float f) {
	union { uint32_t u; float f; } v = { .f = f };
	if ((v.u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)(v.u >> 16) | 0x40;
	v.u += 0x7fffu + ((v.u >> 16) & 1);
	return (uint16_t)(v.u >> 16);
}

/* Element access for CUDA_R_32F (0) and CUDA_R_16BF (14). */
static inline double fake_load(const void *p, int type, size_t i) {
	return type == 0 ? ((const float *)p)[i] : fake_bf16_to_f32(((const uint16_t *)p)[i]);
}

static inline void fake_store(void *p, int type, size_t i, double v) {
	if (type == 0)
		((float *)p)[i] = (float)v;
	else
		((uint16_t *)p)[i] = fake_f32_to_bf16((float)v);
}

/* fake_matrix_bytes is the extent in bytes of a column-major rows×cols
 * matrix with leading dimension ld, batch of them stride elements apart,
 * of elements of size bytes: 0 when empty. */
static inline size_t fake_matrix_bytes(uint64_t rows, uint64_t cols, int64_t ld, int64_t batch, int64_t stride, size_t size) {
	if (rows == 0 || cols == 0 || batch <= 0) return 0;
	return ((rows - 1) + (cols - 1) * (uint64_t)ld + (uint64_t)(batch - 1) * (uint64_t)stride + 1) * size;
}

#endif
