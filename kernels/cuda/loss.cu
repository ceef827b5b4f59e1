// Losses: softmax cross-entropy (float logits of any dtype, int32 labels)
// and mean square (any float x), each a float32 scalar in device memory,
// and their gradients, which read the upstream gradient dloss from device
// memory.
#include "common.cuh"

// IGNORE_LABEL is the label of a row the cross-entropy does not score
// (kernels/cpu.IgnoreLabel, PyTorch's ignore_index).
#define IGNORE_LABEL (-100)

// sce_fwd_{warp,block} write part[r] = m + log Σ_j exp(x_j − m) − x_label
// for row r, m the row's maximum, the exponentials and their sum in double
// as kernels/cpu computes them; 0 for a row labelled IGNORE_LABEL; a label
// outside [0, n) otherwise gives NaN. A warp takes a row of up to
// WARP_ROW_MAX columns, a block a longer one (a language model's
// vocabulary). sce_final adds the scored rows' terms in a fixed order and
// writes their mean as float: the loss does not depend on the device or
// the grid.
template <class T>
__device__ __forceinline__ double sceTerm(const T *p, const int *labels, int r, int n, float m, double s) {
	const int l = labels[r];
	if (l == IGNORE_LABEL) return 0.0;
	return (l >= 0 && l < n) ? (double)m + log(s) - (double)toF(p[l]) : (double)qnan();
}

// sceScored returns, to every thread of the block, the number of labels
// that are not IGNORE_LABEL.
__device__ __forceinline__ int sceScored(const int *labels, int rows) {
	__shared__ double scratch[32];
	double c = 0;
	for (int i = threadIdx.x; i < rows; i += blockDim.x) c += labels[i] != IGNORE_LABEL;
	return (int)blockSum(c, scratch);
}

template <class T> __device__ __forceinline__ void sce_fwd_warp_t(const T *x, const int *labels, double *part, int rows, int n) {
	const int lane = threadIdx.x & 31;
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		const T *p = x + (long long)r * n;
		float m = -INFINITY;
		for (int j = lane; j < n; j += 32) m = fmaxf(m, toF(p[j]));
		m = warpMax(m);
		double s = 0;
		for (int j = lane; j < n; j += 32) s += exp((double)toF(p[j]) - (double)m);
		s = warpSum(s);
		if (lane == 0) part[r] = sceTerm(p, labels, r, n, m, s);
	}
}

template <class T> __device__ __forceinline__ void sce_fwd_block_t(const T *x, const int *labels, double *part, int rows, int n) {
	__shared__ float fscratch[32];
	__shared__ double dscratch[32];
	for (int r = blockIdx.x; r < rows; r += gridDim.x) {
		const T *p = x + (long long)r * n;
		float m = -INFINITY;
		for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, toF(p[j]));
		m = blockMax(m, fscratch);
		double s = 0;
		for (int j = threadIdx.x; j < n; j += blockDim.x) s += exp((double)toF(p[j]) - (double)m);
		s = blockSum(s, dscratch);
		if (threadIdx.x == 0) part[r] = sceTerm(p, labels, r, n, m, s);
	}
}

KERNEL __launch_bounds__(THREADS) sce_fwd_warp_f32(const float *x, const int *labels, double *part, int rows, int n) {
	sce_fwd_warp_t(x, labels, part, rows, n);
}
KERNEL __launch_bounds__(THREADS) sce_fwd_warp_bf16(const bf16 *x, const int *labels, double *part, int rows, int n) {
	sce_fwd_warp_t(x, labels, part, rows, n);
}
KERNEL __launch_bounds__(THREADS) sce_fwd_block_f32(const float *x, const int *labels, double *part, int rows, int n) {
	sce_fwd_block_t(x, labels, part, rows, n);
}
KERNEL __launch_bounds__(THREADS) sce_fwd_block_bf16(const bf16 *x, const int *labels, double *part, int rows, int n) {
	sce_fwd_block_t(x, labels, part, rows, n);
}

