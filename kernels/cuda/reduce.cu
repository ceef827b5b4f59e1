// Reductions along one axis of a tensor viewed as [outer, r, inner], and
// the broadcast that is their gradient. Every sum is taken in an order fixed
// by the shape alone (no atomics), so results do not depend on the device.
#include "common.cuh"

// rowsum sets y[row] = Σ_j x[row, j] for rows of n elements, accumulating in
// double. blockDim.x threads share a row (32, or a multiple of 32 with
// blockDim.y = 1), blockDim.y rows to a block, rows grid-stride.
template <class A, class B> __device__ __forceinline__ void rowsum_t(const A *x, B *y, int rows, int n) {
	__shared__ double scratch[32];
	constexpr int N = VW<A>::N;
	const bool vec = n % N == 0 && aligned16(x);
	const int g = blockDim.x, t = threadIdx.x;
	for (int row = blockIdx.x * blockDim.y + threadIdx.y; row < rows; row += gridDim.x * blockDim.y) {
		const A *p = x + (long long)row * n;
		double s = 0;
		if (vec) {
			for (int c = t * N; c < n; c += g * N) {
				Vec<A, N> a = ldv<A, N>(p + c);
#pragma unroll
				for (int k = 0; k < N; k++) s += toF(a.v[k]);
			}
		} else {
			for (int c = t; c < n; c += g) s += toF(p[c]);
		}
		s = g == 32 ? warpSum(s) : blockSum(s, scratch);
		if (t == 0) y[row] = fromF<B>((float)s);
	}
}

KERNEL __launch_bounds__(THREADS) rowsum_f32_f32(const float *x, float *y, int rows, int n) { rowsum_t(x, y, rows, n); }
KERNEL __launch_bounds__(THREADS) rowsum_bf16_bf16(const bf16 *x, bf16 *y, int rows, int n) { rowsum_t(x, y, rows, n); }
KERNEL __launch_bounds__(THREADS) rowsum_bf16_f32(const bf16 *x, float *y, int rows, int n) { rowsum_t(x, y, rows, n); }

// midsum sets y[o,i] = Σ_j x[o,j,i], one thread per (o,i), j in order in
// float: kernels/cpu's order, so the f32 result is the CPU's bit for bit.
// outer·r·inner is below 2³¹.
template <class T> __device__ __forceinline__ void midsum_t(const T *x, T *y, int outer, int r, int inner) {
	const long long n = (long long)outer * inner;
	for (long long e = gtid(); e < n; e += gstride()) {
		const int o = (int)(e / inner), i = (int)(e % inner);
		const T *p = x + (long long)o * r * inner + i;
		float s = 0;
		for (int j = 0; j < r; j++) s += toF(p[(long long)j * inner]);
		y[e] = fromF<T>(s);
	}
}

KERNEL __launch_bounds__(THREADS) midsum_f32(const float *x, float *y, int outer, int r, int inner) {
	midsum_t(x, y, outer, r, inner);
}
KERNEL __launch_bounds__(THREADS) midsum_bf16(const bf16 *x, bf16 *y, int outer, int r, int inner) {
	midsum_t(x, y, outer, r, inner);
}

// colsum sums the rows of x [rows, cols] in chunks of chunk rows: block
// (bx, by) of 32×8 threads writes y[by, 32·bx … 32·bx+31], the sums of its 32
// columns over rows by·chunk … (by+1)·chunk − 1. Within a block, thread
// (tx, ty) sums rows ty, ty+8, … in order, and the eight partial sums are
// added in order of ty. A first pass writes float partials, a second (one
// chunk of all rows) the final sums.
template <class A, class B>
__device__ __forceinline__ void colsum_t(const A *x, B *y, int rows, int cols, int chunk) {
	__shared__ float part[8][33];
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int col = blockIdx.x * 32 + tx;
	const int r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
	float s = 0;
	if (col < cols)
		for (int r = r0 + ty; r < r1; r += 8) s += toF(x[(long long)r * cols + col]);
	part[ty][tx] = s;
	__syncthreads();
	if (ty == 0 && col < cols) {
		float t = part[0][tx];
#pragma unroll
		for (int k = 1; k < 8; k++) t += part[k][tx];
		y[(long long)blockIdx.y * cols + col] = fromF<B>(t);
	}
}

KERNEL __launch_bounds__(THREADS) colsum_f32_f32(const float *x, float *y, int rows, int cols, int chunk) {
	colsum_t(x, y, rows, cols, chunk);
}
KERNEL __launch_bounds__(THREADS) colsum_bf16_f32(const bf16 *x, float *y, int rows, int cols, int chunk) {
	colsum_t(x, y, rows, cols, chunk);
}
KERNEL __launch_bounds__(THREADS) colsum_f32_bf16(const float *x, bf16 *y, int rows, int cols, int chunk) {
	colsum_t(x, y, rows, cols, chunk);
}

// broadcast_axis sets y[o,j,i] = x[o,i]; outer·r·inner is below 2³¹.
template <class T>
__device__ __forceinline__ void broadcast_axis_t(const T *x, T *y, int outer, int r, int inner) {
	constexpr int N = VW<T>::N;
	const unsigned n = (unsigned)outer * (unsigned)r * (unsigned)inner;
	const unsigned ri = (unsigned)r * (unsigned)inner;
	if (aligned16(y) && aligned16(x) && inner % N == 0) {
		for (long long v = gtid(); v < n / N; v += gstride()) {
			const unsigned e = (unsigned)v * N;
			const unsigned o = e / ri, i = e % (unsigned)inner;
			stv<T, N>(y + e, ldv<T, N>(x + o * (unsigned)inner + i));
		}
		return;
	}
	if (aligned16(y) && inner == 1 && r % N == 0) {
		for (long long v = gtid(); v < n / N; v += gstride()) {
			const unsigned e = (unsigned)v * N;
			Vec<T, N> a;
			const T t = x[e / (unsigned)r];
#pragma unroll
			for (int k = 0; k < N; k++) a.v[k] = t;
			stv<T, N>(y + e, a);
		}
		return;
	}
	for (long long v = gtid(); v < n; v += gstride()) {
		const unsigned e = (unsigned)v;
		y[e] = x[(e / ri) * (unsigned)inner + e % (unsigned)inner];
	}
}

KERNEL __launch_bounds__(THREADS) broadcast_axis_f32(const float *x, float *y, int outer, int r, int inner) {
	broadcast_axis_t(x, y, outer, r, inner);
}
KERNEL __launch_bounds__(THREADS) broadcast_axis_bf16(const bf16 *x, bf16 *y, int outer, int r, int inner) {
	broadcast_axis_t(x, y, outer, r, inner);
}
