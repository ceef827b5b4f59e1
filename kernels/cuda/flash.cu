// Flash attention (graph.Attention with Flash; Dao et al., 2022, in
// FlashAttention-2's loop order): attention over packed projections qkv
// [batch·seq, hid + 2·kv·D] (see attention.go) that never writes a score
// to memory. A block takes 16 rows a warp of one sequence and head and
// walks over the other side's rows a tile at a time through shared memory,
// keeping its running results in registers.
//
// Forward, per query block: S = Q Kᵀ·scale, the running max m and sum l
// of exp(S − m) row by row, O = O·exp(m_old − m) + P V; at the end out =
// O/l and lse = m + log l (float32, [batch, heads, seq]). Backward, three
// kernels: flash_prep takes Dv = rowsum(dO ⊙ O); flash_dq, per query
// block, recomputes P = exp(S·scale − lse) and dS = P ⊙ (dO Vᵀ − Dv)·scale
// tile by tile of keys and sums dQ = dS K; flash_dkdv, per key block and
// key/value head, does the same by query tiles over the group's query heads
// and sums dV = Pᵀ dO and dK = dSᵀ Q. dQ and dK, dV each have one writer:
// no atomics, and the same numbers every run.
//
// bf16 (head widths 16, 32, 64 and 128) runs on the tensor cores with
// mma.sync (ptx.cuh), FlashAttention-2's way: a product's result stays in
// the lanes' registers, where it is masked, exponentiated and packed into
// the A operand of the next product; only K, V (and Q, dO) tiles go
// through shared memory, read with ldmatrix. fp32 (widths up to 64) is the
// correctness path: its products are fused multiply-adds over shared
// memory (Dot), a tile's scores in the warp's scratch. Each instance has
// its tile sizes (FlashBF16, FlashF32): static shared memory under the 48
// KiB it may take, and no spills, bf16's registers at 128 a thread but for
// dK, dV of 128-wide heads.
#include "common.cuh"
#include "ptx.cuh"

constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;

// loadTile copies rows [r0, r0 + rows) of a D-column view (row stride ld)
// into dst (row stride D + 8: 16-byte rows that ldmatrix reads without
// bank conflicts), zeros past row seq.
template <class T, int D>
__device__ __forceinline__ void loadTile(T *dst, const T *src, int ld, int r0, int rows, int seq) {
	constexpr int V = VW<T>::N, CV = D / V, LT = D + 8;
	if (aligned16(src) && ld % V == 0) {
		for (int e = threadIdx.x; e < rows * CV; e += blockDim.x) {
			const int r = e / CV, c = (e % CV) * V;
			Vec<T, V> x;
			if (r0 + r < seq) {
				x = ldv<T, V>(src + (long long)(r0 + r) * ld + c);
			} else {
#pragma unroll
				for (int i = 0; i < V; i++) x.v[i] = fromF<T>(0.f);
			}
			stv<T, V>(dst + r * LT + c, x);
		}
		return;
	}
	for (int e = threadIdx.x; e < rows * D; e += blockDim.x) {
		const int r = e / D, c = e % D;
		dst[r * LT + c] = r0 + r < seq ? src[(long long)(r0 + r) * ld + c] : fromF<T>(0.f);
	}
}

// The views of qkv a block reads: the query head h and its key/value head.
struct Heads {
	long long q, k, v; // offsets of column 0 of sequence b's rows
	int ld;
	__device__ Heads(int b, int h, int seq, int heads, int kv, int hid, int D) {
		ld = hid + 2 * kv * D;
		const long long row = (long long)b * seq * ld;
		q = row + (long long)h * D;
		k = row + hid + (long long)(h / (heads / kv)) * D;
		v = k + (long long)kv * D;
	}
};

// ---- bf16: mma.sync ----

// FlashBF16 are a width's tile sizes: W warps (16·W rows) of the side a
// block owns and C rows of the other side a tile, for the forward (F), dQ
// (Q) and dK, dV (K) kernels, and B, the blocks a multiprocessor must be
// able to hold (__launch_bounds__), which caps the registers: 16 warps at
// 128 registers a thread; but dK, dV's one-warp blocks for 128-wide heads,
// 8 of them, take up to 255 and keep both accumulators in registers (213,
// no spills; with dV's accumulators in shared memory to stay under 128,
// shared memory held an H200 to 8 such blocks as well). The tiles (both
// stages of the pipelined loops) fit the 48 KiB of static shared memory,
// which bounds the 128-wide forward (5 blocks of 2 warps a multiprocessor
// of 228 KiB) and dQ (6 of 2) before their registers do.
template <int D> struct FlashBF16 {
	static_assert(D % 16 == 0 && D <= 128, "bf16 flash attention takes head widths of 16, 32, 64 or 128");
	static constexpr int FW = D <= 64 ? 4 : 2, FC = D <= 64 ? 64 : 32, FB = 16 / FW;
	static constexpr int QW = D <= 64 ? 4 : 2, QC = D <= 64 ? 32 : 16, QB = 16 / QW;
	static constexpr int KW = D <= 64 ? 4 : 1, KC = D <= 64 ? 32 : 16, KB = D <= 64 ? 16 / KW : 8;
};

