/*
 * Host stand-in for CUDA's <mma.h>, for kernels compiled by the emulator
 * (see emu.h): the warp matrix operations (nvcuda::wmma) on 16×16×16 tiles.
 * On a GPU a fragment is spread over the 32 lanes of a warp in a layout
 * CUDA leaves unspecified; here every lane holds the whole tile, and every
 * operation is done by each lane on its own copy, which gives each the same
 * values. Code that stays inside the API (loads, products, fills, stores,
 * and element-wise operations over x[0 … num_elements)) computes what it
 * computes on a GPU; code that reads a fragment's elements as if it knew
 * the layout is wrong on a GPU and not caught here. A store writes only the
 * lane's share of the tile (elements e with e mod 32 = lane), so that a lane
 * reading what the store wrote before its warp has passed a barrier (a
 * __syncwarp) reads what a GPU could give it: the old values. Each operation is a warp
 * barrier, as the real ones are collective: a lane that skips one
 * deadlocks. A load or store from memory that is not 256-bit aligned, or
 * with a leading dimension that is not a multiple of 16 bytes, fails the
 * launch, as CUDA requires both. Products are summed in fp32 in k order (a
 * GPU's tensor cores round in their own order).
 */
#pragma once

#include <type_traits>

#include "cuda_bf16.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
	static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 fragments only");
	enum { num_elements = 256 };
	T x[256]; /* row-major, the tile's element (r, c) at x[16r + c] */
};

/* check fails the launch where CUDA's requirements on a fragment's memory
 * do not hold. */
template <class T> inline void check(const void *p, unsigned ldm, const char *op) {
	if ((uintptr_t)p % 32) emu_fail("wmma::%s: address %p is not 256-bit aligned", op, p);
	if (ldm % (16 / sizeof(T))) emu_fail("wmma::%s: ldm %u is not a multiple of %d elements (16 bytes)", op, ldm, (int)(16 / sizeof(T)));
}

static inline float emu_f(float v) { return v; }
static inline float emu_f(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class Use, class T, class Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm) {
	__syncwarp(0xffffffffu);
	check<T>(p, ldm, "load_matrix_sync");
	const bool col = std::is_same<Layout, col_major>::value;
	for (int r = 0; r < 16; r++)
		for (int c = 0; c < 16; c++) f.x[16 * r + c] = col ? p[c * ldm + r] : p[r * ldm + c];
}

template <class T> inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T> &f, const T *p, unsigned ldm, layout_t l) {
	__syncwarp(0xffffffffu);
	check<T>(p, ldm, "load_matrix_sync");
	for (int r = 0; r < 16; r++)
		for (int c = 0; c < 16; c++) f.x[16 * r + c] = l == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
}

template <class T> inline void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, 16, T> &f, unsigned ldm, layout_t l) {
	__syncwarp(0xffffffffu);
	check<T>(p, ldm, "store_matrix_sync");
	for (int e = threadIdx.x % 32; e < 256; e += 32) {
		const int r = e / 16, c = e % 16;
		(l == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[e];
	}
}

template <class Use, class T, class Layout, class V> inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, const V &v) {
	for (int i = 0; i < 256; i++) f.x[i] = v;
}

template <class TA, class LA, class TB, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, TA, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, TB, LB> &b, const fragment<accumulator, 16, 16, 16, float> &c) {
	__syncwarp(0xffffffffu);
	float out[256];
	for (int r = 0; r < 16; r++)
		for (int n = 0; n < 16; n++) {
			float s = c.x[16 * r + n];
			for (int k = 0; k < 16; k++) s += emu_f(a.x[16 * r + k]) * emu_f(b.x[16 * k + n]);
			out[16 * r + n] = s;
		}
	for (int i = 0; i < 256; i++) d.x[i] = out[i];
}

} // namespace wmma
} // namespace nvcuda
