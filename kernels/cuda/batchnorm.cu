// Batch normalization of x [n, c, hw] (NCHW, hw = H·W) in training mode and
// its gradient, with graph.BatchNorm's definitions: each channel is
// normalized over its M = n·hw values, y = (x − mean)·rstd·gamma + beta,
// rstd = 1/√(var + eps) with the biased variance. Statistics are
// accumulated in float whatever T is.
//
// Each channel's M values, in the order (sample, position), are cut into S
// segments of seg values (seg a multiple of THREADS), one block to a
// channel and segment: grid (c, S), seg and S chosen by the wrapper from
// the sizes alone. The statistics take one read of x: counts, means and
// sums of squared deviations from the mean (M2), merged by Chan's formula.
// A thread takes its values U at a time (their mean and M2 exactly, then
// merged into its own), the lanes of a warp are merged by a butterfly, the
// warps in order, and each segment's (count, mean, M2) goes to the
// workspace; a kernel that needs a channel's statistics merges its S
// segments, thread t those t, t+THREADS, … in order, then the threads as
// before. No square is taken about a point far from the mean, so the
// variance does not lose the digits that E[x²] − E[x]² would to a mean
// large against the deviation. The gradient's sums, Σ dy and Σ dy·x̂, go
// to the workspace by segment likewise, and are added up in an order fixed
// by S.
#include "common.cuh"

// bnUnroll is U, the values a thread loads at once, THREADS apart, before
// it uses any: 16 bytes of each array it reads in flight.
template <class T> struct bnUnroll {
	static constexpr int U = VW<T>::N;
};

// bnCursor walks a thread's values of channel ch, THREADS apart in the
// channel's order: value m = i·hw + j is x[(i·c + ch)·hw + j].
struct bnCursor {
	long long off;   // the current value's offset
	long long step;  // the offset's advance by THREADS values
	long long wrap;  // and its extra on crossing into the next sample
	int j, dj, hw;   // the position in the sample, its advance, hw

	__device__ __forceinline__ bnCursor(int m, int ch, int c, int hw_) : hw(hw_) {
		const int i = m / hw;
		j = m - i * hw;
		off = ((long long)i * c + ch) * hw + j;
		const int di = THREADS / hw;
		dj = THREADS - di * hw;
		step = (long long)di * c * hw + dj;
		wrap = (long long)(c - 1) * hw;
	}
	__device__ __forceinline__ void next() {
		off += step;
		j += dj;
		if (j >= hw) {
			j -= hw;
			off += wrap;
		}
	}
};

// bnStat is the count, mean and M2 of some values.
struct bnStat {
	float n, mean, m2;
};

// bnMerge merges b into a (Chan et al.); empty sets are neutral.
__device__ __forceinline__ void bnMerge(bnStat &a, const bnStat &b) {
	const float t = a.n + b.n;
	if (t == 0) return;
	const float d = b.mean - a.mean, w = b.n / t;
	a.mean += d * w;
	a.m2 += b.m2 + d * d * a.n * w;
	a.n = t;
}

// bnBlockStat merges every thread's statistics: a butterfly within each
// warp, lane 0's result of each warp, then the warps in order, into a
// result every thread gets. All threads of the block must call it.
__device__ __forceinline__ bnStat bnBlockStat(bnStat s, bnStat *scratch) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		bnStat b;
		b.n = __shfl_xor_sync(0xffffffffu, s.n, o);
		b.mean = __shfl_xor_sync(0xffffffffu, s.mean, o);
		b.m2 = __shfl_xor_sync(0xffffffffu, s.m2, o);
		bnMerge(s, b);
	}
	const int nw = blockDim.x >> 5;
	__syncthreads(); // the previous use of scratch is over
	if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = s;
	__syncthreads();
	bnStat r = scratch[0];
	for (int i = 1; i < nw; i++) bnMerge(r, scratch[i]);
	return r;
}

// bnSegment returns the bounds [m0, m1) of segment s of a channel of M
// values (without overflowing near 2³¹).
__device__ __forceinline__ void bnSegment(int s, int seg, int M, int &m0, int &m1) {
	m0 = s * seg;
	m1 = M - m0 > seg ? m0 + seg : M;
}

// bnStats writes the statistics of each segment of each channel to part:
// part[3·(ch·S + s) …] = count, mean, M2 (float).
template <class T>
__device__ __forceinline__ void bn_stats_t(const T *x, float *part, int n, int c, int hw, int seg, int S) {
	__shared__ bnStat scratch[32];
	constexpr int U = bnUnroll<T>::U;
	const int M = n * hw;
	for (int ch = blockIdx.x; ch < c; ch += gridDim.x)
		for (int s = blockIdx.y; s < S; s += gridDim.y) {
			int m0, m1;
			bnSegment(s, seg, M, m0, m1);
			bnStat a = {0, 0, 0};
			const int m = m0 + threadIdx.x;
			if (m < m1) {
				bnCursor q(m, ch, c, hw);
				for (int rem = m1 - m; rem > 0; rem -= U * THREADS) {
					float v[U], k = 0, sum = 0;
#pragma unroll
					for (int u = 0; u < U; u++) {
						const bool ok = u * THREADS < rem;
						v[u] = ok ? toF(x[q.off]) : 0.0f;
						k += ok ? 1.0f : 0.0f;
						sum += v[u];
						q.next();
					}
					bnStat b = {k, sum / k, 0};
#pragma unroll
					for (int u = 0; u < U; u++) {
						const float d = u * THREADS < rem ? v[u] - b.mean : 0.0f;
						b.m2 += d * d;
					}
					bnMerge(a, b);
				}
			}
			const bnStat r = bnBlockStat(a, scratch);
			if (threadIdx.x == 0) {
				float *p = part + 3 * ((long long)ch * S + s);
				p[0] = r.n;
				p[1] = r.mean;
				p[2] = r.m2;
			}
		}
}

