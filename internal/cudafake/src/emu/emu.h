/*
 * The CUDA device language on the host, for the emulator: included before
 * every kernel source (g++ -include emu.h) so that flowkit's .cu files
 * compile as C++ and their kernels run on fibers, one per CUDA thread (see
 * emu.cc). Only what flowkit's kernels use is here; a kernel that uses
 * more fails to compile, which says what to add.
 */
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda_bf16.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
/* One instance per kernel source and block: blocks run one at a time. */
#define __shared__ static

struct dim3 {
	unsigned x, y, z;
};
typedef dim3 uint3;

/* The calling fiber's coordinates, set by the scheduler before it switches
 * to a fiber. */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

/* emu_fail ends the launch with an error naming the kernel, block and
 * thread: for what a GPU would fault on or reject. */
void emu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Barriers and warp exchange, in emu.cc. */
void __syncthreads();
int __syncthreads_or(int pred);
unsigned __ballot_sync(unsigned mask, int pred);
uint64_t emu_shfl_xor(unsigned mask, uint64_t bits, int lane_mask);
void emu_syncwarp(unsigned mask);
/* emu_warp_gather gives every lane of the warp the bytes (at most 32) each
 * lane gave: lane l's at all + l·bytes. A warp barrier for the warp-wide
 * operation op, which ptx.h builds on it; the lanes of a warp must all be
 * at the same operation. */
void emu_warp_gather(const char *op, const void *mine, int bytes, void *all);
/* emu_lane is the calling thread's lane in its warp. */
int emu_lane();
/* cp.async (size 4, 8 or 16 bytes, the first `bytes` from src and zeros
 * after them), cp.async.commit_group and cp.async.wait_group n: the
 * calling thread's copies are done at the wait that needs them, or in the
 * reverse schedule when issued (see emu.cc). */
void emu_cp_async(void *dst, const void *src, int size, int bytes);
void emu_cp_async_commit();
void emu_cp_async_wait(int n);

/* A warp barrier: every lane of the warp waits for the others. */
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_syncwarp(mask); }

template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
	static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
	uint64_t b = 0;
	memcpy(&b, &v, sizeof v);
	b = emu_shfl_xor(mask, b, lane_mask);
	T r;
	memcpy(&r, &b, sizeof r);
	return r;
}

static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline float normcdff(float v) { return 0.5f * erfcf(-v * (float)M_SQRT1_2); }
static inline float rsqrtf(float v) { return 1.0f / sqrtf(v); }
/* CUDA's fast exp is the accurate one here (glibc declares an __expf it
 * does not export). */
#define __expf(v) expf(v)
// The host compiler contracts nothing without -mfma, so the round-to-nearest
// intrinsics, which keep nvcc from fusing, are the plain operations here.
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fsub_rn(float a, float b) { return a - b; }

template <class T> static inline T min(T a, T b) { return b < a ? b : a; }
template <class T> static inline T max(T a, T b) { return a < b ? b : a; }

#include "ptx.h"
