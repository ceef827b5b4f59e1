// LayerNorm and RMSNorm over the last axis of x [rows, n] and their
// gradients, with kernels/cpu's definitions. LayerNorm: y = (x −
// mean)·rstd·gamma + beta, rstd = 1/√(var + eps) with the biased variance
// (two-pass: the mean first, then the squares of the deviations). RMSNorm:
// y = x·rstd·gamma, rstd = 1/√(mean(x²) + eps). mean and rstd are float32
// whatever T is; statistics are accumulated in float.
//
// Rows of up to WARP_ROW_MAX columns go one to a warp (held in registers
// when they can be read as vectors, streamed otherwise); longer rows one to a
// block.
#include "common.cuh"

// ln_fwd_warp_v: the row in registers.
template <class T>
__device__ __forceinline__ void ln_fwd_warp_v(const T *x, const T *gamma, const T *beta, T *y, float *mean, float *rstd,
                                              int rows, int n, float eps) {
	const int lane = threadIdx.x & 31;
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		float v[ROW_PER_LANE];
		rowLoad<T>(x + (long long)r * n, n, lane, v, 0.0f);
		float s = 0;
#pragma unroll
		for (int e = 0; e < ROW_PER_LANE; e++) s += v[e];
		const float mu = warpSum(s) / n;
		float ss = 0;
#pragma unroll
		for (int e = 0; e < ROW_PER_LANE; e++) {
			const float d = rowCol<T>(e, lane) < n ? v[e] - mu : 0.0f;
			ss += d * d;
		}
		const float rs = 1.0f / sqrtf(warpSum(ss) / n + eps);
		rowEach<T>(gamma, n, lane, [&](int e, float g) { v[e] = (v[e] - mu) * rs * g; });
		rowEach<T>(beta, n, lane, [&](int e, float b) { v[e] += b; });
		rowStore<T>(y + (long long)r * n, n, lane, v);
		if (lane == 0) {
			mean[r] = mu;
			rstd[r] = rs;
		}
	}
}

// ln_fwd_warp_s: the row streamed, three passes.
template <class T>
__device__ __forceinline__ void ln_fwd_warp_s(const T *x, const T *gamma, const T *beta, T *y, float *mean, float *rstd,
                                              int rows, int n, float eps) {
	const int lane = threadIdx.x & 31;
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		const T *p = x + (long long)r * n;
		T *q = y + (long long)r * n;
		float s = 0;
		for (int j = lane; j < n; j += 32) s += toF(p[j]);
		const float mu = warpSum(s) / n;
		float ss = 0;
		for (int j = lane; j < n; j += 32) {
			const float d = toF(p[j]) - mu;
			ss += d * d;
		}
		const float rs = 1.0f / sqrtf(warpSum(ss) / n + eps);
		for (int j = lane; j < n; j += 32) q[j] = fromF<T>((toF(p[j]) - mu) * rs * toF(gamma[j]) + toF(beta[j]));
		if (lane == 0) {
			mean[r] = mu;
			rstd[r] = rs;
		}
	}
}

template <class T>
__device__ __forceinline__ void ln_fwd_warp_t(const T *x, const T *gamma, const T *beta, T *y, float *mean, float *rstd,
                                              int rows, int n, float eps) {
	if (n % VW<T>::N == 0 && aligned16(x) && aligned16(gamma) && aligned16(beta) && aligned16(y))
		ln_fwd_warp_v(x, gamma, beta, y, mean, rstd, rows, n, eps);
	else
		ln_fwd_warp_s(x, gamma, beta, y, mean, rstd, rows, n, eps);
}

template <class T>
__device__ __forceinline__ void ln_fwd_block_t(const T *x, const T *gamma, const T *beta, T *y, float *mean, float *rstd,
                                               int rows, int n, float eps) {
	__shared__ float scratch[32];
	for (int r = blockIdx.x; r < rows; r += gridDim.x) {
		const T *p = x + (long long)r * n;
		T *q = y + (long long)r * n;
		float s = 0;
		for (int j = threadIdx.x; j < n; j += blockDim.x) s += toF(p[j]);
		const float mu = blockSum(s, scratch) / n;
		float ss = 0;
		for (int j = threadIdx.x; j < n; j += blockDim.x) {
			const float d = toF(p[j]) - mu;
			ss += d * d;
		}
		const float rs = 1.0f / sqrtf(blockSum(ss, scratch) / n + eps);
		for (int j = threadIdx.x; j < n; j += blockDim.x)
			q[j] = fromF<T>((toF(p[j]) - mu) * rs * toF(gamma[j]) + toF(beta[j]));
		if (threadIdx.x == 0) {
			mean[r] = mu;
			rstd[r] = rs;
		}
	}
}

