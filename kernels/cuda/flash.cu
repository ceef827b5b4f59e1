// Flash attention (graph.Attention with Flash; Dao et al., 2022, in
// FlashAttention-2's loop order): attention over packed projections qkv
// [batch·seq, hid + 2·kv·D] (see attention.go) that never writes a score
// to memory. A block takes 16 rows a warp of one sequence and head, walks
// over the other side's rows a tile at a time through shared memory, and
// keeps its running results in registers (in shared memory for 128-wide
// heads); the scores of a tile live in the
// warp's scratch in shared memory, fp32, and the probabilities computed
// from them are written over them in the element type for the next
// product.
//
// The tile products (Tile) are a warp's: on bf16 the tensor cores' 16×16×16
// products (WMMA, fp32 accumulation), on fp32 plain fused multiply-adds.
// Lane l of a warp owns row l/2 of the warp's 16 rows and of each row the
// columns of l's parity, for the softmax and the accumulators alike.
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
// Head widths D of 16, 32 and 64, and 128 in bf16 (LLaMA's and GPT-3's),
// each an instance with its own tile sizes (FlashCfg): shared memory stays
// under the 48 KiB a static allocation may take, and bf16's registers at
// 128 a thread without spilling. For 128, a warp's accumulators (O, dQ, dK
// and dV) live in shared memory rather than in its lanes' registers
// (Rows), the products added into them a 16-column tile at a time.
#include "common.cuh"

#include <mma.h>
#include <type_traits>

// Tile<T, N, K> are a warp's products over shared memory, all row-major:
// abt sets fp32 C [16][N] (row stride ldc) to A Bᵀ with A [16][K] and B
// [N][K]; abAdd adds A B, with B [K][N], to acc, the lane's elements of a
// [16][N] accumulator (row lane/2, the columns of the lane's parity), with
// C as scratch that may be A's memory (the probabilities written over the
// scores they came from): the tensor cores' path reads all of A before it
// writes C; abAcc adds A B to fp32 C [16][N] in shared memory, which must
// not be A's. Each is called by every lane of the warp.
template <class T, int N, int K> struct Tile {
	static __device__ __forceinline__ void abt(float *C, int ldc, const T *A, int lda, const T *B, int ldb) {
		const int lane = threadIdx.x & 31, r = lane >> 1;
		for (int c = lane & 1; c < N; c += 2) {
			float s = 0;
			for (int k = 0; k < K; k++) s = fmaf(toF(A[r * lda + k]), toF(B[c * ldb + k]), s);
			C[r * ldc + c] = s;
		}
	}
	static __device__ __forceinline__ void abAdd(float (&acc)[N / 2], float *, int, const T *A, int lda, const T *B, int ldb) {
		const int lane = threadIdx.x & 31, r = lane >> 1;
#pragma unroll
		for (int t = 0; t < N / 2; t++) {
			const int c = (lane & 1) + 2 * t;
			float s = 0;
			for (int k = 0; k < K; k++) s = fmaf(toF(A[r * lda + k]), toF(B[k * ldb + c]), s);
			acc[t] += s;
		}
	}
	static __device__ __forceinline__ void abAcc(float *C, int ldc, const T *A, int lda, const T *B, int ldb) {
		const int lane = threadIdx.x & 31, r = lane >> 1;
		for (int c = lane & 1; c < N; c += 2) {
			float s = 0;
			for (int k = 0; k < K; k++) s = fmaf(toF(A[r * lda + k]), toF(B[k * ldb + c]), s);
			C[r * ldc + c] += s;
		}
		__syncwarp();
	}
};