// bnChannel merges channel ch's S segment statistics into its mean and
// rstd, the same in every thread and every block of the channel.
__device__ __forceinline__ void bnChannel(const float *part, int ch, int S, int M, float eps, bnStat *scratch,
                                          float &mean, float &rstd) {
	bnStat a = {0, 0, 0};
	for (int s = threadIdx.x; s < S; s += blockDim.x) {
		const float *p = part + 3 * ((long long)ch * S + s);
		const bnStat b = {p[0], p[1], p[2]};
		bnMerge(a, b);
	}
	const bnStat r = bnBlockStat(a, scratch);
	mean = r.mean;
	rstd = 1.0f / sqrtf(r.m2 / (float)M + eps);
}

// bn_fwd writes y for each segment of each channel from the statistics
// bn_stats left in part.
template <class T>
__device__ __forceinline__ void bn_fwd_t(const T *x, const T *gamma, const T *beta, T *y, const float *part, int n,
                                         int c, int hw, int seg, int S, float eps) {
	__shared__ bnStat scratch[32];
	constexpr int U = bnUnroll<T>::U;
	const int M = n * hw;
	for (int ch = blockIdx.x; ch < c; ch += gridDim.x)
		for (int s = blockIdx.y; s < S; s += gridDim.y) {
			float mean, rstd;
			bnChannel(part, ch, S, M, eps, scratch, mean, rstd);
			const float a = rstd * toF(gamma[ch]), b = toF(beta[ch]);
			int m0, m1;
			bnSegment(s, seg, M, m0, m1);
			const int m = m0 + threadIdx.x;
			if (m >= m1) continue;
			bnCursor q(m, ch, c, hw);
			for (int rem = m1 - m; rem > 0; rem -= U * THREADS) {
				bnCursor w = q; // the stores' walk
				float v[U];
#pragma unroll
				for (int u = 0; u < U; u++) {
					v[u] = u * THREADS < rem ? toF(x[q.off]) : 0.0f;
					q.next();
				}
#pragma unroll
				for (int u = 0; u < U; u++) {
					if (u * THREADS < rem) y[w.off] = fromF<T>((v[u] - mean) * a + b);
					w.next();
				}
			}
		}
}

KERNEL __launch_bounds__(THREADS) bn_stats_f32(const float *x, float *part, int n, int c, int hw, int seg, int S) {
	bn_stats_t(x, part, n, c, hw, seg, S);
}
KERNEL __launch_bounds__(THREADS) bn_stats_bf16(const bf16 *x, float *part, int n, int c, int hw, int seg, int S) {
	bn_stats_t(x, part, n, c, hw, seg, S);
}
KERNEL __launch_bounds__(THREADS) bn_fwd_f32(const float *x, const float *gamma, const float *beta, float *y,
                                             const float *part, int n, int c, int hw, int seg, int S, float eps) {
	bn_fwd_t(x, gamma, beta, y, part, n, c, hw, seg, S, eps);
}
KERNEL __launch_bounds__(THREADS) bn_fwd_bf16(const bf16 *x, const bf16 *gamma, const bf16 *beta, bf16 *y,
                                              const float *part, int n, int c, int hw, int seg, int S, float eps) {
	bn_fwd_t(x, gamma, beta, y, part, n, c, hw, seg, S, eps);
}

// The gradient: with x̂ = (x − mean)·rstd and g = dy·gamma, channel by
// channel, dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), dgamma = Σ dy·x̂ and
// dbeta = Σ dy; mean(g) = gamma·Σ dy/M and mean(g·x̂) = gamma·Σ dy·x̂/M.