#define LN_FWD(NAME, T, IMPL, BOUNDS)                                                                        \
	KERNEL BOUNDS NAME(const T *x, const T *gamma, const T *beta, T *y, float *mean,       \
	                                       float *rstd, int rows, int n, float eps) {                          \
		IMPL(x, gamma, beta, y, mean, rstd, rows, n, eps);                                                   \
	}
// The float32 warp kernels would spill under ROW_BOUNDS.
LN_FWD(ln_fwd_warp_f32, float, ln_fwd_warp_t<float>, __launch_bounds__(THREADS))
LN_FWD(ln_fwd_warp_bf16, bf16, ln_fwd_warp_t<bf16>, ROW_BOUNDS)
LN_FWD(ln_fwd_block_f32, float, ln_fwd_block_t<float>, __launch_bounds__(THREADS))
LN_FWD(ln_fwd_block_bf16, bf16, ln_fwd_block_t<bf16>, __launch_bounds__(THREADS))

// The gradient with respect to x, row by row: with x̂ = (x − mean)·rstd and
// g = dy·gamma, dx = rstd·(g − mean(g) − x̂·mean(g·x̂)).

// ln_bwd_warp_v: x̂ in registers; dy and gamma read twice, the second time
// from cache (holding g as well would cost too many registers).
template <class T>
__device__ __forceinline__ void ln_bwd_warp_v(const T *x, const T *gamma, const T *dy, const float *mean,
                                              const float *rstd, T *dx, int rows, int n) {
	const int lane = threadIdx.x & 31;
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		const float m = mean[r], s = rstd[r];
		const T *dyr = dy + (long long)r * n;
		float xh[ROW_PER_LANE];
		rowLoad<T>(x + (long long)r * n, n, lane, xh, 0.0f);
#pragma unroll
		for (int e = 0; e < ROW_PER_LANE; e++) xh[e] = (xh[e] - m) * s;
		float sg = 0, sgx = 0;
		rowEach2<T>(dyr, gamma, n, lane, [&](int e, float d, float ga) {
			const float g = d * ga;
			sg += g;
			sgx += g * xh[e];
		});
		const float a = warpSum(sg) / n, b = warpSum(sgx) / n;
		rowEach2<T>(dyr, gamma, n, lane, [&](int e, float d, float ga) { xh[e] = s * (d * ga - a - xh[e] * b); });
		rowStore<T>(dx + (long long)r * n, n, lane, xh);
	}
}

// ln_bwd_warp_s: the rows streamed, two passes.
template <class T>
__device__ __forceinline__ void ln_bwd_warp_s(const T *x, const T *gamma, const T *dy, const float *mean,
                                              const float *rstd, T *dx, int rows, int n) {
	const int lane = threadIdx.x & 31;
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		const float m = mean[r], s = rstd[r];
		const long long o = (long long)r * n;
		float sg = 0, sgx = 0;
		for (int j = lane; j < n; j += 32) {
			const float g = toF(dy[o + j]) * toF(gamma[j]);
			sg += g;
			sgx += g * ((toF(x[o + j]) - m) * s);
		}
		const float a = warpSum(sg) / n, b = warpSum(sgx) / n;
		for (int j = lane; j < n; j += 32)
			dx[o + j] = fromF<T>(s * (toF(dy[o + j]) * toF(gamma[j]) - a - (toF(x[o + j]) - m) * s * b));
	}
}

template <class T>
__device__ __forceinline__ void ln_bwd_warp_t(const T *x, const T *gamma, const T *dy, const float *mean,
                                              const float *rstd, T *dx, int rows, int n) {
	if (n % VW<T>::N == 0 && aligned16(x) && aligned16(gamma) && aligned16(dy) && aligned16(dx))
		ln_bwd_warp_v(x, gamma, dy, mean, rstd, dx, rows, n);
	else
		ln_bwd_warp_s(x, gamma, dy, mean, rstd, dx, rows, n);
}

template <class T>
__device__ __forceinline__ void ln_bwd_block_t(const T *x, const T *gamma, const T *dy, const float *mean,
                                               const float *rstd, T *dx, int rows, int n) {
	__shared__ float scratch[32];
	for (int r = blockIdx.x; r < rows; r += gridDim.x) {
		const float m = mean[r], s = rstd[r];
		const long long o = (long long)r * n;
		float sg = 0, sgx = 0;
		for (int j = threadIdx.x; j < n; j += blockDim.x) {
			const float g = toF(dy[o + j]) * toF(gamma[j]);
			sg += g;
			sgx += g * ((toF(x[o + j]) - m) * s);
		}
		const float a = blockSum(sg, scratch) / n, b = blockSum(sgx, scratch) / n;
		for (int j = threadIdx.x; j < n; j += blockDim.x)
			dx[o + j] = fromF<T>(s * (toF(dy[o + j]) * toF(gamma[j]) - a - (toF(x[o + j]) - m) * s * b));
	}
}

