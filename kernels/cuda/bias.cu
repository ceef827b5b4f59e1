// BiasAdd: y[o,j,i] = x[o,j,i] + b[j] over x viewed as [outer, c, inner].
// BiasAct: y = act(x + b), and its gradient dx = dy·act′(x + b), x + b
// summed in float and not rounded to T in between. (BiasGrad is a column
// sum: reduce.cu.)
#include "activation.cuh"
#include "common.cuh"

// bias_map sets out = f(x + b[j], dy) element by element over x viewed as
// [outer, c, inner], reading dy only when Dy (the gradients; f's second
// argument is 0 otherwise). The total size outer·c·inner is below 2³¹
// (checked by the caller). Three layouts: inner = 1 with c a multiple of
// the vector width (a vector of x meets a vector of b); inner a multiple of
// the vector width (a vector of x meets one b[j]); anything else, element
// by element. out may alias x or dy.
template <bool Dy, class T, class F>
__device__ __forceinline__ void bias_map(const T *x, const T *b, const T *dy, T *out, int outer, int c, int inner, F f) {
	constexpr int N = VW<T>::N;
	const unsigned n = (unsigned)outer * (unsigned)c * (unsigned)inner;
	const bool al = aligned16(x) && aligned16(out) && (!Dy || aligned16(dy));
	if (al && inner == 1 && c % N == 0 && aligned16(b)) {
		for (long long i = gtid(); i < n / N; i += gstride()) {
			const unsigned e = (unsigned)i * N;
			Vec<T, N> a = ldv<T, N>(x + e), bb = ldv<T, N>(b + e % (unsigned)c), d, r;
			if constexpr (Dy) d = ldv<T, N>(dy + e);
#pragma unroll
			for (int k = 0; k < N; k++) r.v[k] = fromF<T>(f(toF(a.v[k]) + toF(bb.v[k]), Dy ? toF(d.v[k]) : 0.0f));
			stv<T, N>(out + e, r);
		}
		return;
	}
	if (al && inner % N == 0) {
		for (long long i = gtid(); i < n / N; i += gstride()) {
			const unsigned e = (unsigned)i * N;
			const float bj = toF(b[(e / (unsigned)inner) % (unsigned)c]);
			Vec<T, N> a = ldv<T, N>(x + e), d, r;
			if constexpr (Dy) d = ldv<T, N>(dy + e);
#pragma unroll
			for (int k = 0; k < N; k++) r.v[k] = fromF<T>(f(toF(a.v[k]) + bj, Dy ? toF(d.v[k]) : 0.0f));
			stv<T, N>(out + e, r);
		}
		return;
	}
	for (long long i = gtid(); i < n; i += gstride()) {
		const unsigned e = (unsigned)i;
		out[e] = fromF<T>(f(toF(x[e]) + toF(b[(e / (unsigned)inner) % (unsigned)c]), Dy ? toF(dy[e]) : 0.0f));
	}
}

template <class T> __device__ __forceinline__ void bias_add_t(const T *x, const T *b, T *y, int outer, int c, int inner) {
	bias_map<false>(x, b, (const T *)nullptr, y, outer, c, inner, [](float z, float) { return z; });
}

KERNEL __launch_bounds__(THREADS) bias_add_f32(const float *x, const float *b, float *y, int outer, int c, int inner) {
	bias_add_t(x, b, y, outer, c, inner);
}
KERNEL __launch_bounds__(THREADS) bias_add_bf16(const bf16 *x, const bf16 *b, bf16 *y, int outer, int c, int inner) {
	bias_add_t(x, b, y, outer, c, inner);
}

// BIAS_ACT defines bias_act_ACT_T(x, b, y, outer, c, inner), y = FWD, and
// bias_act_bwd_ACT_T(x, b, dy, dx, outer, c, inner), dx = BWD, with z = x +
// b and d = dy: the expressions of elementwise.cu's ACT and ACT_bwd, so that
// in f32 they compute bit for bit what BiasAdd followed by them computes.
#define BIAS_ACT(ACT, FWD, BWD)                                                                              \
	template <class T>                                                                                   \
	__device__ __forceinline__ void bias_act_##ACT##_t(const T *x, const T *b, T *y, int outer, int c, int inner) { \
		bias_map<false>(x, b, (const T *)nullptr, y, outer, c, inner, [](float z, float) { return FWD; }); \
	}                                                                                                    \
	template <class T>                                                                                   \
	__device__ __forceinline__ void bias_act_bwd_##ACT##_t(const T *x, const T *b, const T *dy, T *dx, int outer, int c, \
							       int inner) {                                  \
		bias_map<true>(x, b, dy, dx, outer, c, inner, [](float z, float d) { return BWD; });         \
	}                                                                                                    \
	KERNEL __launch_bounds__(THREADS)                                                                    \
	    bias_act_##ACT##_f32(const float *x, const float *b, float *y, int outer, int c, int inner) {    \
		bias_act_##ACT##_t(x, b, y, outer, c, inner);                                                \
	}                                                                                                    \
	KERNEL __launch_bounds__(THREADS)                                                                    \
	    bias_act_##ACT##_bf16(const bf16 *x, const bf16 *b, bf16 *y, int outer, int c, int inner) {      \
		bias_act_##ACT##_t(x, b, y, outer, c, inner);                                                \
	}                                                                                                    \
	KERNEL __launch_bounds__(THREADS) bias_act_bwd_##ACT##_f32(const float *x, const float *b, const float *dy, \
								   float *dx, int outer, int c, int inner) { \
		bias_act_bwd_##ACT##_t(x, b, dy, dx, outer, c, inner);                                       \
	}                                                                                                    \
	KERNEL __launch_bounds__(THREADS) bias_act_bwd_##ACT##_bf16(const bf16 *x, const bf16 *b, const bf16 *dy, \
								    bf16 *dx, int outer, int c, int inner) { \
		bias_act_bwd_##ACT##_t(x, b, dy, dx, outer, c, inner);                                       \
	}

// relu: y = z where z > 0, else +0; dx = d there, else +0.
BIAS_ACT(relu, positive(z) ? z : 0.0f, positive(z) ? d : 0.0f)
// gelu: y = z·Φ(z); dx = d·(Φ(z) + z·φ(z)).
BIAS_ACT(gelu, gelu(z), d * geluGrad(z))