template <int N, int K> struct Tile<bf16, N, K> {
	typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> Acc;
	typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, bf16, nvcuda::wmma::row_major> FragA;

	static __device__ __forceinline__ void store(float *C, int ldc, Acc (&acc)[N / 16]) {
		__syncwarp();
#pragma unroll
		for (int n = 0; n < N / 16; n++) nvcuda::wmma::store_matrix_sync(C + n * 16, acc[n], ldc, nvcuda::wmma::mem_row_major);
	}
	// product sets acc to A Bᵀ (TB) or A B, B's 16×16 tiles read in the
	// layout that makes them Bᵀ's or B's.
	template <bool TB> static __device__ __forceinline__ void product(Acc (&acc)[N / 16], const bf16 *A, int lda, const bf16 *B, int ldb) {
		using namespace nvcuda;
		typedef typename std::conditional<TB, wmma::col_major, wmma::row_major>::type LayoutB;
#pragma unroll
		for (int n = 0; n < N / 16; n++) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
		for (int k = 0; k < K; k += 16) {
			FragA a;
			wmma::load_matrix_sync(a, A + k, lda);
#pragma unroll
			for (int n = 0; n < N / 16; n++) {
				wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LayoutB> b;
				wmma::load_matrix_sync(b, TB ? B + n * 16 * ldb + k : B + k * ldb + n * 16, ldb);
				wmma::mma_sync(acc[n], a, b, acc[n]);
			}
		}
	}
	static __device__ __forceinline__ void abt(float *C, int ldc, const bf16 *A, int lda, const bf16 *B, int ldb) {
		Acc acc[N / 16];
		product<true>(acc, A, lda, B, ldb);
		store(C, ldc, acc);
	}
	static __device__ __forceinline__ void abAdd(float (&out)[N / 2], float *C, int ldc, const bf16 *A, int lda, const bf16 *B, int ldb) {
		Acc acc[N / 16];
		product<false>(acc, A, lda, B, ldb);
		store(C, ldc, acc);
		__syncwarp();
		const int lane = threadIdx.x & 31, r = lane >> 1;
#pragma unroll
		for (int t = 0; t < N / 2; t++) out[t] += C[r * ldc + (lane & 1) + 2 * t];
	}
	// abAcc adds A B to C in shared memory a 16-column tile at a time, so
	// that a wide C needs one accumulator fragment of registers.
	static __device__ __forceinline__ void abAcc(float *C, int ldc, const bf16 *A, int lda, const bf16 *B, int ldb) {
		using namespace nvcuda;
		__syncwarp(); // the lanes' writes to C are in
#pragma unroll 1
		for (int n = 0; n < N / 16; n++) {
			Acc acc;
			wmma::load_matrix_sync(acc, C + n * 16, ldc, wmma::mem_row_major);
#pragma unroll
			for (int k = 0; k < K; k += 16) {
				FragA a;
				wmma::load_matrix_sync(a, A + k, lda);
				wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
				wmma::load_matrix_sync(b, B + k * ldb + n * 16, ldb);
				wmma::mma_sync(acc, a, b, acc);
			}
			wmma::store_matrix_sync(C + n * 16, acc, ldc, wmma::mem_row_major);
		}
		__syncwarp();
	}
};

// FlashCfg are an instance's tile sizes: W warps (16·W rows) of the side a
// block owns, and C rows of the other side per tile, for the forward (F),
// dQ (Q) and dK, dV (K) kernels; and MIN/W blocks a multiprocessor must be
// able to hold (__launch_bounds__): for bf16, 16 warps, at most 128
// registers a thread. The fp32 instances, there for correctness (their
// products on FMAs, not tensor cores), may take up to 255 registers rather
// than spill.
template <class T, int D> struct FlashCfg;
template <int D> struct FlashCfg<bf16, D> {
	static_assert(D <= 128, "bf16 flash attention takes head widths up to 128");
	static constexpr int FW = D <= 64 ? 4 : 2, FC = D <= 64 ? 64 : 32;
	static constexpr int QW = D <= 64 ? 2 : 1, QC = 32;
	static constexpr int KW = D <= 64 ? 2 : 1, KC = D <= 64 ? 32 : 16;
	static constexpr int MIN = 16;
	static constexpr bool SMEM = D > 64;
};
template <int D> struct FlashCfg<float, D> {
	static_assert(D <= 64, "fp32 flash attention takes head widths up to 64");
	static constexpr int FW = D <= 32 ? 4 : 2, FC = 32;
	static constexpr int QW = D <= 32 ? 2 : 1, QC = 32;
	static constexpr int KW = D <= 32 ? 2 : 1, KC = 32;
	static constexpr int MIN = 1;
	static constexpr bool SMEM = false;
};

