// The data movement around the GEMMs (cuBLAS) of a 2-D convolution, NCHW,
// float32 or bfloat16 (the _f32 and _bf16 instances: copies, and col2im's
// sums in float), with kernels/cpu's layout of the column matrix: row
// (c·R + r)·S + s, column oh·OW + ow holds x[n, c, oh·sh − ph + r, ow·sw − pw + s], or 0 in
// the padding. Image n's column matrix starts at col + n·imgStride and its
// rows are ldc apart: [C·R·S, OH·OW] per image for the forward pass and the
// gradient of the data (imgStride = C·R·S·OH·OW, ldc = OH·OW), one
// [C·R·S, N·OH·OW] matrix for the gradient of the filter (imgStride = OH·OW,
// ldc = N·OH·OW). Every size and index fits in 32 bits (checked by the
// caller).
#include "common.cuh"


// im2col: block (plane nc = n·C + c, tile of output positions) with blockIdx.x
// the plane and blockIdx.y the tile; each thread copies its position for
// every (r, s).
template <class T>
__device__ __forceinline__ void im2col_t(const T *x, T *col, int C, int H, int W, int R, int S, int OH, int OW, int sh,
                                         int sw, int ph, int pw, int ldc, int imgStride) {
	const int nc = blockIdx.x, n = nc / C, c = nc % C;
	const int p = blockIdx.y * blockDim.x + threadIdx.x;
	if (p >= OH * OW) return;
	const int oh = p / OW, ow = p % OW;
	const T *plane = x + (long long)nc * H * W;
	T *out = col + (long long)n * imgStride + (long long)c * R * S * ldc + p;
	for (int r = 0; r < R; r++) {
		const int h = oh * sh - ph + r;
		const bool hin = h >= 0 && h < H;
		for (int s = 0; s < S; s++) {
			const int w = ow * sw - pw + s;
			out[(long long)(r * S + s) * ldc] = (hin && w >= 0 && w < W) ? plane[h * W + w] : fromF<T>(0.0f);
		}
	}
}

// col2im: the gradient of im2col as a gather: dx[n, c, h, w] is the sum of
// the column-matrix entries im2col copied from it, added in order of (r, s)
// (as kernels/cpu's col2im adds them) in float, without atomics. Block
// (plane, tile of pixels) as in im2col.
template <class T>
__device__ __forceinline__ void col2im_t(const T *col, T *dx, int C, int H, int W, int R, int S, int OH, int OW, int sh,
                                         int sw, int ph, int pw, int ldc, int imgStride) {
	const int nc = blockIdx.x, n = nc / C, c = nc % C;
	const int q = blockIdx.y * blockDim.x + threadIdx.x;
	if (q >= H * W) return;
	const int h = q / W, w = q % W;
	const T *in = col + (long long)n * imgStride + (long long)c * R * S * ldc;
	float acc = 0;
	for (int r = 0; r < R; r++) {
		const int th = h + ph - r; // = oh·sh
		if (th < 0 || th % sh != 0 || th / sh >= OH) continue;
		const int oh = th / sh;
		for (int s = 0; s < S; s++) {
			const int tw = w + pw - s;
			if (tw < 0 || tw % sw != 0 || tw / sw >= OW) continue;
			acc += toF(in[(long long)(r * S + s) * ldc + oh * OW + tw / sw]);
		}
	}
	dx[(long long)nc * H * W + q] = fromF<T>(acc);
}

// swap01 sets out[b, a, i] = in[a, b, i] for in [A, B, I]: it turns dy
// [N, K, OH·OW] into [K, N·OH·OW] for the filter gradient's single GEMM.
// blockIdx.x is the output plane b·A + a, blockIdx.y a tile of i.
template <class T> __device__ __forceinline__ void swap01_t(const T *in, T *out, int A, int B, int I) {
	const int q = blockIdx.x, b = q / A, a = q % A;
	const int i = blockIdx.y * blockDim.x + threadIdx.x;
	if (i >= I) return;
	out[(long long)q * I + i] = in[((long long)a * B + b) * I + i];
}

#define CONV_KERNELS(T, SUFFIX)                                                                                        \
	KERNEL __launch_bounds__(THREADS) im2col_##SUFFIX(const T *x, T *col, int C, int H, int W, int R, int S, int OH,  \
	                                                  int OW, int sh, int sw, int ph, int pw, int ldc, int imgStride) { \
		im2col_t(x, col, C, H, W, R, S, OH, OW, sh, sw, ph, pw, ldc, imgStride);                                     \
	}                                                                                                                  \
	KERNEL __launch_bounds__(THREADS) col2im_##SUFFIX(const T *col, T *dx, int C, int H, int W, int R, int S, int OH, \
	                                                  int OW, int sh, int sw, int ph, int pw, int ldc, int imgStride) { \
		col2im_t(col, dx, C, H, W, R, S, OH, OW, sh, sw, ph, pw, ldc, imgStride);                                    \
	}                                                                                                                  \
	KERNEL __launch_bounds__(THREADS) swap01_##SUFFIX(const T *in, T *out, int A, int B, int I) {                     \
		swap01_t(in, out, A, B, I);                                                                                    \
	}

CONV_KERNELS(float, f32)
CONV_KERNELS(bf16, bf16)
