// BiasAdd: y[o,j,i] = x[o,j,i] + b[j] over x viewed as [outer, c, inner].
// (BiasGrad is a column sum: reduce.cu.)
#include "common.cuh"

// bias_add's total size outer·c·inner is below 2³¹ (checked by the caller).
// Three layouts: inner = 1 with c a multiple of the vector width (a vector
// of x meets a vector of b); inner a multiple of the vector width (a vector
// of x meets one b[j]); anything else, element by element. y may alias x.
template <class T>
__device__ __forceinline__ void bias_add_t(const T *x, const T *b, T *y, int outer, int c, int inner) {
	constexpr int N = VW<T>::N;
	const unsigned n = (unsigned)outer * (unsigned)c * (unsigned)inner;
	const bool al = aligned16(x) && aligned16(y);
	if (al && inner == 1 && c % N == 0 && aligned16(b)) {
		for (long long i = gtid(); i < n / N; i += gstride()) {
			const unsigned e = (unsigned)i * N;
			Vec<T, N> a = ldv<T, N>(x + e), bb = ldv<T, N>(b + e % (unsigned)c), r;
#pragma unroll
			for (int k = 0; k < N; k++) r.v[k] = fromF<T>(toF(a.v[k]) + toF(bb.v[k]));
			stv<T, N>(y + e, r);
		}
		return;
	}
	if (al && inner % N == 0) {
		for (long long i = gtid(); i < n / N; i += gstride()) {
			const unsigned e = (unsigned)i * N;
			const float bj = toF(b[(e / (unsigned)inner) % (unsigned)c]);
			Vec<T, N> a = ldv<T, N>(x + e), r;
#pragma unroll
			for (int k = 0; k < N; k++) r.v[k] = fromF<T>(toF(a.v[k]) + bj);
			stv<T, N>(y + e, r);
		}
		return;
	}
	for (long long i = gtid(); i < n; i += gstride()) {
		const unsigned e = (unsigned)i;
		y[e] = fromF<T>(toF(x[e]) + toF(b[(e / (unsigned)inner) % (unsigned)c]));
	}
}

KERNEL __launch_bounds__(THREADS) bias_add_f32(const float *x, const float *b, float *y, int outer, int c, int inner) {
	bias_add_t(x, b, y, outer, c, inner);
}
KERNEL __launch_bounds__(THREADS) bias_add_bf16(const bf16 *x, const bf16 *b, bf16 *y, int outer, int c, int inner) {
	bias_add_t(x, b, y, outer, c, inner);
}