// Frags<N> is a warp's fp32 accumulator [16][8N] in its lanes' registers,
// N C tiles of mma16816 (ptx.cuh's layout).
template <int N> struct Frags {
	float c[N][4];
	__device__ __forceinline__ Frags() {
#pragma unroll
		for (int n = 0; n < N; n++)
#pragma unroll
			for (int i = 0; i < 4; i++) c[n][i] = 0;
	}
	__device__ __forceinline__ float &at(int n, int i) { return c[n][i]; }
};

// scores sets s [16][8·NB] to A Bᵀ for the warp's 16 rows of A (row stride
// lda) and the rows of B (row stride ldb), both D wide; only the 16-column
// chunks [c0, c1) are computed, the others are 0.
template <int NB, int D>
__device__ __forceinline__ void scores(float (&s)[NB][4], const bf16 *A, int lda, const bf16 *B, int ldb, int c0, int c1) {
#pragma unroll
	for (int n = 0; n < NB; n++)
#pragma unroll
		for (int i = 0; i < 4; i++) s[n][i] = 0;
#pragma unroll
	for (int k = 0; k < D / 16; k++) {
		uint32_t a[4];
		ldA(a, A + k * 16, lda);
#pragma unroll
		for (int c = 0; c < NB / 2; c++) {
			if (c < c0 || c >= c1) continue;
			uint32_t b[4];
			ldBt(b, B + c * 16 * ldb + k * 16, ldb);
			mma16816(s[2 * c], a, b[0], b[1]);
			mma16816(s[2 * c + 1], a, b[2], b[3]);
		}
	}
}

// pack turns C tiles into the A fragments of the 16-column chunks they
// cover, in bf16.
template <int NB> __device__ __forceinline__ void pack(const float (&s)[NB][4], uint32_t (&a)[NB / 2][4]) {
#pragma unroll
	for (int c = 0; c < NB / 2; c++) {
		a[c][0] = pack2(s[2 * c][0], s[2 * c][1]);
		a[c][1] = pack2(s[2 * c][2], s[2 * c][3]);
		a[c][2] = pack2(s[2 * c + 1][0], s[2 * c + 1][1]);
		a[c][3] = pack2(s[2 * c + 1][2], s[2 * c + 1][3]);
	}
}

// accumulate adds A B to acc: A the packed chunks [c0, c1) of a, B's rows
// (16 per chunk, row stride ldb) as wide as acc.
template <int N, int KC>
__device__ __forceinline__ void accumulate(Frags<N> &acc, const uint32_t (&a)[KC][4], int c0, int c1, const bf16 *B, int ldb) {
#pragma unroll
	for (int n = 0; n < N / 2; n++) {
		float f0[4], f1[4];
#pragma unroll
		for (int i = 0; i < 4; i++) f0[i] = acc.at(2 * n, i), f1[i] = acc.at(2 * n + 1, i);
#pragma unroll
		for (int c = 0; c < KC; c++) {
			if (c < c0 || c >= c1) continue;
			uint32_t b[4];
			ldB(b, B + c * 16 * ldb + n * 16, ldb);
			mma16816(f0, a[c], b[0], b[1]);
			mma16816(f1, a[c], b[2], b[3]);
		}
#pragma unroll
		for (int i = 0; i < 4; i++) acc.at(2 * n, i) = f0[i], acc.at(2 * n + 1, i) = f1[i];
	}
}