#define LN_BWD(NAME, T, IMPL, BOUNDS)                                                                        \
	KERNEL BOUNDS NAME(const T *x, const T *gamma, const T *dy, const float *mean,         \
	                                       const float *rstd, T *dx, int rows, int n) {                        \
		IMPL(x, gamma, dy, mean, rstd, dx, rows, n);                                                         \
	}
LN_BWD(ln_bwd_warp_f32, float, ln_bwd_warp_t<float>, __launch_bounds__(THREADS))
LN_BWD(ln_bwd_warp_bf16, bf16, ln_bwd_warp_t<bf16>, ROW_BOUNDS)
LN_BWD(ln_bwd_block_f32, float, ln_bwd_block_t<float>, __launch_bounds__(THREADS))
LN_BWD(ln_bwd_block_bf16, bf16, ln_bwd_block_t<bf16>, __launch_bounds__(THREADS))

// ln_params_partial writes, for dgamma = Σ_rows dy·x̂ and dbeta = Σ_rows dy,
// the sums over each chunk of rows: block (bx, by) of 32×8 threads covers
// columns 32·bx … 32·bx+31 and rows by·chunk … (by+1)·chunk − 1, and writes
// pg[by, col] and pb[by, col] (float). Thread (tx, ty) sums rows ty, ty+8,
// … in order; the eight partial sums are added in order of ty. colsum then
// adds the chunks up.
template <class T>
__device__ __forceinline__ void ln_params_partial_t(const T *x, const T *dy, const float *mean, const float *rstd,
                                                    float *pg, float *pb, int rows, int n, int chunk) {
	__shared__ float sg[8][33], sb[8][33];
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int col = blockIdx.x * 32 + tx;
	const int r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
	float g = 0, b = 0;
	if (col < n)
		for (int r = r0 + ty; r < r1; r += 8) {
			const long long o = (long long)r * n + col;
			const float d = toF(dy[o]);
			g += d * (toF(x[o]) - mean[r]) * rstd[r];
			b += d;
		}
	sg[ty][tx] = g;
	sb[ty][tx] = b;
	__syncthreads();
	if (ty == 0 && col < n) {
		float tg = sg[0][tx], tb = sb[0][tx];
#pragma unroll
		for (int k = 1; k < 8; k++) {
			tg += sg[k][tx];
			tb += sb[k][tx];
		}
		pg[(long long)blockIdx.y * n + col] = tg;
		pb[(long long)blockIdx.y * n + col] = tb;
	}
}

KERNEL __launch_bounds__(THREADS) ln_params_partial_f32(const float *x, const float *dy, const float *mean,
                                                          const float *rstd, float *pg, float *pb, int rows, int n,
                                                          int chunk) {
	ln_params_partial_t(x, dy, mean, rstd, pg, pb, rows, n, chunk);
}
KERNEL __launch_bounds__(THREADS) ln_params_partial_bf16(const bf16 *x, const bf16 *dy, const float *mean,
                                                           const float *rstd, float *pg, float *pb, int rows, int n,
                                                           int chunk) {
	ln_params_partial_t(x, dy, mean, rstd, pg, pb, rows, n, chunk);
}

// RMSNorm over the last axis of x [rows, n] and its gradient, with
// kernels/cpu's definitions: y = x·rstd·gamma, rstd = 1/√(mean(x²) + eps).
// rstd is float32 whatever T is; the sum of squares is accumulated in
// float. The rows go to warps and blocks as LayerNorm's do.

// rms_fwd_warp_v: the row in registers (zeros past its end add nothing to
// the sum of squares).
template <class T>
__device__ __forceinline__ void rms_fwd_warp_v(const T *x, const T *gamma, T *y, float *rstd, int rows, int n,
                                               float eps) {
	const int lane = threadIdx.x & 31;
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		float v[ROW_PER_LANE];
		rowLoad<T>(x + (long long)r * n, n, lane, v, 0.0f);
		float ss = 0;
#pragma unroll
		for (int e = 0; e < ROW_PER_LANE; e++) ss += v[e] * v[e];
		const float rs = 1.0f / sqrtf(warpSum(ss) / n + eps);
		rowEach<T>(gamma, n, lane, [&](int e, float g) { v[e] = v[e] * rs * g; });
		rowStore<T>(y + (long long)r * n, n, lane, v);
		if (lane == 0) rstd[r] = rs;
	}
}

