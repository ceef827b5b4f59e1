// Optimizer updates, in place, with kernels/cpu's (PyTorch's) semantics:
// weight decay is added to the gradient (g + wd·w). Weights, gradients and
// states share one dtype; the arithmetic is float.
#include "common.cuh"

// upd visits every element of the n-element arrays ps[0..K) (all of one
// dtype), as vectors when all are 16-byte aligned: f(float (&v)[K]) updates
// the values in place, and those of the arrays in the bit mask STORE are
// stored back.
template <unsigned STORE, class T, int K, class F>
__device__ __forceinline__ void upd(T *const (&ps)[K], long long n, F f) {
	constexpr int N = VW<T>::N;
	bool al = true;
#pragma unroll
	for (int a = 0; a < K; a++) al = al && aligned16(ps[a]);
	const long long nv = al ? n / N : 0;
	for (long long i = gtid(); i < nv; i += gstride()) {
		Vec<T, N> x[K];
#pragma unroll
		for (int a = 0; a < K; a++) x[a] = ldv<T, N>(ps[a] + i * N);
#pragma unroll
		for (int j = 0; j < N; j++) {
			float v[K];
#pragma unroll
			for (int a = 0; a < K; a++) v[a] = toF(x[a].v[j]);
			f(v);
#pragma unroll
			for (int a = 0; a < K; a++) x[a].v[j] = fromF<T>(v[a]);
		}
#pragma unroll
		for (int a = 0; a < K; a++)
			if (STORE >> a & 1) stv<T, N>(ps[a] + i * N, x[a]);
	}
	for (long long i = nv * N + gtid(); i < n; i += gstride()) {
		float v[K];
#pragma unroll
		for (int a = 0; a < K; a++) v[a] = toF(ps[a][i]);
		f(v);
#pragma unroll
		for (int a = 0; a < K; a++)
			if (STORE >> a & 1) ps[a][i] = fromF<T>(v[a]);
	}
}

// sgd: w −= lr·(g + wd·w).
template <class T> __device__ __forceinline__ void sgd_t(T *w, T *g, long long n, float lr, float wd) {
	T *const ps[2] = {w, g};
	upd<1>(ps, n, [=](float(&v)[2]) { v[0] = v[0] - lr * (v[1] + wd * v[0]); });
}
KERNEL __launch_bounds__(THREADS) sgd_f32(float *w, const float *g, long long n, float lr, float wd) {
	sgd_t(w, const_cast<float *>(g), n, lr, wd);
}
KERNEL __launch_bounds__(THREADS) sgd_bf16(bf16 *w, const bf16 *g, long long n, float lr, float wd) {
	sgd_t(w, const_cast<bf16 *>(g), n, lr, wd);
}

// momentum: v = μ·v + g + wd·w; w −= lr·v.
template <class T>
__device__ __forceinline__ void momentum_t(T *w, T *g, T *v, long long n, float lr, float mu, float wd) {
	T *const ps[3] = {w, g, v};
	upd<5>(ps, n, [=](float(&x)[3]) {
		const float vi = mu * x[2] + x[1] + wd * x[0];
		x[2] = vi;
		x[0] = x[0] - lr * vi;
	});
}
KERNEL __launch_bounds__(THREADS) momentum_f32(float *w, const float *g, float *v, long long n, float lr, float mu, float wd) {
	momentum_t(w, const_cast<float *>(g), v, n, lr, mu, wd);
}
KERNEL __launch_bounds__(THREADS) momentum_bf16(bf16 *w, const bf16 *g, bf16 *v, long long n, float lr, float mu, float wd) {
	momentum_t(w, const_cast<bf16 *>(g), v, n, lr, mu, wd);
}

// adam: d = g + wd·w; m = β1·m + (1−β1)·d; v = β2·v + (1−β2)·d²;
// w −= step·m/(√v·invSqrtBC2 + eps), with step = lr/(1−β1^t) and invSqrtBC2 =
// 1/√(1−β2^t) for step number t = *iter + 1 (the iteration, counted from 0,
// read from device memory so that a captured graph replays correctly),
// computed in double and rounded as kernels/cpu does; omb1 = 1−β1 and
// omb2 = 1−β2 are rounded to float by the caller likewise.
template <class T>
__device__ __forceinline__ void adam_t(T *w, T *g, T *m, T *v, long long n, float lr, float b1, float omb1, float b2,
                                       float omb2, float eps, float wd, const long long *iter) {
	const double t = (double)(*iter + 1);
	const float step = (float)((double)lr / (1.0 - pow((double)b1, t)));
	const float invSqrtBC2 = (float)(1.0 / sqrt(1.0 - pow((double)b2, t)));
	T *const ps[4] = {w, g, m, v};
	upd<13>(ps, n, [=](float(&x)[4]) {
		const float d = x[1] + wd * x[0];
		const float mi = b1 * x[2] + omb1 * d;
		const float vi = b2 * x[3] + omb2 * d * d;
		x[2] = mi;
		x[3] = vi;
		x[0] = x[0] - step * mi / (sqrtf(vi) * invSqrtBC2 + eps);
	});
}
KERNEL __launch_bounds__(THREADS) adam_f32(float *w, const float *g, float *m, float *v, long long n, float lr, float b1,
                                             float omb1, float b2, float omb2, float eps, float wd, const long long *iter) {
	adam_t(w, const_cast<float *>(g), m, v, n, lr, b1, omb1, b2, omb2, eps, wd, iter);
}
KERNEL __launch_bounds__(THREADS) adam_bf16(bf16 *w, const bf16 *g, bf16 *m, bf16 *v, long long n, float lr, float b1,
                                              float omb1, float b2, float omb2, float eps, float wd, const long long *iter) {
	adam_t(w, const_cast<bf16 *>(g), m, v, n, lr, b1, omb1, b2, omb2, eps, wd, iter);
}
