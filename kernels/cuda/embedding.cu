// Embedding lookup and its gradient. ids are int32 and not checked on the
// host (they live on the device): an id outside [0, v) gives a row of NaN in
// the lookup and is skipped by the gradient, never an access out of bounds.
#include "common.cuh"

// embedding sets y[i, :] = table[ids[i], :] for i < n; n·d is below 2³¹.
template <class T>
__device__ __forceinline__ void embedding_t(const T *table, const int *ids, T *y, int n, int v, int d) {
	constexpr int N = VW<T>::N;
	if (d % N == 0 && aligned16(table) && aligned16(y)) {
		const unsigned dv = (unsigned)d / N;
		for (long long u = gtid(); u < (long long)n * dv; u += gstride()) {
			const int i = (int)((unsigned)u / dv), c = (int)((unsigned)u % dv) * N;
			const int id = ids[i];
			Vec<T, N> a;
			if (id >= 0 && id < v) {
				a = ldv<T, N>(table + (long long)id * d + c);
			} else {
#pragma unroll
				for (int k = 0; k < N; k++) a.v[k] = fromF<T>(qnan());
			}
			stv<T, N>(y + (long long)i * d + c, a);
		}
		return;
	}
	for (long long u = gtid(); u < (long long)n * d; u += gstride()) {
		const int i = (int)((unsigned)u / (unsigned)d), c = (int)((unsigned)u % (unsigned)d);
		const int id = ids[i];
		y[u] = (id >= 0 && id < v) ? table[(long long)id * d + c] : fromF<T>(qnan());
	}
}

KERNEL __launch_bounds__(THREADS) embedding_f32(const float *table, const int *ids, float *y, int n, int v, int d) {
	embedding_t(table, ids, y, n, v, d);
}
KERNEL __launch_bounds__(THREADS) embedding_bf16(const bf16 *table, const int *ids, bf16 *y, int n, int v, int d) {
	embedding_t(table, ids, y, n, v, d);
}

// embedding_bwd sets the rows of dtable [v, d] that ids name to the sum of
// the rows of dy [n, d] with that id, added in order of position (as
// kernels/cpu does), in float: deterministic, and for f32 the CPU's result
// bit for bit. Rows no id names are not touched: the caller zeroes dtable
// first. A block takes the positions i that are the first with their id
// (any earlier one leaves the row to that block); for each tile of
// EMB_COLS·THREADS columns it scans the positions from i on, THREADS at a
// time, gathers those with the same id in order into shared memory, and
// adds their rows.
#define EMB_COLS 4

template <class T> __device__ __forceinline__ void embedding_bwd_t(const int *ids, const T *dy, T *dtable, int n, int v, int d) {
	__shared__ int match[THREADS];
	__shared__ int warpCount[THREADS / 32];
	const int t = threadIdx.x, lane = t & 31, warp = t >> 5, nw = blockDim.x >> 5;
	for (int i = blockIdx.x; i < n; i += gridDim.x) {
		const int id = ids[i];
		if (id < 0 || id >= v) continue; // uniform over the block
		bool seen = false;
		for (int p0 = 0; p0 < i && !seen; p0 += blockDim.x) {
			const int p = p0 + t;
			seen = __syncthreads_or(p < i && ids[p] == id);
		}
		if (seen) continue;
		for (int c0 = 0; c0 < d; c0 += EMB_COLS * blockDim.x) {
			float acc[EMB_COLS];
#pragma unroll
			for (int q = 0; q < EMB_COLS; q++) acc[q] = 0.0f;
			for (int p0 = i; p0 < n; p0 += blockDim.x) {
				const int p = p0 + t;
				const bool hit = p < n && ids[p] == id;
				const unsigned ballot = __ballot_sync(0xffffffffu, hit);
				__syncthreads(); // the previous tile's reads of match are over
				if (lane == 0) warpCount[warp] = __popc(ballot);
				__syncthreads();
				int before = 0, total = 0;
				for (int w = 0; w < nw; w++) {
					before += w < warp ? warpCount[w] : 0;
					total += warpCount[w];
				}
				if (hit) match[before + __popc(ballot & ((1u << lane) - 1))] = p;
				__syncthreads();
				for (int k = 0; k < total; k++) {
					const T *row = dy + (long long)match[k] * d;
#pragma unroll
					for (int q = 0; q < EMB_COLS; q++) {
						const int c = c0 + q * blockDim.x + t;
						if (c < d) acc[q] += toF(row[c]);
					}
				}
			}
#pragma unroll
			for (int q = 0; q < EMB_COLS; q++) {
				const int c = c0 + q * blockDim.x + t;
				if (c < d) dtable[(long long)id * d + c] = fromF<T>(acc[q]);
			}
		}
	}
}

KERNEL __launch_bounds__(THREADS) embedding_bwd_f32(const int *ids, const float *dy, float *dtable, int n, int v, int d) {
	embedding_bwd_t(ids, dy, dtable, n, v, d);
}
KERNEL __launch_bounds__(THREADS) embedding_bwd_bf16(const int *ids, const bf16 *dy, bf16 *dtable, int n, int v, int d) {
	embedding_bwd_t(ids, dy, dtable, n, v, d);
}