// Rows<T, D, C, SMEM> is a warp's [16][D] fp32 accumulator of products of
// C-deep tiles: in the lanes' registers (lane l: row l/2, the columns of
// l's parity), or with SMEM in shared memory (row stride D + 4), for heads
// too wide for registers. add's scratch (fp32 [16][D], row stride ns) is
// the register path's and may be A's memory.
template <class T, int D, int C, bool SMEM> struct Rows;
template <class T, int D, int C> struct Rows<T, D, C, false> {
	static constexpr int WARP = 0; // shared floats a warp takes
	float v[D / 2];
	__device__ __forceinline__ void init(float *) {
#pragma unroll
		for (int t = 0; t < D / 2; t++) v[t] = 0;
	}
	__device__ __forceinline__ void scale(float a) {
#pragma unroll
		for (int t = 0; t < D / 2; t++) v[t] *= a;
	}
	__device__ __forceinline__ void add(float *scratch, int ns, const T *A, int lda, const T *B, int ldb) {
		Tile<T, D, C>::abAdd(v, scratch, ns, A, lda, B, ldb);
	}
	__device__ __forceinline__ float get(int t) const { return v[t]; }
};
template <class T, int D, int C> struct Rows<T, D, C, true> {
	static constexpr int LD = D + 4, WARP = 16 * LD;
	float *rows; // the warp's [16][LD]
	float *mine; // the lane's row, at its parity's first column
	__device__ __forceinline__ void init(float *warpRows) {
		const int lane = threadIdx.x & 31;
		rows = warpRows;
		mine = warpRows + (lane >> 1) * LD + (lane & 1);
		for (int t = 0; t < D / 2; t++) mine[2 * t] = 0;
	}
	__device__ __forceinline__ void scale(float a) {
		for (int t = 0; t < D / 2; t++) mine[2 * t] *= a;
	}
	__device__ __forceinline__ void add(float *, int, const T *A, int lda, const T *B, int ldb) {
		Tile<T, D, C>::abAcc(rows, LD, A, lda, B, ldb);
	}
	__device__ __forceinline__ float get(int t) const { return mine[2 * t]; }
};

// Row strides in shared memory: tiles of D elements take LT (16-byte rows,
// 32-byte aligned 16-row blocks, fewer bank conflicts); fp32 scratch for C
// columns takes ns(C) floats.
template <int D> struct Strides {
	static constexpr int LT = D + 8;
};
__host__ __device__ constexpr int ns(int c, int d, bool smem) { return (c > d || smem ? c : d) + 4; }

