// Elementwise kernels: activations and their gradients, arithmetic, fill.
// Each thread handles 16-byte vectors when every pointer is 16-byte
// aligned, and single elements otherwise and for the tail.
#include "activation.cuh"
#include "common.cuh"

// map1 sets y[i] = f(x[i]) for i < n. y may alias x.
template <class T, class F> __device__ __forceinline__ void map1(const T *x, T *y, long long n, F f) {
	constexpr int N = VW<T>::N;
	const long long nv = (aligned16(x) && aligned16(y)) ? n / N : 0;
	for (long long i = gtid(); i < nv; i += gstride()) {
		Vec<T, N> a = ldv<T, N>(x + i * N), r;
#pragma unroll
		for (int j = 0; j < N; j++) r.v[j] = fromF<T>(f(toF(a.v[j])));
		stv<T, N>(y + i * N, r);
	}
	for (long long i = nv * N + gtid(); i < n; i += gstride()) y[i] = fromF<T>(f(toF(x[i])));
}

// map2 sets y[i] = f(a[i], b[i]) for i < n. y may alias a or b.
template <class T, class F>
__device__ __forceinline__ void map2(const T *a, const T *b, T *y, long long n, F f) {
	constexpr int N = VW<T>::N;
	const long long nv = (aligned16(a) && aligned16(b) && aligned16(y)) ? n / N : 0;
	for (long long i = gtid(); i < nv; i += gstride()) {
		Vec<T, N> u = ldv<T, N>(a + i * N), w = ldv<T, N>(b + i * N), r;
#pragma unroll
		for (int j = 0; j < N; j++) r.v[j] = fromF<T>(f(toF(u.v[j]), toF(w.v[j])));
		stv<T, N>(y + i * N, r);
	}
	for (long long i = nv * N + gtid(); i < n; i += gstride()) y[i] = fromF<T>(f(toF(a[i]), toF(b[i])));
}

#define UNARY(NAME, EXPR)                                                                                    \
	template <class T> __device__ __forceinline__ void NAME##_t(const T *x, T *y, long long n) {         \
		map1(x, y, n, [](float v) { return EXPR; });                                       \
	}                                                                                                    \
	KERNEL __launch_bounds__(THREADS) NAME##_f32(const float *x, float *y, long long n) { NAME##_t(x, y, n); } \
	KERNEL __launch_bounds__(THREADS) NAME##_bf16(const bf16 *x, bf16 *y, long long n) { NAME##_t(x, y, n); }

#define BINARY(NAME, EXPR)                                                                                   \
	template <class T> __device__ __forceinline__ void NAME##_t(const T *a, const T *b, T *y, long long n) { \
		map2(a, b, y, n, [](float u, float w) { return EXPR; });                           \
	}                                                                                                    \
	KERNEL __launch_bounds__(THREADS) NAME##_f32(const float *a, const float *b, float *y, long long n) { \
		NAME##_t(a, b, y, n);                                                                        \
	}                                                                                                    \
	KERNEL __launch_bounds__(THREADS) NAME##_bf16(const bf16 *a, const bf16 *b, bf16 *y, long long n) { \
		NAME##_t(a, b, y, n);                                                                        \
	}

// relu: y = x where x > 0, else +0.
UNARY(relu, positive(v) ? v : 0.0f)
// gelu: y = x·Φ(x).
UNARY(gelu, gelu(v))
// relu_bwd(x, dy, dx): dx = dy where x > 0, else +0.
BINARY(relu_bwd, positive(u) ? w : 0.0f)
// gelu_bwd(x, dy, dx): dx = dy·(Φ(x) + x·φ(x)).
BINARY(gelu_bwd, w * geluGrad(u))
// swiglu(gate, up, y): y = silu(gate)·up = gate·σ(gate)·up, LLaMA's gated
// MLP activation.
BINARY(swiglu, u / (1.0f + expf(-u)) * w)

// swiglu_bwd(gate, up, dy, dgate, dup): dgate = dy·up·σ(g)·(1 + g·(1 − σ(g)))
// and dup = dy·silu(g), g = gate: SwiGLU's gradients, in one pass over its
// inputs. dgate and dup may alias gate and up.
template <class T>
__device__ __forceinline__ void swiglu_bwd_t(const T *gate, const T *up, const T *dy, T *dgate, T *dup, long long n) {
	for (long long i = gtid(); i < n; i += gstride()) {
		const float g = toF(gate[i]), u = toF(up[i]), d = toF(dy[i]);
		const float s = 1.0f / (1.0f + expf(-g));
		dgate[i] = fromF<T>(d * u * s * (1.0f + g * (1.0f - s)));
		dup[i] = fromF<T>(d * g * s);
	}
}
KERNEL __launch_bounds__(THREADS)
    swiglu_bwd_f32(const float *gate, const float *up, const float *dy, float *dgate, float *dup, long long n) {
	swiglu_bwd_t(gate, up, dy, dgate, dup, n);
}
KERNEL __launch_bounds__(THREADS)
    swiglu_bwd_bf16(const bf16 *gate, const bf16 *up, const bf16 *dy, bf16 *dgate, bf16 *dup, long long n) {
	swiglu_bwd_t(gate, up, dy, dgate, dup, n);
}
// add: y = a + b.
BINARY(add, u + w)
// mul: y = a·b.
BINARY(mul, u * w)

// scale: y = alpha·x.
template <class T> __device__ __forceinline__ void scale_t(float alpha, const T *x, T *y, long long n) {
	map1(x, y, n, [alpha](float v) { return alpha * v; });
}
KERNEL __launch_bounds__(THREADS) scale_f32(float alpha, const float *x, float *y, long long n) {
	scale_t(alpha, x, y, n);
}
KERNEL __launch_bounds__(THREADS) scale_bf16(float alpha, const bf16 *x, bf16 *y, long long n) {
	scale_t(alpha, x, y, n);
}

// axpy: y += alpha·x.
template <class T> __device__ __forceinline__ void axpy_t(float alpha, const T *x, T *y, long long n) {
	map2(x, y, y, n, [alpha](float u, float w) { return w + alpha * u; });
}
KERNEL __launch_bounds__(THREADS) axpy_f32(float alpha, const float *x, float *y, long long n) {
	axpy_t(alpha, x, y, n);
}
KERNEL __launch_bounds__(THREADS) axpy_bf16(float alpha, const bf16 *x, bf16 *y, long long n) {
	axpy_t(alpha, x, y, n);
}

// fill: y = v (rounded once to T).
template <class T> __device__ __forceinline__ void fill_t(float v, T *y, long long n) {
	constexpr int N = VW<T>::N;
	const T t = fromF<T>(v);
	const long long nv = aligned16(y) ? n / N : 0;
	Vec<T, N> r;
#pragma unroll
	for (int j = 0; j < N; j++) r.v[j] = t;
	for (long long i = gtid(); i < nv; i += gstride()) stv<T, N>(y + i * N, r);
	for (long long i = nv * N + gtid(); i < n; i += gstride()) y[i] = t;
}
KERNEL __launch_bounds__(THREADS) fill_f32(float v, float *y, long long n) { fill_t(v, y, n); }
KERNEL __launch_bounds__(THREADS) fill_bf16(float v, bf16 *y, long long n) { fill_t(v, y, n); }
