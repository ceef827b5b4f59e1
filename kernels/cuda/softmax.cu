// Row softmax and its gradient over x [rows, n]. Rows of up to
// WARP_ROW_MAX columns go one to a warp, held in registers; longer rows one
// to a block, read from memory in three passes (max, sum, write).
//
// causal ≠ 0 masks the attention scores of a square [seq, seq] matrix (one
// per sequence and head, stacked): row r is query position i = r mod n,
// which attends to columns j ≤ i only. Masked entries come out as 0.
#include "common.cuh"

// validCols returns how many leading columns of row r take part.
__device__ __forceinline__ int validCols(int r, int n, int causal) { return causal ? r % n + 1 : n; }

template <class T>
__device__ __forceinline__ void softmax_warp_v(const T *x, T *y, int rows, int n, int causal) {
	const int lane = threadIdx.x & 31;
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		float v[ROW_PER_LANE];
		rowLoad<T>(x + (long long)r * n, n, lane, v, -INFINITY);
		const int valid = validCols(r, n, causal);
		float m = -INFINITY;
#pragma unroll
		for (int e = 0; e < ROW_PER_LANE; e++)
			if (rowCol<T>(e, lane) < valid) m = fmaxf(m, v[e]);
		m = warpMax(m);
		float s = 0;
#pragma unroll
		for (int e = 0; e < ROW_PER_LANE; e++) {
			v[e] = rowCol<T>(e, lane) < valid ? expf(v[e] - m) : 0.0f;
			s += v[e];
		}
		const float inv = 1.0f / warpSum(s);
#pragma unroll
		for (int e = 0; e < ROW_PER_LANE; e++) v[e] *= inv;
		rowStore<T>(y + (long long)r * n, n, lane, v);
	}
}

// softmax_warp_s is the warp-per-row softmax for rows that cannot be read
// as vectors: three passes over the row, which the cache holds after the
// first (caching it in registers element by element costs too many).
template <class T> __device__ __forceinline__ void softmax_warp_s(const T *x, T *y, int rows, int n, int causal) {
	const int lane = threadIdx.x & 31;
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		const T *p = x + (long long)r * n;
		T *q = y + (long long)r * n;
		const int valid = validCols(r, n, causal);
		float m = -INFINITY;
		for (int j = lane; j < valid; j += 32) m = fmaxf(m, toF(p[j]));
		m = warpMax(m);
		float s = 0;
		for (int j = lane; j < valid; j += 32) s += expf(toF(p[j]) - m);
		const float inv = 1.0f / warpSum(s);
		for (int j = lane; j < n; j += 32) q[j] = fromF<T>(j < valid ? expf(toF(p[j]) - m) * inv : 0.0f);
	}
}

template <class T> __device__ __forceinline__ void softmax_warp_t(const T *x, T *y, int rows, int n, int causal) {
	if (n % VW<T>::N == 0 && aligned16(x) && aligned16(y))
		softmax_warp_v<T>(x, y, rows, n, causal);
	else
		softmax_warp_s<T>(x, y, rows, n, causal);
}

template <class T> __device__ __forceinline__ void softmax_block_t(const T *x, T *y, int rows, int n, int causal) {
	__shared__ float scratch[32];
	for (int r = blockIdx.x; r < rows; r += gridDim.x) {
		const T *p = x + (long long)r * n;
		T *q = y + (long long)r * n;
		const int valid = validCols(r, n, causal);
		float m = -INFINITY;
		for (int j = threadIdx.x; j < valid; j += blockDim.x) m = fmaxf(m, toF(p[j]));
		m = blockMax(m, scratch);
		float s = 0;
		for (int j = threadIdx.x; j < valid; j += blockDim.x) s += expf(toF(p[j]) - m);
		const float inv = 1.0f / blockSum(s, scratch);
		for (int j = threadIdx.x; j < n; j += blockDim.x) q[j] = fromF<T>(j < valid ? expf(toF(p[j]) - m) * inv : 0.0f);
	}
}

KERNEL ROW_BOUNDS softmax_warp_f32(const float *x, float *y, int rows, int n, int causal) {
	softmax_warp_t(x, y, rows, n, causal);
}
KERNEL ROW_BOUNDS softmax_warp_bf16(const bf16 *x, bf16 *y, int rows, int n, int causal) {
	softmax_warp_t(x, y, rows, n, causal);
}
KERNEL __launch_bounds__(THREADS) softmax_block_f32(const float *x, float *y, int rows, int n, int causal) {
	softmax_block_t(x, y, rows, n, causal);
}
KERNEL __launch_bounds__(THREADS) softmax_block_bf16(const bf16 *x, bf16 *y, int rows, int n, int causal) {
	softmax_block_t(x, y, rows, n, causal);
}