// rms_fwd_warp_s: the row streamed, two passes.
template <class T>
__device__ __forceinline__ void rms_fwd_warp_s(const T *x, const T *gamma, T *y, float *rstd, int rows, int n,
                                               float eps) {
	const int lane = threadIdx.x & 31;
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		const T *p = x + (long long)r * n;
		T *q = y + (long long)r * n;
		float ss = 0;
		for (int j = lane; j < n; j += 32) {
			const float v = toF(p[j]);
			ss += v * v;
		}
		const float rs = 1.0f / sqrtf(warpSum(ss) / n + eps);
		for (int j = lane; j < n; j += 32) q[j] = fromF<T>(toF(p[j]) * rs * toF(gamma[j]));
		if (lane == 0) rstd[r] = rs;
	}
}

template <class T>
__device__ __forceinline__ void rms_fwd_warp_t(const T *x, const T *gamma, T *y, float *rstd, int rows, int n,
                                               float eps) {
	if (n % VW<T>::N == 0 && aligned16(x) && aligned16(gamma) && aligned16(y))
		rms_fwd_warp_v(x, gamma, y, rstd, rows, n, eps);
	else
		rms_fwd_warp_s(x, gamma, y, rstd, rows, n, eps);
}

template <class T>
__device__ __forceinline__ void rms_fwd_block_t(const T *x, const T *gamma, T *y, float *rstd, int rows, int n,
                                                float eps) {
	__shared__ float scratch[32];
	for (int r = blockIdx.x; r < rows; r += gridDim.x) {
		const T *p = x + (long long)r * n;
		T *q = y + (long long)r * n;
		float ss = 0;
		for (int j = threadIdx.x; j < n; j += blockDim.x) {
			const float v = toF(p[j]);
			ss += v * v;
		}
		const float rs = 1.0f / sqrtf(blockSum(ss, scratch) / n + eps);
		for (int j = threadIdx.x; j < n; j += blockDim.x) q[j] = fromF<T>(toF(p[j]) * rs * toF(gamma[j]));
		if (threadIdx.x == 0) rstd[r] = rs;
	}
}

#define RMS_FWD(NAME, T, IMPL, BOUNDS)                                                                       \
	KERNEL BOUNDS NAME(const T *x, const T *gamma, T *y, float *rstd, int rows, int n, float eps) {             \
		IMPL(x, gamma, y, rstd, rows, n, eps);                                                               \
	}
// As LayerNorm's: the float32 warp kernels would spill under ROW_BOUNDS.
RMS_FWD(rms_fwd_warp_f32, float, rms_fwd_warp_t<float>, __launch_bounds__(THREADS))
RMS_FWD(rms_fwd_warp_bf16, bf16, rms_fwd_warp_t<bf16>, ROW_BOUNDS)
RMS_FWD(rms_fwd_block_f32, float, rms_fwd_block_t<float>, __launch_bounds__(THREADS))
RMS_FWD(rms_fwd_block_bf16, bf16, rms_fwd_block_t<bf16>, __launch_bounds__(THREADS))

// The gradient with respect to x, row by row: with x̂ = x·rstd and g =
// dy·gamma, dx = rstd·(g − x̂·mean(g·x̂)).

// rms_bwd_warp_v: x̂ in registers; dy and gamma read twice, the second time
// from cache.
template <class T>
__device__ __forceinline__ void rms_bwd_warp_v(const T *x, const T *gamma, const T *dy, const float *rstd, T *dx,
                                               int rows, int n) {
	const int lane = threadIdx.x & 31;
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		const float s = rstd[r];
		const T *dyr = dy + (long long)r * n;
		float xh[ROW_PER_LANE];
		rowLoad<T>(x + (long long)r * n, n, lane, xh, 0.0f);
#pragma unroll
		for (int e = 0; e < ROW_PER_LANE; e++) xh[e] *= s;
		float sgx = 0;
		rowEach2<T>(dyr, gamma, n, lane, [&](int e, float d, float ga) { sgx += d * ga * xh[e]; });
		const float b = warpSum(sgx) / n;
		rowEach2<T>(dyr, gamma, n, lane, [&](int e, float d, float ga) { xh[e] = s * (d * ga - xh[e] * b); });
		rowStore<T>(dx + (long long)r * n, n, lane, xh);
	}
}

