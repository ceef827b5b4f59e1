// 2-D max pooling, NCHW, float32 or bfloat16 (_f32 and _bf16; compared and
// summed in float), with kernels/cpu's semantics: windows are
// clipped to the input (padding never wins); a window with a NaN gives NaN;
// the gradient goes to the first maximum of each window in row-major order,
// comparing with kernels/cpu's order keys (−0 equals +0, NaN above +Inf).
// Sizes fit in 32 bits (checked by the caller).
#include "common.cuh"

// goMax is Go's max for float32: NaN if either is, +0 over −0.
__device__ __forceinline__ float goMax(float a, float b) {
	if (a != a) return a;
	if (b != b) return b;
	if (a == b) return __int_as_float(__float_as_int(a) & __float_as_int(b));
	return a > b ? a : b;
}

// orderKey is kernels/cpu's orderKey: float32 to int32, order-preserving,
// with −0 mapped as +0 and every NaN above +Inf.
__device__ __forceinline__ int orderKey(float v) {
	unsigned b = __float_as_uint(v);
	if (b == 0x80000000u) b = 0;
	int k = (int)b;
	k ^= (int)((unsigned)(k >> 31) >> 1);
	const int nan = (0x7f800000 - (int)(b & 0x7fffffffu)) >> 31;
	return (k & ~nan) | (nan & 0x7fffffff);
}


// maxpool_fwd: one thread per output element, over planes·OH·OW. The
// maximum of bf16 values is one of them: the bf16 instance is exact.
template <class T>
__device__ __forceinline__ void maxpool_fwd_t(const T *x, T *y, int planes, int H, int W, int OH, int OW, int KH, int KW,
                                              int sh, int sw, int ph, int pw) {
	const unsigned total = (unsigned)planes * OH * OW;
	for (long long e = gtid(); e < total; e += gstride()) {
		const unsigned u = (unsigned)e;
		const int ow = u % OW, oh = (u / OW) % OH, pl = u / (OW * OH);
		int h0 = oh * sh - ph, w0 = ow * sw - pw;
		const int h1 = min(h0 + KH, H), w1 = min(w0 + KW, W);
		h0 = max(h0, 0);
		w0 = max(w0, 0);
		const T *p = x + (long long)pl * H * W;
		float m = toF(p[h0 * W + w0]);
		for (int h = h0; h < h1; h++)
			for (int w = w0; w < w1; w++) m = goMax(m, toF(p[h * W + w]));
		y[u] = fromF<T>(m);
	}
}

// maxpool_bwd: one thread per input element, gathering dy over the windows
// that cover it and pick it as their first maximum, in row-major window
// order (kernels/cpu's order of accumulation), without atomics.
template <class T>
__device__ __forceinline__ void maxpool_bwd_t(const T *x, const T *dy, T *dx, int planes, int H, int W, int OH, int OW,
                                              int KH, int KW, int sh, int sw, int ph, int pw) {
	const unsigned total = (unsigned)planes * H * W;
	for (long long e = gtid(); e < total; e += gstride()) {
		const unsigned u = (unsigned)e;
		const int w = u % W, h = (u / W) % H, pl = u / (W * H);
		const T *p = x + (long long)pl * H * W;
		const T *g = dy + (long long)pl * OH * OW;
		// Windows oh with oh·sh − ph ≤ h < oh·sh − ph + KH.
		const int th = h + ph - KH + 1, tw = w + pw - KW + 1;
		const int ohLo = th <= 0 ? 0 : (th + sh - 1) / sh, ohHi = min(OH - 1, (h + ph) / sh);
		const int owLo = tw <= 0 ? 0 : (tw + sw - 1) / sw, owHi = min(OW - 1, (w + pw) / sw);
		float acc = 0;
		for (int oh = ohLo; oh <= ohHi; oh++) {
			int h0 = oh * sh - ph;
			const int h1 = min(h0 + KH, H);
			h0 = max(h0, 0);
			for (int ow = owLo; ow <= owHi; ow++) {
				int w0 = ow * sw - pw;
				const int w1 = min(w0 + KW, W);
				w0 = max(w0, 0);
				int best = h0 * W + w0, m = orderKey(toF(p[best]));
				for (int hh = h0; hh < h1; hh++)
					for (int ww = w0; ww < w1; ww++) {
						const int k = orderKey(toF(p[hh * W + ww]));
						if (k > m) {
							m = k;
							best = hh * W + ww;
						}
					}
				if (best == h * W + w) acc += toF(g[oh * OW + ow]);
			}
		}
		dx[u] = fromF<T>(acc);
	}
}

#define POOL_KERNELS(T, SUFFIX)                                                                                        \
	KERNEL __launch_bounds__(THREADS) maxpool_fwd_##SUFFIX(const T *x, T *y, int planes, int H, int W, int OH, int OW, \
	                                                       int KH, int KW, int sh, int sw, int ph, int pw) {           \
		maxpool_fwd_t(x, y, planes, H, W, OH, OW, KH, KW, sh, sw, ph, pw);                                           \
	}                                                                                                                  \
	KERNEL __launch_bounds__(THREADS) maxpool_bwd_##SUFFIX(const T *x, const T *dy, T *dx, int planes, int H, int W,  \
	                                                       int OH, int OW, int KH, int KW, int sh, int sw, int ph,     \
	                                                       int pw) {                                                   \
		maxpool_bwd_t(x, dy, dx, planes, H, W, OH, OW, KH, KW, sh, sw, ph, pw);                                      \
	}

POOL_KERNELS(float, f32)
POOL_KERNELS(bf16, bf16)