// quadMax and quadSum reduce over the four lanes that hold a row.
__device__ __forceinline__ float quadMax(float v) {
	v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
	return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quadSum(float v) {
	v += __shfl_xor_sync(0xffffffffu, v, 1);
	return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// upTo is how many of a tile's C/16 chunks of keys from j0 rows r0 … r0 + 15
// see: all, or under the causal mask those at or before row r0 + 15.
template <int C> __device__ __forceinline__ int upTo(bool causal, int j0, int r0) {
	if (!causal) return C / 16;
	return r0 + 15 < j0 ? 0 : min(C / 16, (r0 + 15 - j0) / 16 + 1);
}

// from is the first of a tile's chunks of queries from i0 that keys k0 …
// k0 + 15 see: under the causal mask, those at or after key k0.
__device__ __forceinline__ int from(bool causal, int i0, int k0) { return causal && k0 > i0 ? (k0 - i0) / 16 : 0; }

// loadTileAsync is loadTile with cp.async, into a stage the caller commits
// and waits for, where the rows are 16-byte aligned; else it copies them
// at once.
template <int D> __device__ __forceinline__ void loadTileAsync(bf16 *dst, const bf16 *src, int ld, int r0, int rows, int seq) {
	constexpr int V = VW<bf16>::N, CV = D / V, LT = D + 8;
	if (!aligned16(src) || ld % V != 0) {
		loadTile<bf16, D>(dst, src, ld, r0, rows, seq);
		return;
	}
	for (int e = threadIdx.x; e < rows * CV; e += blockDim.x) {
		const int r = e / CV, c = (e % CV) * V;
		const bool in = r0 + r < seq;
		cpAsync16(dst + r * LT + c, src + (in ? (long long)(r0 + r) * ld + c : 0), in);
	}
}

// The forward and dQ kernels pipeline their loops over the key tiles in two
// stages: the copies of tile i + 1 start before tile i is multiplied, and a
// barrier after the products keeps them from going over a stage still
// read. dK, dV's loop waits for each tile's copies: its accumulators leave
// no registers for a second stage's addresses (it spills at 128); the
// other blocks of a multiprocessor (16 warps to width 64, 8 at 128) run
// while one waits.

// keyTiles is the number of BC-row key tiles the query rows from i0 (BR of
// them) see.
template <int BR, int BC> __device__ __forceinline__ int keyTiles(bool causal, int seq, int i0) {
	return ((causal ? min(seq, i0 + BR) : seq) + BC - 1) / BC;
}

// kvTile starts the copies of key and value tile it (BC rows from it·BC)
// into stage it & 1.
template <int D, int BC>
__device__ __forceinline__ void kvTile(bf16 (*ks)[BC * (D + 8)], bf16 (*vs)[BC * (D + 8)], const bf16 *k, const bf16 *v, int ld, int it,
                                       int seq) {
	loadTileAsync<D>(ks[it & 1], k, ld, it * BC, BC, seq);
	loadTileAsync<D>(vs[it & 1], v, ld, it * BC, BC, seq);
}

// nextKV makes key and value tile it ready in stage it & 1 for the whole
// block, after starting the copies of tile it + 1 into the other stage;
// tile 0's copies are started (kvTile) and committed before the loop.
template <int D, int BC>
__device__ __forceinline__ void nextKV(bf16 (*ks)[BC * (D + 8)], bf16 (*vs)[BC * (D + 8)], const bf16 *k, const bf16 *v, int ld, int it,
                                       int tiles, int seq) {
	if (it + 1 < tiles) kvTile<D, BC>(ks, vs, k, v, ld, it + 1, seq);
	cpAsyncCommit();
	cpAsyncWait<1>();
	__syncthreads();
}

template <int D>
__device__ __forceinline__ void flash_fwd_bf16(const bf16 *qkv, bf16 *out, float *lse, int seq, int heads, int kv, int hid, int causal,
                                               float scale) {
	constexpr int W = FlashBF16<D>::FW, BC = FlashBF16<D>::FC, BR = 16 * W, LT = D + 8, NB = BC / 8;
	__shared__ __align__(16) bf16 qs[BR * LT];
	__shared__ __align__(16) bf16 ks[2][BC * LT];
	__shared__ __align__(16) bf16 vs[2][BC * LT];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const int i0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z;
	const Heads at(b, h, seq, heads, kv, hid, D);
	const int r0 = i0 + warp * 16; // the warp's first row
	const float sl = scale * LOG2E;
	Frags<D / 8> o;
	float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}; // rows g and g + 8, base 2
	const int tiles = keyTiles<BR, BC>(causal, seq, i0);
	loadTileAsync<D>(qs, qkv + at.q, at.ld, i0, BR, seq);
	kvTile<D, BC>(ks, vs, qkv + at.k, qkv + at.v, at.ld, 0, seq);
	cpAsyncCommit();
#pragma unroll 1
	for (int it = 0; it < tiles; it++) {
		const int j0 = it * BC, st = it & 1;
		nextKV<D, BC>(ks, vs, qkv + at.k, qkv + at.v, at.ld, it, tiles, seq);
		const int nc = upTo<BC>(causal, j0, r0);
		if (nc > 0) {
			float s[NB][4];
			scores<NB, D>(s, qs + warp * 16 * LT, LT, ks[st], LT, 0, nc);
			float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
			for (int n = 0; n < NB; n++)
#pragma unroll
				for (int i = 0; i < 4; i++) {
					const int j = j0 + 8 * n + 2 * t + (i & 1), r = r0 + g + 8 * (i >> 1);
					s[n][i] = j < seq && !(causal && j > r) ? s[n][i] * sl : -INFINITY;
					mx[i >> 1] = fmaxf(mx[i >> 1], s[n][i]);
				}
			float base[2];
#pragma unroll
			for (int hh = 0; hh < 2; hh++) {
				const float mn = fmaxf(m[hh], quadMax(mx[hh]));
				base[hh] = mn == -INFINITY ? 0.f : mn;
				const float alpha = exp2f(m[hh] - base[hh]);
				m[hh] = mn;
				l[hh] *= alpha;
#pragma unroll
				for (int n = 0; n < D / 8; n++) o.at(n, 2 * hh) *= alpha, o.at(n, 2 * hh + 1) *= alpha;
			}
#pragma unroll
			for (int n = 0; n < NB; n++)
#pragma unroll
				for (int i = 0; i < 4; i++) {
					s[n][i] = exp2f(s[n][i] - base[i >> 1]);
					l[i >> 1] += s[n][i];
				}
			uint32_t p[NB / 2][4];
			pack(s, p);
			accumulate(o, p, 0, nc, vs[st], LT);
		}
		__syncthreads(); // stage st is read
	}
#pragma unroll
	for (int hh = 0; hh < 2; hh++) {
		const float sum = quadSum(l[hh]);
		const int row = r0 + g + 8 * hh;
		if (row >= seq) continue;
		const float inv = 1 / sum;
		bf16 *po = out + ((long long)b * seq + row) * hid + (long long)h * D + 2 * t;
#pragma unroll
		for (int n = 0; n < D / 8; n++) {
			po[8 * n] = fromF<bf16>(o.at(n, 2 * hh) * inv);
			po[8 * n + 1] = fromF<bf16>(o.at(n, 2 * hh + 1) * inv);
		}
		if (t == 0) lse[((long long)b * heads + h) * seq + row] = (m[hh] + log2f(sum)) * LN2;
	}
}

template <int D>
__device__ __forceinline__ void flash_dq_bf16(const bf16 *qkv, const float *lse, const float *dv, const bf16 *dout, bf16 *dqkv, int seq,
                                              int heads, int kv, int hid, int causal, float scale) {
	constexpr int W = FlashBF16<D>::QW, BC = FlashBF16<D>::QC, BR = 16 * W, LT = D + 8, NB = BC / 8;
	__shared__ __align__(16) bf16 qs[BR * LT];
	__shared__ __align__(16) bf16 dos[BR * LT];
	__shared__ __align__(16) bf16 ks[2][BC * LT];
	__shared__ __align__(16) bf16 vs[2][BC * LT];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const int i0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z;
	const Heads at(b, h, seq, heads, kv, hid, D);
	const int r0 = i0 + warp * 16;
	const float sl = scale * LOG2E;
	const long long bh = ((long long)b * heads + h) * seq;
	float lr[2], dr[2];
#pragma unroll
	for (int hh = 0; hh < 2; hh++) {
		const int row = r0 + g + 8 * hh;
		lr[hh] = row < seq ? lse[bh + row] * LOG2E : 0.f;
		dr[hh] = row < seq ? dv[bh + row] : 0.f;
	}
	Frags<D / 8> dq;
	const int tiles = keyTiles<BR, BC>(causal, seq, i0);
	loadTileAsync<D>(qs, qkv + at.q, at.ld, i0, BR, seq);
	loadTileAsync<D>(dos, dout + (long long)b * seq * hid + (long long)h * D, hid, i0, BR, seq);
	kvTile<D, BC>(ks, vs, qkv + at.k, qkv + at.v, at.ld, 0, seq);
	cpAsyncCommit();
#pragma unroll 1
	for (int it = 0; it < tiles; it++) {
		const int j0 = it * BC, st = it & 1;
		nextKV<D, BC>(ks, vs, qkv + at.k, qkv + at.v, at.ld, it, tiles, seq);
		const int nc = upTo<BC>(causal, j0, r0);
		if (nc > 0) {
			float s[NB][4], dp[NB][4];
			scores<NB, D>(s, qs + warp * 16 * LT, LT, ks[st], LT, 0, nc);   // S = Q Kᵀ
			scores<NB, D>(dp, dos + warp * 16 * LT, LT, vs[st], LT, 0, nc); // dP = dO Vᵀ
#pragma unroll
			for (int n = 0; n < NB; n++)
#pragma unroll
				for (int i = 0; i < 4; i++) {
					const int j = j0 + 8 * n + 2 * t + (i & 1), r = r0 + g + 8 * (i >> 1);
					const bool keep = r < seq && j < seq && !(causal && j > r);
					const float p = keep ? exp2f(s[n][i] * sl - lr[i >> 1]) : 0.f;
					s[n][i] = p * (dp[n][i] - dr[i >> 1]) * scale; // dS
				}
			uint32_t ds[NB / 2][4];
			pack(s, ds);
			accumulate(dq, ds, 0, nc, ks[st], LT); // dQ += dS K
		}
		__syncthreads(); // stage st is read
	}
#pragma unroll
	for (int hh = 0; hh < 2; hh++) {
		const int row = r0 + g + 8 * hh;
		if (row >= seq) continue;
		bf16 *p = dqkv + at.q + (long long)row * at.ld + 2 * t;
#pragma unroll
		for (int n = 0; n < D / 8; n++) {
			p[8 * n] = fromF<bf16>(dq.at(n, 2 * hh));
			p[8 * n + 1] = fromF<bf16>(dq.at(n, 2 * hh + 1));
		}
	}
}

template <int D>
__device__ __forceinline__ void flash_dkdv_bf16(const bf16 *qkv, const float *lse, const float *dv, const bf16 *dout, bf16 *dqkv, int seq,
                                                int heads, int kv, int hid, int causal, float scale) {
	constexpr int W = FlashBF16<D>::KW, BQ = FlashBF16<D>::KC, BK = 16 * W, LT = D + 8, NB = BQ / 8;
	__shared__ __align__(16) bf16 ks[BK * LT];
	__shared__ __align__(16) bf16 vs[BK * LT];
	__shared__ __align__(16) bf16 qs[BQ * LT];
	__shared__ __align__(16) bf16 dos[BQ * LT];
	__shared__ float ls[BQ], dvs[BQ];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const int j0 = blockIdx.x * BK, kh = blockIdx.y, b = blockIdx.z, group = heads / kv;
	const Heads at(b, kh * group, seq, heads, kv, hid, D); // k and v are every group head's
	const int k0 = j0 + warp * 16;                          // the warp's first key
	const float sl = scale * LOG2E;
	loadTileAsync<D>(ks, qkv + at.k, at.ld, j0, BK, seq);
	loadTileAsync<D>(vs, qkv + at.v, at.ld, j0, BK, seq);
	Frags<D / 8> dk, dvv;
	for (int gi = 0; gi < group; gi++) {
		const int h = kh * group + gi;
		const long long q = at.q + (long long)gi * D, bh = ((long long)b * heads + h) * seq;
		const bf16 *dob = dout + (long long)b * seq * hid + (long long)h * D;
		for (int i0 = causal ? j0 / BQ * BQ : 0; i0 < seq; i0 += BQ) {
			__syncthreads();
			loadTileAsync<D>(qs, qkv + q, at.ld, i0, BQ, seq);
			loadTileAsync<D>(dos, dob, hid, i0, BQ, seq);
			for (int c = threadIdx.x; c < BQ; c += blockDim.x) {
				ls[c] = i0 + c < seq ? lse[bh + i0 + c] * LOG2E : 0.f;
				dvs[c] = i0 + c < seq ? dv[bh + i0 + c] : 0.f;
			}
			cpAsyncCommit();
			cpAsyncWait<0>();
			__syncthreads();
			const int c0 = from(causal, i0, k0);
			if (c0 >= NB / 2) continue;
			float st[NB][4], dpt[NB][4];
			scores<NB, D>(st, ks + warp * 16 * LT, LT, qs, LT, c0, NB / 2);   // Sᵀ = K Qᵀ
			scores<NB, D>(dpt, vs + warp * 16 * LT, LT, dos, LT, c0, NB / 2); // dPᵀ = V dOᵀ
#pragma unroll
			for (int n = 0; n < NB; n++)
#pragma unroll
				for (int i = 0; i < 4; i++) {
					const int c = 8 * n + 2 * t + (i & 1), qi = i0 + c, key = k0 + g + 8 * (i >> 1);
					const bool keep = key < seq && qi < seq && !(causal && key > qi);
					const float p = keep ? exp2f(st[n][i] * sl - ls[c]) : 0.f;
					st[n][i] = p;
					dpt[n][i] = p * (dpt[n][i] - dvs[c]) * scale; // dSᵀ
				}
			uint32_t pa[NB / 2][4];
			pack(st, pa);
			accumulate(dvv, pa, c0, NB / 2, dos, LT); // dV += Pᵀ dO
			pack(dpt, pa);
			accumulate(dk, pa, c0, NB / 2, qs, LT); // dK += dSᵀ Q
		}
	}
#pragma unroll
	for (int hh = 0; hh < 2; hh++) {
		const int key = k0 + g + 8 * hh;
		if (key >= seq) continue;
		bf16 *pk = dqkv + at.k + (long long)key * at.ld + 2 * t, *pv = dqkv + at.v + (long long)key * at.ld + 2 * t;
#pragma unroll
		for (int n = 0; n < D / 8; n++) {
			pk[8 * n] = fromF<bf16>(dk.at(n, 2 * hh));
			pk[8 * n + 1] = fromF<bf16>(dk.at(n, 2 * hh + 1));
			pv[8 * n] = fromF<bf16>(dvv.at(n, 2 * hh));
			pv[8 * n + 1] = fromF<bf16>(dvv.at(n, 2 * hh + 1));
		}
	}
}

// ---- fp32: fused multiply-adds ----

// FlashF32 are a width's tile sizes, as FlashBF16's. The fp32 instances
// are there for correctness: their products are not the tensor cores', and
// they may take up to 255 registers rather than spill.
template <int D> struct FlashF32 {
	static_assert(D % 16 == 0 && D <= 64, "fp32 flash attention takes head widths of 16, 32 or 64");
	static constexpr int FW = D <= 32 ? 4 : 2, FC = 32, FB = 1;
	static constexpr int QW = D <= 32 ? 2 : 1, QC = 32, QB = 1;
	static constexpr int KW = D <= 32 ? 2 : 1, KC = 32, KB = 1;
};

// Dot<N, K> are a warp's products over shared memory, all row-major, lane
// l owning row l/2 of the warp's 16 and of each row the columns of l's
// parity: abt sets C [16][N] (row stride ldc) to A Bᵀ with A [16][K] and B
// [N][K]; abAdd adds A B, with B [K][N], to acc, the lane's elements of a
// [16][N] accumulator.
template <int N, int K> struct Dot {
	static __device__ __forceinline__ void abt(float *C, int ldc, const float *A, int lda, const float *B, int ldb) {
		const int lane = threadIdx.x & 31, r = lane >> 1;
		for (int c = lane & 1; c < N; c += 2) {
			float s = 0;
			for (int k = 0; k < K; k++) s = fmaf(A[r * lda + k], B[c * ldb + k], s);
			C[r * ldc + c] = s;
		}
	}
	static __device__ __forceinline__ void abAdd(float (&acc)[N / 2], const float *A, int lda, const float *B, int ldb) {
		const int lane = threadIdx.x & 31, r = lane >> 1;
#pragma unroll
		for (int t = 0; t < N / 2; t++) {
			const int c = (lane & 1) + 2 * t;
			float s = 0;
			for (int k = 0; k < K; k++) s = fmaf(A[r * lda + k], B[k * ldb + c], s);
			acc[t] += s;
		}
	}
};

// The row stride of a warp's fp32 scratch for C columns of a D-wide head.
__host__ __device__ constexpr int ns(int c, int d) { return (c > d ? c : d) + 4; }

template <int D>
__device__ __forceinline__ void flash_fwd_f32(const float *qkv, float *out, float *lse, int seq, int heads, int kv, int hid, int causal,
                                              float scale) {
	constexpr int W = FlashF32<D>::FW, BC = FlashF32<D>::FC, BR = 16 * W, LT = D + 8, NS = ns(BC, D);
	__shared__ __align__(16) float qs[BR * LT];
	__shared__ __align__(16) float ks[BC * LT];
	__shared__ __align__(16) float vs[BC * LT];
	__shared__ __align__(16) float scratch[W * 16 * NS];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
	const int i0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z;
	const Heads at(b, h, seq, heads, kv, hid, D);
	const int row = i0 + warp * 16 + r;
	float *S = scratch + warp * 16 * NS; // the scores, then the probabilities over them
	loadTile<float, D>(qs, qkv + at.q, at.ld, i0, BR, seq);
	float m = -INFINITY, l = 0, o[D / 2];
#pragma unroll
	for (int t = 0; t < D / 2; t++) o[t] = 0;
	const int kend = causal ? min(seq, i0 + BR) : seq;
	for (int j0 = 0; j0 < kend; j0 += BC) {
		__syncthreads(); // the last tiles are read
		loadTile<float, D>(ks, qkv + at.k, at.ld, j0, BC, seq);
		loadTile<float, D>(vs, qkv + at.v, at.ld, j0, BC, seq);
		__syncthreads();
		Dot<BC, D>::abt(S, NS, qs + warp * 16 * LT, LT, ks, LT);
		__syncwarp();
		float sv[BC / 2], mx = -INFINITY;
#pragma unroll
		for (int t = 0; t < BC / 2; t++) {
			const int j = j0 + half + 2 * t;
			const bool keep = j < seq && !(causal && j > row);
			sv[t] = keep ? S[r * NS + half + 2 * t] * scale : -INFINITY;
			mx = fmaxf(mx, sv[t]);
		}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		const float mn = fmaxf(m, mx), base = mn == -INFINITY ? 0.f : mn;
		const float alpha = expf(m - base);
		float sum = 0;
#pragma unroll
		for (int t = 0; t < BC / 2; t++) {
			const float p = expf(sv[t] - base);
			sum += p;
			S[r * NS + half + 2 * t] = p; // each lane writes what it read
		}
		sum += __shfl_xor_sync(0xffffffffu, sum, 1);
		l = l * alpha + sum;
		m = mn;
#pragma unroll
		for (int t = 0; t < D / 2; t++) o[t] *= alpha;
		__syncwarp();
		Dot<D, BC>::abAdd(o, S, NS, vs, LT);
	}
	if (row < seq) {
		const float inv = 1 / l;
		float *po = out + ((long long)b * seq + row) * hid + (long long)h * D;
#pragma unroll
		for (int t = 0; t < D / 2; t++) po[half + 2 * t] = o[t] * inv;
		if (half == 0) lse[((long long)b * heads + h) * seq + row] = m + logf(l);
	}
}

template <int D>
__device__ __forceinline__ void flash_dq_f32(const float *qkv, const float *lse, const float *dv, const float *dout, float *dqkv, int seq,
                                             int heads, int kv, int hid, int causal, float scale) {
	constexpr int W = FlashF32<D>::QW, BC = FlashF32<D>::QC, BR = 16 * W, LT = D + 8, NS = ns(BC, D);
	__shared__ __align__(16) float qs[BR * LT];
	__shared__ __align__(16) float dos[BR * LT];
	__shared__ __align__(16) float ks[BC * LT];
	__shared__ __align__(16) float vs[BC * LT];
	__shared__ __align__(16) float scratch[W * 2 * 16 * NS];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
	const int i0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z;
	const Heads at(b, h, seq, heads, kv, hid, D);
	const int row = i0 + warp * 16 + r;
	float *S = scratch + warp * 2 * 16 * NS, *dP = S + 16 * NS; // dS goes over S
	loadTile<float, D>(qs, qkv + at.q, at.ld, i0, BR, seq);
	loadTile<float, D>(dos, dout + (long long)b * seq * hid + (long long)h * D, hid, i0, BR, seq);
	const long long bh = ((long long)b * heads + h) * seq;
	const float lr = row < seq ? lse[bh + row] : 0.f, dr = row < seq ? dv[bh + row] : 0.f;
	float dq[D / 2];
#pragma unroll
	for (int t = 0; t < D / 2; t++) dq[t] = 0;
	const int kend = causal ? min(seq, i0 + BR) : seq;
	for (int j0 = 0; j0 < kend; j0 += BC) {
		__syncthreads();
		loadTile<float, D>(ks, qkv + at.k, at.ld, j0, BC, seq);
		loadTile<float, D>(vs, qkv + at.v, at.ld, j0, BC, seq);
		__syncthreads();
		Dot<BC, D>::abt(S, NS, qs + warp * 16 * LT, LT, ks, LT);
		Dot<BC, D>::abt(dP, NS, dos + warp * 16 * LT, LT, vs, LT);
		__syncwarp();
#pragma unroll
		for (int t = 0; t < BC / 2; t++) {
			const int c = half + 2 * t, j = j0 + c;
			const bool keep = row < seq && j < seq && !(causal && j > row);
			const float p = keep ? expf(S[r * NS + c] * scale - lr) : 0.f;
			S[r * NS + c] = p * (dP[r * NS + c] - dr) * scale;
		}
		__syncwarp();
		Dot<D, BC>::abAdd(dq, S, NS, ks, LT);
	}
	if (row < seq) {
		float *p = dqkv + at.q + (long long)row * at.ld;
#pragma unroll
		for (int t = 0; t < D / 2; t++) p[half + 2 * t] = dq[t];
	}
}

template <int D>
__device__ __forceinline__ void flash_dkdv_f32(const float *qkv, const float *lse, const float *dv, const float *dout, float *dqkv, int seq,
                                               int heads, int kv, int hid, int causal, float scale) {
	constexpr int W = FlashF32<D>::KW, BQ = FlashF32<D>::KC, BK = 16 * W, LT = D + 8, NS = ns(BQ, D);
	__shared__ __align__(16) float ks[BK * LT];
	__shared__ __align__(16) float vs[BK * LT];
	__shared__ __align__(16) float qs[BQ * LT];
	__shared__ __align__(16) float dos[BQ * LT];
	__shared__ float ls[BQ], dvs[BQ];
	__shared__ __align__(16) float scratch[W * 2 * 16 * NS];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
	const int j0 = blockIdx.x * BK, kh = blockIdx.y, b = blockIdx.z, group = heads / kv;
	const Heads at(b, kh * group, seq, heads, kv, hid, D); // k and v are every group head's
	const int key = j0 + warp * 16 + r;
	float *Pt = scratch + warp * 2 * 16 * NS, *dSt = Pt + 16 * NS; // over Sᵀ and dPᵀ
	loadTile<float, D>(ks, qkv + at.k, at.ld, j0, BK, seq);
	loadTile<float, D>(vs, qkv + at.v, at.ld, j0, BK, seq);
	float dk[D / 2], dvv[D / 2];
#pragma unroll
	for (int t = 0; t < D / 2; t++) dk[t] = dvv[t] = 0;
	for (int g = 0; g < group; g++) {
		const int h = kh * group + g;
		const long long q = at.q + (long long)g * D, bh = ((long long)b * heads + h) * seq;
		const float *dob = dout + (long long)b * seq * hid + (long long)h * D;
		for (int i0 = causal ? j0 / BQ * BQ : 0; i0 < seq; i0 += BQ) {
			__syncthreads();
			loadTile<float, D>(qs, qkv + q, at.ld, i0, BQ, seq);
			loadTile<float, D>(dos, dob, hid, i0, BQ, seq);
			for (int c = threadIdx.x; c < BQ; c += blockDim.x) {
				ls[c] = i0 + c < seq ? lse[bh + i0 + c] : 0.f;
				dvs[c] = i0 + c < seq ? dv[bh + i0 + c] : 0.f;
			}
			__syncthreads();
			Dot<BQ, D>::abt(Pt, NS, ks + warp * 16 * LT, LT, qs, LT);   // Sᵀ = K Qᵀ
			Dot<BQ, D>::abt(dSt, NS, vs + warp * 16 * LT, LT, dos, LT); // dPᵀ = V dOᵀ
			__syncwarp();
#pragma unroll
			for (int t = 0; t < BQ / 2; t++) {
				const int c = half + 2 * t, i = i0 + c;
				const bool keep = key < seq && i < seq && !(causal && key > i);
				const float p = keep ? expf(Pt[r * NS + c] * scale - ls[c]) : 0.f;
				Pt[r * NS + c] = p;
				dSt[r * NS + c] = p * (dSt[r * NS + c] - dvs[c]) * scale;
			}
			__syncwarp();
			Dot<D, BQ>::abAdd(dvv, Pt, NS, dos, LT); // dV += Pᵀ dO
			Dot<D, BQ>::abAdd(dk, dSt, NS, qs, LT);  // dK += dSᵀ Q
		}
	}
	if (key < seq) {
		float *pk = dqkv + at.k + (long long)key * at.ld, *pv = dqkv + at.v + (long long)key * at.ld;
#pragma unroll
		for (int t = 0; t < D / 2; t++) {
			pk[half + 2 * t] = dk[t];
			pv[half + 2 * t] = dvv[t];
		}
	}
}

#define FLASH(T, N, D, CFG)                                                                                                           \
	KERNEL __launch_bounds__(32 * CFG<D>::FW, CFG<D>::FB)                                                            \
	    flash_fwd_##N##_d##D(const T *qkv, T *out, float *lse, int seq, int heads, int kv, int hid, int causal, float scale) {     \
		flash_fwd_##N<D>(qkv, out, lse, seq, heads, kv, hid, causal, scale);                                                       \
	}                                                                                                                              \
	KERNEL __launch_bounds__(32 * CFG<D>::QW, CFG<D>::QB)                                                            \
	    flash_dq_##N##_d##D(const T *qkv, const float *lse, const float *dv, const T *dout, T *dqkv, int seq, int heads, int kv,   \
	                        int hid, int causal, float scale) {                                                                    \
		flash_dq_##N<D>(qkv, lse, dv, dout, dqkv, seq, heads, kv, hid, causal, scale);                                             \
	}                                                                                                                              \
	KERNEL __launch_bounds__(32 * CFG<D>::KW, CFG<D>::KB)                                                            \
	    flash_dkdv_##N##_d##D(const T *qkv, const float *lse, const float *dv, const T *dout, T *dqkv, int seq, int heads, int kv, \
	                          int hid, int causal, float scale) {                                                                  \
		flash_dkdv_##N<D>(qkv, lse, dv, dout, dqkv, seq, heads, kv, hid, causal, scale);                                           \
	}