// rms_bwd_warp_s: the rows streamed, two passes.
template <class T>
__device__ __forceinline__ void rms_bwd_warp_s(const T *x, const T *gamma, const T *dy, const float *rstd, T *dx,
                                               int rows, int n) {
	const int lane = threadIdx.x & 31;
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		const float s = rstd[r];
		const long long o = (long long)r * n;
		float sgx = 0;
		for (int j = lane; j < n; j += 32) sgx += toF(dy[o + j]) * toF(gamma[j]) * (toF(x[o + j]) * s);
		const float b = warpSum(sgx) / n;
		for (int j = lane; j < n; j += 32)
			dx[o + j] = fromF<T>(s * (toF(dy[o + j]) * toF(gamma[j]) - toF(x[o + j]) * s * b));
	}
}

template <class T>
__device__ __forceinline__ void rms_bwd_warp_t(const T *x, const T *gamma, const T *dy, const float *rstd, T *dx,
                                               int rows, int n) {
	if (n % VW<T>::N == 0 && aligned16(x) && aligned16(gamma) && aligned16(dy) && aligned16(dx))
		rms_bwd_warp_v(x, gamma, dy, rstd, dx, rows, n);
	else
		rms_bwd_warp_s(x, gamma, dy, rstd, dx, rows, n);
}

template <class T>
__device__ __forceinline__ void rms_bwd_block_t(const T *x, const T *gamma, const T *dy, const float *rstd, T *dx,
                                                int rows, int n) {
	__shared__ float scratch[32];
	for (int r = blockIdx.x; r < rows; r += gridDim.x) {
		const float s = rstd[r];
		const long long o = (long long)r * n;
		float sgx = 0;
		for (int j = threadIdx.x; j < n; j += blockDim.x)
			sgx += toF(dy[o + j]) * toF(gamma[j]) * (toF(x[o + j]) * s);
		const float b = blockSum(sgx, scratch) / n;
		for (int j = threadIdx.x; j < n; j += blockDim.x)
			dx[o + j] = fromF<T>(s * (toF(dy[o + j]) * toF(gamma[j]) - toF(x[o + j]) * s * b));
	}
}

#define RMS_BWD(NAME, T, IMPL, BOUNDS)                                                                       \
	KERNEL BOUNDS NAME(const T *x, const T *gamma, const T *dy, const float *rstd, T *dx, int rows, int n) {    \
		IMPL(x, gamma, dy, rstd, dx, rows, n);                                                               \
	}
RMS_BWD(rms_bwd_warp_f32, float, rms_bwd_warp_t<float>, __launch_bounds__(THREADS))
RMS_BWD(rms_bwd_warp_bf16, bf16, rms_bwd_warp_t<bf16>, ROW_BOUNDS)
RMS_BWD(rms_bwd_block_f32, float, rms_bwd_block_t<float>, __launch_bounds__(THREADS))
RMS_BWD(rms_bwd_block_bf16, bf16, rms_bwd_block_t<bf16>, __launch_bounds__(THREADS))

// rms_params_partial writes, for dgamma = Σ_rows dy·x̂, the sums over each
// chunk of rows, in ln_params_partial's layout and order: block (bx, by) of
// 32×8 threads writes pg[by, 32·bx … 32·bx+31] (float). colsum then adds
// the chunks up.
template <class T>
__device__ __forceinline__ void rms_params_partial_t(const T *x, const T *dy, const float *rstd, float *pg, int rows,
                                                     int n, int chunk) {
	__shared__ float sg[8][33];
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int col = blockIdx.x * 32 + tx;
	const int r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
	float g = 0;
	if (col < n)
		for (int r = r0 + ty; r < r1; r += 8) {
			const long long o = (long long)r * n + col;
			g += toF(dy[o]) * toF(x[o]) * rstd[r];
		}
	sg[ty][tx] = g;
	__syncthreads();
	if (ty == 0 && col < n) {
		float tg = sg[0][tx];
#pragma unroll
		for (int k = 1; k < 8; k++) tg += sg[k][tx];
		pg[(long long)blockIdx.y * n + col] = tg;
	}
}

KERNEL __launch_bounds__(THREADS) rms_params_partial_f32(const float *x, const float *dy, const float *rstd, float *pg,
                                                           int rows, int n, int chunk) {
	rms_params_partial_t(x, dy, rstd, pg, rows, n, chunk);
}
KERNEL __launch_bounds__(THREADS) rms_params_partial_bf16(const bf16 *x, const bf16 *dy, const float *rstd, float *pg,
                                                            int rows, int n, int chunk) {
	rms_params_partial_t(x, dy, rstd, pg, rows, n, chunk);
}