// loadTile copies rows [r0, r0 + rows) of a D-column view (row stride ld)
// into dst (row stride LT), zeros past row seq.
template <class T, int D>
__device__ __forceinline__ void loadTile(T *dst, const T *src, int ld, int r0, int rows, int seq) {
	constexpr int V = VW<T>::N, CV = D / V, LT = Strides<D>::LT;
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

// inplace<T>() says whether probabilities of type T go over the very scores
// (fp32) they come from, element for element, so that each lane writes
// only what it read; else (bf16: two to a score's four bytes) a lane
// writes over its partner's scores, so all are read first.
template <class T> __host__ __device__ constexpr bool inplace() { return sizeof(T) == sizeof(float); }

// fexp is exp in fp32, the fast hardware one for bf16 (whose inputs carry 8
// bits), the accurate one for fp32.
__device__ __forceinline__ float fexp(float x, float) { return expf(x); }
__device__ __forceinline__ float fexp(float x, bf16) { return __expf(x); }

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

template <class T, int D>
__device__ __forceinline__ void flash_fwd_t(const T *qkv, T *out, float *lse, int seq, int heads, int kv, int hid, int causal, float scale) {
	constexpr bool SM = FlashCfg<T, D>::SMEM;
	constexpr int W = FlashCfg<T, D>::FW, BC = FlashCfg<T, D>::FC, BR = 16 * W, LT = Strides<D>::LT, NS = ns(BC, D, SM);
	constexpr int PS = NS * (int)(sizeof(float) / sizeof(T)); // P's row stride over the scratch
	typedef Rows<T, D, BC, SM> O;
	__shared__ __align__(32) T qs[BR * LT];
	__shared__ __align__(32) T ks[BC * LT];
	__shared__ __align__(32) T vs[BC * LT];
	__shared__ __align__(32) float scratch[W * 16 * NS];
	__shared__ __align__(32) float rows[SM ? W * O::WARP : 1];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
	const int i0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z;
	const Heads at(b, h, seq, heads, kv, hid, D);
	const int row = i0 + warp * 16 + r;
	float *S = scratch + warp * 16 * NS;
	T *P = reinterpret_cast<T *>(S);
	loadTile<T, D>(qs, qkv + at.q, at.ld, i0, BR, seq);
	float m = -INFINITY, l = 0;
	O o;
	o.init(rows + warp * O::WARP);
	const int kend = causal ? min(seq, i0 + BR) : seq;
	for (int j0 = 0; j0 < kend; j0 += BC) {
		__syncthreads(); // the last tiles are read
		loadTile<T, D>(ks, qkv + at.k, at.ld, j0, BC, seq);
		loadTile<T, D>(vs, qkv + at.v, at.ld, j0, BC, seq);
		__syncthreads();
		Tile<T, BC, D>::abt(S, NS, qs + warp * 16 * LT, LT, ks, LT);
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
		const float alpha = fexp(m - base, T());
		float sum = 0;
		__syncwarp(); // every lane has read its scores before P goes over them
#pragma unroll
		for (int t = 0; t < BC / 2; t++) {
			const float p = fexp(sv[t] - base, T());
			sum += p;
			P[r * PS + half + 2 * t] = fromF<T>(p);
		}
		sum += __shfl_xor_sync(0xffffffffu, sum, 1);
		l = l * alpha + sum;
		m = mn;
		o.scale(alpha);
		__syncwarp();
		o.add(S, NS, P, PS, vs, LT);
	}
	if (row < seq) {
		const float inv = 1 / l;
		T *po = out + ((long long)b * seq + row) * hid + (long long)h * D;
#pragma unroll
		for (int t = 0; t < D / 2; t++) po[half + 2 * t] = fromF<T>(o.get(t) * inv);
		if (half == 0) lse[((long long)b * heads + h) * seq + row] = m + logf(l);
	}
}

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

template <class T, int D>
__device__ __forceinline__ void flash_dq_t(const T *qkv, const float *lse, const float *dv, const T *dout, T *dqkv, int seq, int heads, int kv,
                                           int hid, int causal, float scale) {
	constexpr bool SM = FlashCfg<T, D>::SMEM;
	constexpr int W = FlashCfg<T, D>::QW, BC = FlashCfg<T, D>::QC, BR = 16 * W, LT = Strides<D>::LT, NS = ns(BC, D, SM);
	constexpr int PS = NS * (int)(sizeof(float) / sizeof(T));
	typedef Rows<T, D, BC, SM> DQ;
	__shared__ __align__(32) float rows[SM ? W * DQ::WARP : 1];
	__shared__ __align__(32) T qs[BR * LT];
	__shared__ __align__(32) T dos[BR * LT];
	__shared__ __align__(32) T ks[BC * LT];
	__shared__ __align__(32) T vs[BC * LT];
	__shared__ __align__(32) float scratch[W * 2 * 16 * NS];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
	const int i0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z;
	const Heads at(b, h, seq, heads, kv, hid, D);
	const int row = i0 + warp * 16 + r;
	float *S = scratch + warp * 2 * 16 * NS, *dP = S + 16 * NS;
	T *dS = reinterpret_cast<T *>(S);
	loadTile<T, D>(qs, qkv + at.q, at.ld, i0, BR, seq);
	loadTile<T, D>(dos, dout + (long long)b * seq * hid + (long long)h * D, hid, i0, BR, seq);
	const long long bh = ((long long)b * heads + h) * seq;
	const float lr = row < seq ? lse[bh + row] : 0.f, dr = row < seq ? dv[bh + row] : 0.f;
	DQ dq;
	dq.init(rows + warp * DQ::WARP);
	const int kend = causal ? min(seq, i0 + BR) : seq;
	for (int j0 = 0; j0 < kend; j0 += BC) {
		__syncthreads();
		loadTile<T, D>(ks, qkv + at.k, at.ld, j0, BC, seq);
		loadTile<T, D>(vs, qkv + at.v, at.ld, j0, BC, seq);
		__syncthreads();
		Tile<T, BC, D>::abt(S, NS, qs + warp * 16 * LT, LT, ks, LT);
		Tile<T, BC, D>::abt(dP, NS, dos + warp * 16 * LT, LT, vs, LT);
		__syncwarp();
		float ds[inplace<T>() ? 1 : BC / 2];
#pragma unroll
		for (int t = 0; t < BC / 2; t++) {
			const int c = half + 2 * t, j = j0 + c;
			const bool keep = row < seq && j < seq && !(causal && j > row);
			const float p = keep ? fexp(S[r * NS + c] * scale - lr, T()) : 0.f;
			const float v = p * (dP[r * NS + c] - dr) * scale;
			if constexpr (inplace<T>()) {
				dS[r * PS + c] = v;
			} else {
				ds[t] = v;
			}
		}
		if constexpr (!inplace<T>()) {
			__syncwarp();
#pragma unroll
			for (int t = 0; t < BC / 2; t++) dS[r * PS + half + 2 * t] = fromF<T>(ds[t]);
		}
		__syncwarp();
		dq.add(dP, NS, dS, PS, ks, LT);
	}
	if (row < seq) {
		T *p = dqkv + at.q + (long long)row * at.ld;
#pragma unroll
		for (int t = 0; t < D / 2; t++) p[half + 2 * t] = fromF<T>(dq.get(t));
	}
}

template <class T, int D>
__device__ __forceinline__ void flash_dkdv_t(const T *qkv, const float *lse, const float *dv, const T *dout, T *dqkv, int seq, int heads,
                                             int kv, int hid, int causal, float scale) {
	constexpr bool SM = FlashCfg<T, D>::SMEM;
	constexpr int W = FlashCfg<T, D>::KW, BQ = FlashCfg<T, D>::KC, BK = 16 * W, LT = Strides<D>::LT, NS = ns(BQ, D, SM);
	constexpr int PS = NS * (int)(sizeof(float) / sizeof(T));
	typedef Rows<T, D, BQ, SM> G;
	__shared__ __align__(32) float rows[SM ? 2 * W * G::WARP : 1];
	__shared__ __align__(32) T ks[BK * LT];
	__shared__ __align__(32) T vs[BK * LT];
	__shared__ __align__(32) T qs[BQ * LT];
	__shared__ __align__(32) T dos[BQ * LT];
	__shared__ float ls[BQ], dvs[BQ];
	__shared__ __align__(32) float scratch[W * 2 * 16 * NS];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
	const int j0 = blockIdx.x * BK, kh = blockIdx.y, b = blockIdx.z, group = heads / kv;
	const Heads at(b, kh * group, seq, heads, kv, hid, D); // k and v are every group head's
	const int key = j0 + warp * 16 + r;
	float *St = scratch + warp * 2 * 16 * NS, *dPt = St + 16 * NS;
	T *Pt = reinterpret_cast<T *>(St), *dSt = reinterpret_cast<T *>(dPt);
	loadTile<T, D>(ks, qkv + at.k, at.ld, j0, BK, seq);
	loadTile<T, D>(vs, qkv + at.v, at.ld, j0, BK, seq);
	G dk, dvv;
	dk.init(rows + warp * G::WARP);
	dvv.init(rows + (W + warp) * G::WARP);
	for (int g = 0; g < group; g++) {
		const int h = kh * group + g;
		const long long q = at.q + (long long)g * D, bh = ((long long)b * heads + h) * seq;
		const T *dob = dout + (long long)b * seq * hid + (long long)h * D;
		for (int i0 = causal ? j0 / BQ * BQ : 0; i0 < seq; i0 += BQ) {
			__syncthreads();
			loadTile<T, D>(qs, qkv + q, at.ld, i0, BQ, seq);
			loadTile<T, D>(dos, dob, hid, i0, BQ, seq);
			for (int c = threadIdx.x; c < BQ; c += blockDim.x) {
				ls[c] = i0 + c < seq ? lse[bh + i0 + c] : 0.f;
				dvs[c] = i0 + c < seq ? dv[bh + i0 + c] : 0.f;
			}
			__syncthreads();
			Tile<T, BQ, D>::abt(St, NS, ks + warp * 16 * LT, LT, qs, LT);   // Sᵀ = K Qᵀ
			Tile<T, BQ, D>::abt(dPt, NS, vs + warp * 16 * LT, LT, dos, LT); // dPᵀ = V dOᵀ
			__syncwarp();
			float p[inplace<T>() ? 1 : BQ / 2], ds[inplace<T>() ? 1 : BQ / 2];
#pragma unroll
			for (int t = 0; t < BQ / 2; t++) {
				const int c = half + 2 * t, i = i0 + c;
				const bool keep = key < seq && i < seq && !(causal && key > i);
				const float pv = keep ? fexp(St[r * NS + c] * scale - ls[c], T()) : 0.f;
				const float dsv = pv * (dPt[r * NS + c] - dvs[c]) * scale;
				if constexpr (inplace<T>()) {
					Pt[r * PS + c] = pv;
					dSt[r * PS + c] = dsv;
				} else {
					p[t] = pv;
					ds[t] = dsv;
				}
			}
			if constexpr (!inplace<T>()) {
				__syncwarp();
#pragma unroll
				for (int t = 0; t < BQ / 2; t++) {
					Pt[r * PS + half + 2 * t] = fromF<T>(p[t]);
					dSt[r * PS + half + 2 * t] = fromF<T>(ds[t]);
				}
			}
			__syncwarp();
			dvv.add(St, NS, Pt, PS, dos, LT); // dV += Pᵀ dO
			dk.add(dPt, NS, dSt, PS, qs, LT); // dK += dSᵀ Q
		}
	}
	if (key < seq) {
		T *pk = dqkv + at.k + (long long)key * at.ld, *pv = dqkv + at.v + (long long)key * at.ld;
#pragma unroll
		for (int t = 0; t < D / 2; t++) {
			pk[half + 2 * t] = fromF<T>(dk.get(t));
			pv[half + 2 * t] = fromF<T>(dvv.get(t));
		}
	}
}

#define FLASH(T, N, D)                                                                                                                        \
	KERNEL __launch_bounds__(32 * FlashCfg<T, D>::FW, FlashCfg<T, D>::MIN / FlashCfg<T, D>::FW)                                                                                      \
	    flash_fwd_##N##_d##D(const T *qkv, T *out, float *lse, int seq, int heads, int kv, int hid, int causal, float scale) {             \
		flash_fwd_t<T, D>(qkv, out, lse, seq, heads, kv, hid, causal, scale);                                                              \
	}                                                                                                                                      \
	KERNEL __launch_bounds__(32 * FlashCfg<T, D>::QW, FlashCfg<T, D>::MIN / FlashCfg<T, D>::QW) flash_dq_##N##_d##D(const T *qkv, const float *lse, const float *dv, const T *dout, \
	                                                                      T *dqkv, int seq, int heads, int kv, int hid, int causal,     \
	                                                                      float scale) {                                                \
		flash_dq_t<T, D>(qkv, lse, dv, dout, dqkv, seq, heads, kv, hid, causal, scale);                                                    \
	}                                                                                                                                      \
	KERNEL __launch_bounds__(32 * FlashCfg<T, D>::KW, FlashCfg<T, D>::MIN / FlashCfg<T, D>::KW)                                                                                      \
	    flash_dkdv_##N##_d##D(const T *qkv, const float *lse, const float *dv, const T *dout, T *dqkv, int seq, int heads, int kv, int hid, \
	                          int causal, float scale) {                                                                                 \
		flash_dkdv_t<T, D>(qkv, lse, dv, dout, dqkv, seq, heads, kv, hid, causal, scale);                                                  \
	}

FLASH(float, f32, 16)
FLASH(float, f32, 32)
FLASH(float, f32, 64)
FLASH(bf16, bf16, 16)
FLASH(bf16, bf16, 32)
FLASH(bf16, bf16, 64)
FLASH(bf16, bf16, 128)

KERNEL __launch_bounds__(THREADS) flash_prep_f32(const float *out, const float *dout, float *dv, int batch, int seq, int heads, int d) {
	flash_prep_t(out, dout, dv, batch, seq, heads, d);
}
KERNEL __launch_bounds__(THREADS) flash_prep_bf16(const bf16 *out, const bf16 *dout, float *dv, int batch, int seq, int heads, int d) {
	flash_prep_t(out, dout, dv, batch, seq, heads, d);
}