FLASH(float, f32, 16, FlashF32)
FLASH(float, f32, 32, FlashF32)
FLASH(float, f32, 64, FlashF32)
FLASH(bf16, bf16, 16, FlashBF16)
FLASH(bf16, bf16, 32, FlashBF16)
FLASH(bf16, bf16, 64, FlashBF16)
FLASH(bf16, bf16, 128, FlashBF16)

// flash_prep_T sets dv [batch, heads, seq] to rowsum(dO ⊙ O) of each row
// and head, in float.
template <class T>
__device__ __forceinline__ void flash_prep_t(const T *out, const T *dout, float *dv, int batch, int seq, int heads, int d) {
	const long long n = (long long)batch * heads * seq;
	const int hid = heads * d;
	for (long long e = gtid(); e < n; e += gstride()) {
		const int i = (int)(e % seq), h = (int)(e / seq % heads);
		const long long b = e / seq / heads, at = (b * seq + i) * hid + (long long)h * d;
		float s = 0;
		for (int k = 0; k < d; k++) s = fmaf(toF(dout[at + k]), toF(out[at + k]), s);
		dv[e] = s;
	}
}

KERNEL __launch_bounds__(THREADS) flash_prep_f32(const float *out, const float *dout, float *dv, int batch, int seq, int heads, int d) {
	flash_prep_t(out, dout, dv, batch, seq, heads, d);
}
KERNEL __launch_bounds__(THREADS) flash_prep_bf16(const bf16 *out, const bf16 *dout, float *dv, int batch, int seq, int heads, int d) {
	flash_prep_t(out, dout, dv, batch, seq, heads, d);
}
