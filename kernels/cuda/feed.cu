// Kernels of the runtime's bookkeeping in a captured iteration: the
// iteration counter, the loss history, and the gathering of a synthetic
// batch from a pool resident on the device. The iteration lives in device
// memory (a long long) so that a replayed graph sees the replay's.
#include "common.cuh"

// iter_advance adds one to *counter. One thread.
KERNEL __launch_bounds__(32) iter_advance(long long *counter) {
	if (threadIdx.x == 0 && blockIdx.x == 0) *counter += 1;
}

// loss_log copies the scalar *loss to hist[(*iter mod cap)·nloss + j].
// One thread.
KERNEL __launch_bounds__(32) loss_log(const float *loss, float *hist, const long long *iter, int j, int nloss, int cap) {
	if (threadIdx.x == 0 && blockIdx.x == 0) {
		const long long it = *iter % cap;
		hist[(it < 0 ? it + cap : it) * nloss + j] = *loss;
	}
}

// poolRow is the pool row of sample k of the slice [from, from+n) of
// iteration *iter's global batch of batch samples, as SyntheticFeeder.Feed
// picks it: (iter·batch + from + k) mod rows.
__device__ __forceinline__ long long poolRow(long long it, int batch, int from, int k, int rows) {
	const long long g = (it * batch + from + k) % rows;
	return g < 0 ? g + rows : g;
}

// gather_ints sets row k of dst [n, rowLen] to pool row poolRow(k) of src
// [rows, rowLen], for k < n: labels (rowLen 1) or a language model's token
// ids and next-token labels (rowLen the sequence), bit for bit.
KERNEL __launch_bounds__(THREADS) gather_ints(int *dst, const int *src, const long long *iter, int batch, int from, int n,
                                               int rowLen, int rows) {
	const long long it = *iter;
	const long long total = (long long)n * rowLen;
	for (long long i = gtid(); i < total; i += gstride()) {
		const int k = (int)(i / rowLen), c = (int)(i % rowLen);
		dst[i] = src[poolRow(it, batch, from, k, rows) * rowLen + c];
	}
}

// gather_rows sets row k of dst [n, rowLen] (of T) to pool row poolRow(k) of
// images [rows, rowLen] (float), rounded to T; a block to a row, rows
// grid-stride.
template <class T>
__device__ __forceinline__ void gather_rows_t(T *dst, const float *images, const long long *iter, int batch, int from,
                                              int n, int rowLen, int rows) {
	const long long it = *iter;
	for (int k = blockIdx.x; k < n; k += gridDim.x) {
		const float *src = images + poolRow(it, batch, from, k, rows) * rowLen;
		T *out = dst + (long long)k * rowLen;
		for (int c = threadIdx.x; c < rowLen; c += blockDim.x) out[c] = fromF<T>(src[c]);
	}
}

KERNEL __launch_bounds__(THREADS) gather_rows_f32(float *dst, const float *images, const long long *iter, int batch,
                                                   int from, int n, int rowLen, int rows) {
	gather_rows_t(dst, images, iter, batch, from, n, rowLen, rows);
}
KERNEL __launch_bounds__(THREADS) gather_rows_bf16(bf16 *dst, const float *images, const long long *iter, int batch,
                                                    int from, int n, int rowLen, int rows) {
	gather_rows_t(dst, images, iter, batch, from, n, rowLen, rows);
}
