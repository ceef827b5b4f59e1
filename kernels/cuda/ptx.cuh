// The sm_80 instructions flash.cu uses in inline PTX, each with its stand-in
// on the kernel emulator (internal/cudafake/src/emu: ptx.h, emu.cc):
//
// A warp's tensor-core products in registers: mma.sync m16n8k16 on bf16
// with fp32 accumulation, and ldmatrix to load its operands from shared
// memory, in the fragment layouts the PTX ISA specifies. Unlike WMMA's
// opaque fragments, the layouts are known, so a product's result can be
// masked, exponentiated and fed to the next product without leaving the
// registers. With g = lane/4 and t = lane%4, a lane holds:
//
//   A, 16×16 (row, k):  a[0] (g, 2t…2t+1), a[1] (g+8, 2t…), a[2] (g, 2t+8…),
//                       a[3] (g+8, 2t+8…), two bf16 a register, the lower
//                       column in the low half;
//   B, 16×8 (k, col):   b0 (2t…2t+1, g), b1 (2t+8…, g);
//   C, 16×8, fp32:      c[0], c[1] (g, 2t and 2t+1), c[2], c[3] (g+8, …).
//
// So C tiles n and n+1 of one row block are, packed two by two, the A
// fragment of the 16 columns they cover: what lets P = softmax(S) go
// straight into P V.
//
// And cp.async: copies from global to shared memory that run while the
// thread goes on, in groups a thread commits and later waits for.
#pragma once

#include "common.cuh"

// pack2 is two floats as two bf16 in a register, lo in the low half.
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
	const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *reinterpret_cast<const uint32_t *>(&v);
#else
	const bf16 l = __float2bfloat16_rn(lo), h = __float2bfloat16_rn(hi);
	return (uint32_t)l.x | (uint32_t)h.x << 16;
#endif
}

// mma16816 adds A·B to d: A (a), B (b0, b1) as above.
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__)
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
	             "{%0, %1, %2, %3};\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
	const uint32_t b[2] = {b0, b1};
	const float c[4] = {d[0], d[1], d[2], d[3]};
	emu_mma_m16n8k16_bf16(d, a, b, c);
#endif
}

// ldsm4 is ldmatrix .x4 (with trans, .trans): the lane gives row p (16
// bytes of shared memory, 16-byte aligned) of 8×8 matrix lane/8 and gets
// register i from matrix i.
template <bool trans> __device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const bf16 *p) {
#if defined(__CUDA_ARCH__)
	const unsigned s = (unsigned)__cvta_generic_to_shared(p);
	if (trans) {
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		             : "r"(s)
		             : "memory");
	} else {
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		             : "r"(s)
		             : "memory");
	}
#else
	emu_ldmatrix_x4(r, p, trans);
#endif
}

// The loads of a warp's operands from row-major bf16 tiles in shared
// memory (row stride ld elements, a multiple of 8), p at the block's
// first element:
//
// ldA: the A fragment of the 16×16 block at p.
__device__ __forceinline__ void ldA(uint32_t (&a)[4], const bf16 *p, int ld) {
	const int l = threadIdx.x & 31;
	ldsm4<false>(a, p + (l & 15) * ld + (l >> 4) * 8);
}

// ldBt: B fragments of two 8-column tiles from a tile stored transposed,
// [col][k], 16 columns by 16 k at p (K for S = Q Kᵀ): b[0], b[1] for
// columns 0…7, b[2], b[3] for 8…15.
__device__ __forceinline__ void ldBt(uint32_t (&b)[4], const bf16 *p, int ld) {
	const int l = threadIdx.x & 31;
	ldsm4<false>(b, p + ((l & 7) + (l >> 4) * 8) * ld + ((l >> 3) & 1) * 8);
}

// ldB: the same from a tile stored [k][col], 16 k by 16 columns at p (V
// for O = P V).
__device__ __forceinline__ void ldB(uint32_t (&b)[4], const bf16 *p, int ld) {
	const int l = threadIdx.x & 31;
	ldsm4<true>(b, p + (l & 15) * ld + (l >> 4) * 8);
}

// cpAsync16 starts copying 16 bytes from src (global memory) to dst (shared
// memory), both 16-byte aligned, or zeros to dst if !valid (src is not
// read then, but must be a valid address).
__device__ __forceinline__ void cpAsync16(void *dst, const void *src, bool valid) {
#if defined(__CUDA_ARCH__)
	const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(__cvta_generic_to_global(src)), "r"(valid ? 16 : 0)
	             : "memory");
#else
	emu_cp_async(dst, src, 16, valid ? 16 : 0);
#endif
}

// cpAsyncCommit closes the thread's group of copies started since the last.
__device__ __forceinline__ void cpAsyncCommit() {
#if defined(__CUDA_ARCH__)
	asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
	emu_cp_async_commit();
#endif
}

// cpAsyncWait waits until at most N of the thread's committed groups are
// still copying; other threads' copies need a barrier after it.
template <int N> __device__ __forceinline__ void cpAsyncWait() {
#if defined(__CUDA_ARCH__)
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#else
	emu_cp_async_wait(N);
#endif
}