KERNEL __launch_bounds__(THREADS) sce_final(const double *part, const int *labels, float *loss, int rows) {
	__shared__ double scratch[32];
	double s = 0;
	for (int i = threadIdx.x; i < rows; i += blockDim.x) s += part[i];
	s = blockSum(s, scratch);
	const int scored = sceScored(labels, rows);
	if (threadIdx.x == 0) *loss = scored > 0 ? (float)(s / scored) : 0.0f;
}

// sce_bwd sets dx = dloss·(softmax(x) − onehot(label))/scored, row by row,
// scored the rows not labelled IGNORE_LABEL, and zeros on those; a label
// outside [0, n) otherwise makes its row NaN. Each block counts the
// scored rows itself.
__device__ __forceinline__ float sceScale(const float *dloss, const int *labels, int rows) {
	return (float)((double)*dloss / (double)max(sceScored(labels, rows), 1));
}

template <class T>
__device__ __forceinline__ void sce_bwd_warp_t(const T *x, const int *labels, const float *dloss, T *dx, int rows, int n) {
	const int lane = threadIdx.x & 31;
	const float scale = sceScale(dloss, labels, rows);
	const bool vec = n % VW<T>::N == 0 && aligned16(x) && aligned16(dx);
	int first, stride;
	warpRows(first, stride);
	for (int r = first; r < rows; r += stride) {
		const T *p = x + (long long)r * n;
		T *q = dx + (long long)r * n;
		const int l = labels[r];
		if (l == IGNORE_LABEL) {
			for (int j = lane; j < n; j += 32) q[j] = fromF<T>(0.0f);
			continue;
		}
		const bool ok = l >= 0 && l < n;
		if (vec) {
			float v[ROW_PER_LANE];
			rowLoad<T>(p, n, lane, v, -INFINITY);
			float m = -INFINITY;
#pragma unroll
			for (int e = 0; e < ROW_PER_LANE; e++) m = fmaxf(m, v[e]);
			m = warpMax(m);
			float s = 0;
#pragma unroll
			for (int e = 0; e < ROW_PER_LANE; e++) {
				v[e] = expf(v[e] - m);
				s += v[e];
			}
			const float k = ok ? scale / warpSum(s) : qnan();
#pragma unroll
			for (int e = 0; e < ROW_PER_LANE; e++) v[e] = v[e] * k - (rowCol<T>(e, lane) == l ? scale : 0.0f);
			rowStore<T>(q, n, lane, v);
		} else {
			float m = -INFINITY;
			for (int j = lane; j < n; j += 32) m = fmaxf(m, toF(p[j]));
			m = warpMax(m);
			float s = 0;
			for (int j = lane; j < n; j += 32) s += expf(toF(p[j]) - m);
			const float k = ok ? scale / warpSum(s) : qnan();
			for (int j = lane; j < n; j += 32) q[j] = fromF<T>(expf(toF(p[j]) - m) * k - (j == l ? scale : 0.0f));
		}
	}
}

template <class T>
__device__ __forceinline__ void sce_bwd_block_t(const T *x, const int *labels, const float *dloss, T *dx, int rows, int n) {
	__shared__ float scratch[32];
	const float scale = sceScale(dloss, labels, rows);
	for (int r = blockIdx.x; r < rows; r += gridDim.x) {
		const T *p = x + (long long)r * n;
		T *q = dx + (long long)r * n;
		const int l = labels[r];
		if (l == IGNORE_LABEL) {
			for (int j = threadIdx.x; j < n; j += blockDim.x) q[j] = fromF<T>(0.0f);
			continue;
		}
		float m = -INFINITY;
		for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, toF(p[j]));
		m = blockMax(m, scratch);
		float s = 0;
		for (int j = threadIdx.x; j < n; j += blockDim.x) s += expf(toF(p[j]) - m);
		s = blockSum(s, scratch);
		const float k = (l >= 0 && l < n) ? scale / s : qnan();
		for (int j = threadIdx.x; j < n; j += blockDim.x) q[j] = fromF<T>(expf(toF(p[j]) - m) * k - (j == l ? scale : 0.0f));
	}
}