// bn_bwd_sums writes each segment's Σ dy and Σ dy·x̂ to sums:
// sums[2·(ch·S + s) …] (float), from the statistics in part.
template <class T>
__device__ __forceinline__ void bn_bwd_sums_t(const T *x, const T *dy, const float *part, float *sums, int n, int c,
                                              int hw, int seg, int S, float eps) {
	__shared__ bnStat scratch[32];
	__shared__ float fscratch[32];
	constexpr int U = bnUnroll<T>::U;
	const int M = n * hw;
	for (int ch = blockIdx.x; ch < c; ch += gridDim.x)
		for (int s = blockIdx.y; s < S; s += gridDim.y) {
			float mean, rstd;
			bnChannel(part, ch, S, M, eps, scratch, mean, rstd);
			int m0, m1;
			bnSegment(s, seg, M, m0, m1);
			float sd = 0, sdx = 0;
			const int m = m0 + threadIdx.x;
			if (m < m1) {
				bnCursor q(m, ch, c, hw);
				for (int rem = m1 - m; rem > 0; rem -= U * THREADS) {
					float v[U], d[U];
#pragma unroll
					for (int u = 0; u < U; u++) {
						const bool ok = u * THREADS < rem;
						v[u] = ok ? toF(x[q.off]) : 0.0f;
						d[u] = ok ? toF(dy[q.off]) : 0.0f;
						q.next();
					}
#pragma unroll
					for (int u = 0; u < U; u++) {
						sd += d[u];
						sdx += d[u] * (v[u] - mean);
					}
				}
			}
			sd = blockSum(sd, fscratch);
			sdx = blockSum(sdx, fscratch);
			if (threadIdx.x == 0) {
				float *p = sums + 2 * ((long long)ch * S + s);
				p[0] = sd;
				p[1] = sdx * rstd;
			}
		}
}

// bn_bwd writes dx for each segment of each channel, and the blocks of
// segment 0 dgamma and dbeta, from the statistics in part and the sums in
// sums.
template <class T>
__device__ __forceinline__ void bn_bwd_t(const T *x, const T *gamma, const T *dy, T *dx, T *dgamma, T *dbeta,
                                         const float *part, const float *sums, int n, int c, int hw, int seg, int S,
                                         float eps) {
	__shared__ bnStat scratch[32];
	__shared__ float fscratch[32];
	constexpr int U = bnUnroll<T>::U;
	const int M = n * hw;
	for (int ch = blockIdx.x; ch < c; ch += gridDim.x)
		for (int s = blockIdx.y; s < S; s += gridDim.y) {
			float mean, rstd;
			bnChannel(part, ch, S, M, eps, scratch, mean, rstd);
			float sd = 0, sdx = 0;
			for (int k = threadIdx.x; k < S; k += blockDim.x) {
				const float *p = sums + 2 * ((long long)ch * S + k);
				sd += p[0];
				sdx += p[1];
			}
			sd = blockSum(sd, fscratch);
			sdx = blockSum(sdx, fscratch);
			if (s == 0 && threadIdx.x == 0) {
				dgamma[ch] = fromF<T>(sdx);
				dbeta[ch] = fromF<T>(sd);
			}
			const float ga = toF(gamma[ch]);
			const float a = ga * sd / (float)M, b = ga * sdx / (float)M;
			int m0, m1;
			bnSegment(s, seg, M, m0, m1);
			const int m = m0 + threadIdx.x;
			if (m >= m1) continue;
			bnCursor q(m, ch, c, hw);
			for (int rem = m1 - m; rem > 0; rem -= U * THREADS) {
				bnCursor w = q; // the stores' walk
				float v[U], d[U];
#pragma unroll
				for (int u = 0; u < U; u++) {
					const bool ok = u * THREADS < rem;
					v[u] = ok ? toF(x[q.off]) : 0.0f;
					d[u] = ok ? toF(dy[q.off]) : 0.0f;
					q.next();
				}
#pragma unroll
				for (int u = 0; u < U; u++) {
					if (u * THREADS < rem) dx[w.off] = fromF<T>(rstd * (d[u] * ga - a - (v[u] - mean) * rstd * b));
					w.next();
				}
			}
		}
}

KERNEL __launch_bounds__(THREADS) bn_bwd_sums_f32(const float *x, const float *dy, const float *part, float *sums,
                                                  int n, int c, int hw, int seg, int S, float eps) {
	bn_bwd_sums_t(x, dy, part, sums, n, c, hw, seg, S, eps);
}
KERNEL __launch_bounds__(THREADS) bn_bwd_sums_bf16(const bf16 *x, const bf16 *dy, const float *part, float *sums,
                                                   int n, int c, int hw, int seg, int S, float eps) {
	bn_bwd_sums_t(x, dy, part, sums, n, c, hw, seg, S, eps);
}
KERNEL __launch_bounds__(THREADS) bn_bwd_f32(const float *x, const float *gamma, const float *dy, float *dx,
                                             float *dgamma, float *dbeta, const float *part, const float *sums, int n,
                                             int c, int hw, int seg, int S, float eps) {
	bn_bwd_t(x, gamma, dy, dx, dgamma, dbeta, part, sums, n, c, hw, seg, S, eps);
}
KERNEL __launch_bounds__(THREADS) bn_bwd_bf16(const bf16 *x, const bf16 *gamma, const bf16 *dy, bf16 *dx,
                                              bf16 *dgamma, bf16 *dbeta, const float *part, const float *sums, int n,
                                              int c, int hw, int seg, int S, float eps) {
	bn_bwd_t(x, gamma, dy, dx, dgamma, dbeta, part, sums, n, c, hw, seg, S, eps);
}
