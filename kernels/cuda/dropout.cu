// Dropout with kernels/cpu's counter-based mask: element i of a call is
// kept iff u(key, offset+i) ≥ rate, u a 24-bit uniform hashed with
// SplitMix64's finalizer. The 24-bit uniform is exact in float, so the mask
// is bit for bit the CPU's.
#include "common.cuh"

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

// kept is kernels/cpu's kept; key = mix64(seed).
__device__ __forceinline__ bool kept(unsigned long long key, unsigned long long counter, float rate) {
	const unsigned long long h = mix64(key + counter * 0x9e3779b97f4a7c15ull);
	return (float)(unsigned)(h >> 40) * 0x1p-24f >= rate;
}

// dropout sets y[i] = x[i]·scale if the mask keeps counter c0 + i, else 0,
// for 0 < rate < 1 and scale = 1/(1−rate) (both from the caller, in float
// as the CPU computes them). c0 = offset + perIter·(*iter), the iteration
// read from device memory (so that a captured graph replays with the
// iteration of the replay), or offset alone when iter is null. y may alias
// x.
template <class T>
__device__ __forceinline__ void dropout_t(const T *x, T *y, long long n, float rate, float scale,
                                          unsigned long long key, unsigned long long offset, const long long *iter,
                                          unsigned long long perIter) {
	constexpr int N = VW<T>::N;
	if (iter) offset += perIter * (unsigned long long)*iter;
	const long long nv = (aligned16(x) && aligned16(y)) ? n / N : 0;
	for (long long i = gtid(); i < nv; i += gstride()) {
		Vec<T, N> a = ldv<T, N>(x + i * N), r;
		const unsigned long long c = offset + (unsigned long long)(i * N);
#pragma unroll
		for (int j = 0; j < N; j++) r.v[j] = fromF<T>(kept(key, c + j, rate) ? toF(a.v[j]) * scale : 0.0f);
		stv<T, N>(y + i * N, r);
	}
	for (long long i = nv * N + gtid(); i < n; i += gstride())
		y[i] = fromF<T>(kept(key, offset + (unsigned long long)i, rate) ? toF(x[i]) * scale : 0.0f);
}

KERNEL __launch_bounds__(THREADS) dropout_f32(const float *x, float *y, long long n, float rate, float scale,
                                                unsigned long long key, unsigned long long offset, const long long *iter,
                                                unsigned long long perIter) {
	dropout_t(x, y, n, rate, scale, key, offset, iter, perIter);
}
KERNEL __launch_bounds__(THREADS) dropout_bf16(const bf16 *x, bf16 *y, long long n, float rate, float scale,
                                                 unsigned long long key, unsigned long long offset, const long long *iter,
                                                 unsigned long long perIter) {
	dropout_t(x, y, n, rate, scale, key, offset, iter, perIter);
}