KERNEL ROW_BOUNDS sce_bwd_warp_f32(const float *x, const int *labels, const float *dloss, float *dx, int rows, int n) {
	sce_bwd_warp_t(x, labels, dloss, dx, rows, n);
}
KERNEL ROW_BOUNDS sce_bwd_warp_bf16(const bf16 *x, const int *labels, const float *dloss, bf16 *dx, int rows, int n) {
	sce_bwd_warp_t(x, labels, dloss, dx, rows, n);
}
KERNEL __launch_bounds__(THREADS) sce_bwd_block_f32(const float *x, const int *labels, const float *dloss, float *dx,
                                                      int rows, int n) {
	sce_bwd_block_t(x, labels, dloss, dx, rows, n);
}
KERNEL __launch_bounds__(THREADS) sce_bwd_block_bf16(const bf16 *x, const int *labels, const float *dloss, bf16 *dx,
                                                       int rows, int n) {
	sce_bwd_block_t(x, labels, dloss, dx, rows, n);
}

// msq_partial writes part[b] = Σ x² (squares and sums in double, as
// kernels/cpu computes them) over elements b·chunk …
// (b+1)·chunk − 1, one block each; msq_final adds the parts in a fixed
// order and writes Σ/n as float. chunk depends on n alone, so the loss does
// not depend on the device.
template <class T> __device__ __forceinline__ void msq_partial_t(const T *x, double *part, long long n, long long chunk) {
	__shared__ double scratch[32];
	constexpr int N = VW<T>::N;
	for (long long b = blockIdx.x; b * chunk < n; b += gridDim.x) {
		const long long lo = b * chunk, hi = min(n, lo + chunk);
		const T *p = x + lo;
		double s = 0;
		long long done = 0;
		if (aligned16(p)) {
			done = (hi - lo) / N * N;
			for (long long i = (long long)threadIdx.x * N; i < done; i += (long long)blockDim.x * N) {
				Vec<T, N> a = ldv<T, N>(p + i);
#pragma unroll
				for (int k = 0; k < N; k++) {
					const double v = toF(a.v[k]);
					s += v * v;
				}
			}
		}
		for (long long i = done + threadIdx.x; i < hi - lo; i += blockDim.x) {
			const double v = toF(p[i]);
			s += v * v;
		}
		s = blockSum(s, scratch);
		if (threadIdx.x == 0) part[b] = s;
	}
}

KERNEL __launch_bounds__(THREADS) msq_partial_f32(const float *x, double *part, long long n, long long chunk) {
	msq_partial_t(x, part, n, chunk);
}
KERNEL __launch_bounds__(THREADS) msq_partial_bf16(const bf16 *x, double *part, long long n, long long chunk) {
	msq_partial_t(x, part, n, chunk);
}

KERNEL __launch_bounds__(THREADS) msq_final(const double *part, float *loss, int parts, long long n) {
	__shared__ double scratch[32];
	double s = 0;
	for (int i = threadIdx.x; i < parts; i += blockDim.x) s += part[i];
	s = blockSum(s, scratch);
	if (threadIdx.x == 0) *loss = (float)(s / (double)n);
}

// msq_bwd sets dx = x·(2·dloss/n), the factor computed once.
template <class T> __device__ __forceinline__ void msq_bwd_t(const T *x, const float *dloss, T *dx, long long n) {
	constexpr int N = VW<T>::N;
	const float k = (float)(2.0 * (double)*dloss / (double)n);
	const long long nv = (aligned16(x) && aligned16(dx)) ? n / N : 0;
	for (long long i = gtid(); i < nv; i += gstride()) {
		Vec<T, N> a = ldv<T, N>(x + i * N), r;
#pragma unroll
		for (int j = 0; j < N; j++) r.v[j] = fromF<T>(toF(a.v[j]) * k);
		stv<T, N>(dx + i * N, r);
	}
	for (long long i = nv * N + gtid(); i < n; i += gstride()) dx[i] = fromF<T>(toF(x[i]) * k);
}

KERNEL __launch_bounds__(THREADS) msq_bwd_f32(const float *x, const float *dloss, float *dx, long long n) {
	msq_bwd_t(x, dloss, dx, n);
}
KERNEL __launch_bounds__(THREADS) msq_bwd_bf16(const bf16 *x, const float *dloss, bf16 *dx, long long n) {
	msq_bwd_t(x, dloss, dx, n);
}
