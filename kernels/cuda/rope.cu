// Rotary position embedding (graph.RoPE) of packed attention projections
// x [rows, (heads + 2·kv)·d]: every element of the heads + kv query and key
// heads is rotated with its partner half a head away, by the angle
// sign·pos·theta^(−2i/d) of its pair i (pos = row mod seq), LLaMA's
// rotate-half form; the value columns are copied. sign −1 is the gradient
// (the inverse rotation). The angle and the products are computed in
// double and rounded once, as kernels/cpu computes them: float angles lose
// digits at long positions. y must not alias x (a thread reads its
// partner, which another thread writes).
#include "common.cuh"

template <class T>
__device__ __forceinline__ void rope_t(const T *x, T *y, long long rows, int seq, int heads, int kv, int d, double theta, float sign) {
	const int cols = (heads + 2 * kv) * d, half = d / 2, rotated = (heads + kv) * d;
	const long long n = rows * cols;
	for (long long e = gtid(); e < n; e += gstride()) {
		const int c = (int)(e % cols);
		if (c >= rotated) {
			y[e] = x[e];
			continue;
		}
		const long long r = e / cols;
		const int k = c % d, i = k % half;
		const double a = (double)(r % seq) * pow(theta, -2.0 * i / d);
		const double cs = cos(a), sn = sign * sin(a);
		const double u = toF(x[e]);
		const double v = k < half ? toF(x[e + half]) : toF(x[e - half]);
		y[e] = fromF<T>((float)(k < half ? u * cs - v * sn : u * cs + v * sn));
	}
}

KERNEL __launch_bounds__(THREADS)
    rope_f32(const float *x, float *y, long long rows, int seq, int heads, int kv, int d, double theta, float sign) {
	rope_t(x, y, rows, seq, heads, kv, d, theta, sign);
}
KERNEL __launch_bounds__(THREADS)
    rope_bf16(const bf16 *x, bf16 *y, long long rows, int seq, int heads, int kv, int d, double theta, float sign) {
	rope_t(x, y, rows, seq, heads, kv, d, theta, sign);
}
