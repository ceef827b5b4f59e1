// Casts between float32 and bfloat16 (round to nearest even, NaN kept
// NaN), eight elements a thread when both pointers are 16-byte aligned.
#include "common.cuh"

template <class A, class B> __device__ __forceinline__ void cast_t(const A *x, B *y, long long n) {
	constexpr int N = 8;
	const long long nv = (aligned16(x) && aligned16(y)) ? n / N : 0;
	for (long long i = gtid(); i < nv; i += gstride()) {
		Vec<A, N> a = ldv<A, N>(x + i * N);
		Vec<B, N> r;
#pragma unroll
		for (int j = 0; j < N; j++) r.v[j] = fromF<B>(toF(a.v[j]));
		stv<B, N>(y + i * N, r);
	}
	for (long long i = nv * N + gtid(); i < n; i += gstride()) y[i] = fromF<B>(toF(x[i]));
}

KERNEL __launch_bounds__(THREADS) cast_f32_bf16(const float *x, bf16 *y, long long n) { cast_t(x, y, n); }
KERNEL __launch_bounds__(THREADS) cast_bf16_f32(const bf16 *x, float *y, long long n) { cast_t(x, y, n); }