// softmax_bwd sets dx = scale·y⊙(dy − Σ_j y_j·dy_j) row by row, from the
// softmax output y: scale is 1 for Softmax's gradient and 1/√d inside
// attention. With causal, as in softmax, the masked columns take no part
// and come out 0 (y is 0 there already, so only a non-finite dy there would
// show the mask, and the warp-per-row path, short of registers, does not
// mask those). dx may alias dy (attention turns dP into dS in place).
template <class T>
__device__ __forceinline__ void softmax_bwd_warp_v(const T *y, const T *dy, T *dx, int rows, int n, float scale,
                                                   int causal) {
	const int lane = threadIdx.x & 31;
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		// y stays in registers; dy is read twice, the second time from cache.
		float a[ROW_PER_LANE];
		rowLoad<T>(y + (long long)r * n, n, lane, a, 0.0f);
		const T *g = dy + (long long)r * n;
		// Zeroing P's masked entries is the mask for finite dP.
		const int valid = validCols(r, n, causal);
#pragma unroll
		for (int e = 0; e < ROW_PER_LANE; e++)
			if (rowCol<T>(e, lane) >= valid) a[e] = 0.0f;
		float d = 0;
		rowEach<T>(g, n, lane, [&](int e, float v) { d += a[e] * v; });
		d = warpSum(d);
		rowEach<T>(g, n, lane, [&](int e, float v) { a[e] = a[e] * (v - d) * scale; });
		rowStore<T>(dx + (long long)r * n, n, lane, a);
	}
}

template <class T>
__device__ __forceinline__ void softmax_bwd_warp_s(const T *y, const T *dy, T *dx, int rows, int n, float scale,
                                                   int causal) {
	const int lane = threadIdx.x & 31;
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		const long long o = (long long)r * n;
		const int valid = validCols(r, n, causal);
		float d = 0;
		for (int j = lane; j < valid; j += 32) d += toF(y[o + j]) * toF(dy[o + j]);
		d = warpSum(d);
		for (int j = lane; j < n; j += 32)
			dx[o + j] = fromF<T>(j < valid ? toF(y[o + j]) * (toF(dy[o + j]) - d) * scale : 0.0f);
	}
}

template <class T>
__device__ __forceinline__ void softmax_bwd_warp_t(const T *y, const T *dy, T *dx, int rows, int n, float scale,
                                                   int causal) {
	if (n % VW<T>::N == 0 && aligned16(y) && aligned16(dy) && aligned16(dx))
		softmax_bwd_warp_v<T>(y, dy, dx, rows, n, scale, causal);
	else
		softmax_bwd_warp_s<T>(y, dy, dx, rows, n, scale, causal);
}

template <class T>
__device__ __forceinline__ void softmax_bwd_block_t(const T *y, const T *dy, T *dx, int rows, int n, float scale,
                                                    int causal) {
	__shared__ float scratch[32];
	for (int r = blockIdx.x; r < rows; r += gridDim.x) {
		const long long o = (long long)r * n;
		const int valid = validCols(r, n, causal);
		float d = 0;
		for (int j = threadIdx.x; j < valid; j += blockDim.x) d += toF(y[o + j]) * toF(dy[o + j]);
		d = blockSum(d, scratch);
		for (int j = threadIdx.x; j < n; j += blockDim.x)
			dx[o + j] = fromF<T>(j < valid ? toF(y[o + j]) * (toF(dy[o + j]) - d) * scale : 0.0f);
	}
}

KERNEL __launch_bounds__(THREADS) softmax_bwd_warp_f32(const float *y, const float *dy, float *dx, int rows, int n, float scale, int causal) {
	softmax_bwd_warp_t(y, dy, dx, rows, n, scale, causal);
}
KERNEL ROW_BOUNDS softmax_bwd_warp_bf16(const bf16 *y, const bf16 *dy, bf16 *dx, int rows, int n, float scale, int causal) {
	softmax_bwd_warp_t(y, dy, dx, rows, n, scale, causal);
}
KERNEL __launch_bounds__(THREADS) softmax_bwd_block_f32(const float *y, const float *dy, float *dx, int rows, int n, float scale, int causal) {
	softmax_bwd_block_t(y, dy, dx, rows, n, scale, causal);
}
KERNEL __launch_bounds__(THREADS) softmax_bwd_block_bf16(const bf16 *y, const bf16 *dy, bf16 *dx, int rows, int n, float scale, int causal) {
	softmax_bwd_block_t(y, dy, dx, rows, n, scale, causal);
}
