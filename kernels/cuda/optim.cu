// Optimizer updates, in place, with kernels/cpu's (PyTorch's) semantics:
// weight decay is added to the gradient (g + wd·w), or, for AdamW, the
// weights are first scaled by 1 − lr·wd. Weights, gradients and states
// share one dtype; the arithmetic is float.
//
// The learning rate is lr, or, where rates is not null, rates[*iter %
// nrates] for the iteration number at iter (int64, counted from 0) in
// device memory: a captured CUDA graph keeps its arguments, so a schedule's
// rates are read from a table that the host fills as the replays go.
#include "common.cuh"

__device__ __forceinline__ float rate_at(float lr, const float *rates, long long nrates, const long long *iter) {
	return rates ? rates[*iter % nrates] : lr;
}

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
KERNEL __launch_bounds__(THREADS) sgd_f32(float *w, const float *g, long long n, float lr, const float *rates,
                                            long long nrates, const long long *iter, float wd) {
	sgd_t(w, const_cast<float *>(g), n, rate_at(lr, rates, nrates, iter), wd);
}
KERNEL __launch_bounds__(THREADS) sgd_bf16(bf16 *w, const bf16 *g, long long n, float lr, const float *rates,
                                             long long nrates, const long long *iter, float wd) {
	sgd_t(w, const_cast<bf16 *>(g), n, rate_at(lr, rates, nrates, iter), wd);
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
KERNEL __launch_bounds__(THREADS) momentum_f32(float *w, const float *g, float *v, long long n, float lr,
                                                 const float *rates, long long nrates, const long long *iter, float mu,
                                                 float wd) {
	momentum_t(w, const_cast<float *>(g), v, n, rate_at(lr, rates, nrates, iter), mu, wd);
}
KERNEL __launch_bounds__(THREADS) momentum_bf16(bf16 *w, const bf16 *g, bf16 *v, long long n, float lr,
                                                  const float *rates, long long nrates, const long long *iter, float mu,
                                                  float wd) {
	momentum_t(w, const_cast<bf16 *>(g), v, n, rate_at(lr, rates, nrates, iter), mu, wd);
}

// adam: with w' = decay·w, d = g + l2·w'; m = β1·m + (1−β1)·d; v = β2·v +
// (1−β2)·d²; w = w' − step·m/(√v·invSqrtBC2 + eps), with step = lr/(1−β1^t)
// and invSqrtBC2 = 1/√(1−β2^t) for step number t = *iter + 1 (the
// iteration, counted from 0, read from device memory so that a captured
// graph replays correctly), computed in double and rounded as kernels/cpu
// does; omb1 = 1−β1 and omb2 = 1−β2 are rounded to float by the caller
// likewise. decay = 1 − lr·wdw (AdamW's decoupled decay; 1 when wdw = 0,
// which leaves w's bits), rounded as kernels/cpu rounds it: the explicit
// roundings keep nvcc from fusing its products into additions.
template <class T>
__device__ __forceinline__ void adam_t(T *w, T *g, T *m, T *v, long long n, float lr, float b1, float omb1, float b2,
                                       float omb2, float eps, float l2, float wdw, const long long *iter) {
	const double t = (double)(*iter + 1);
	const float step = (float)((double)lr / (1.0 - pow((double)b1, t)));
	const float invSqrtBC2 = (float)(1.0 / sqrt(1.0 - pow((double)b2, t)));
	const float decay = __fsub_rn(1.0f, __fmul_rn(lr, wdw));
	T *const ps[4] = {w, g, m, v};
	upd<13>(ps, n, [=](float(&x)[4]) {
		const float wi = __fmul_rn(x[0], decay);
		const float d = x[1] + l2 * wi;
		const float mi = b1 * x[2] + omb1 * d;
		const float vi = b2 * x[3] + omb2 * d * d;
		x[2] = mi;
		x[3] = vi;
		x[0] = wi - step * mi / (sqrtf(vi) * invSqrtBC2 + eps);
	});
}
KERNEL __launch_bounds__(THREADS) adam_f32(float *w, const float *g, float *m, float *v, long long n, float lr,
                                             const float *rates, long long nrates, const long long *iter, float b1,
                                             float omb1, float b2, float omb2, float eps, float l2, float wdw) {
	adam_t(w, const_cast<float *>(g), m, v, n, rate_at(lr, rates, nrates, iter), b1, omb1, b2, omb2, eps, l2, wdw, iter);
}
KERNEL __launch_bounds__(THREADS) adam_bf16(bf16 *w, const bf16 *g, bf16 *m, bf16 *v, long long n, float lr,
                                              const float *rates, long long nrates, const long long *iter, float b1,
                                              float omb1, float b2, float omb2, float eps, float l2, float wdw) {
	adam_t(w, const_cast<bf16 *>(g), m, v, n, rate_at(lr, rates, nrates, iter), b1, omb1, b2, omb2, eps, l2, wdw, iter);
}
