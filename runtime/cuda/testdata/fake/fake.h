/*
 * Shared by the fake libcuda, libcublas and libcublasLt that TestFakeDriver
 * builds: the stream model. Work submitted to a stream runs at once, or is
 * appended to the stream's graph while the stream is being captured.
 */
#ifndef FAKE_H
#define FAKE_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*fake_op_fn)(void *arg);

/* fake_submit runs fn(arg) now, or, when s is capturing, appends a copy of
 * the size bytes at arg to the captured graph. */
CUresult fake_submit(CUstream s, fake_op_fn fn, const void *arg, size_t size);

/* fake_current_ctx returns the calling thread's current context. */
CUcontext fake_current_ctx(void);

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

#endif
