// Shared definitions of flowkit's CUDA kernels: element types, 16-byte
// vectors, and deterministic warp and block reductions.
//
// Conventions (doc.go has the long form): every kernel loops grid-stride so
// that any grid covers any size; every index is bounds-checked; arithmetic is
// in float (double where a sum must match a float64 reference); bf16 is only
// a storage type.
#pragma once

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

#define KERNEL extern "C" __global__ void

// The block size every launch uses, and the bound the compiler's register
// allocation honours: a launch of more threads than a kernel's registers
// allow would fail.
#define THREADS 256

__device__ __forceinline__ float toF(float v) { return v; }
__device__ __forceinline__ float toF(bf16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T fromF(float v);
template <> __device__ __forceinline__ float fromF<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 fromF<bf16>(float v) { return __float2bfloat16_rn(v); }

// A quiet NaN: what kernels write where the data (an id, a label) is out of
// range, so that the error shows instead of reading out of bounds.
__device__ __forceinline__ float qnan() { return __int_as_float(0x7fc00000); }

// Vec is N elements loaded or stored as one (or, past 16 bytes, several)
// 16-byte accesses; the address must be 16-byte aligned.
template <class T, int N> struct alignas(16) Vec {
	T v[N];
};

// VW is the number of elements of T in 16 bytes.
template <class T> struct VW {
	static constexpr int N = 16 / sizeof(T);
};

template <class T, int N> __device__ __forceinline__ Vec<T, N> ldv(const T *p) {
	return *reinterpret_cast<const Vec<T, N> *>(p);
}
template <class T, int N> __device__ __forceinline__ void stv(T *p, const Vec<T, N> &v) {
	*reinterpret_cast<Vec<T, N> *>(p) = v;
}

__device__ __forceinline__ bool aligned16(const void *p) {
	return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

__device__ __forceinline__ long long gtid() {
	return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long gstride() { return (long long)gridDim.x * blockDim.x; }

// Butterfly reductions: every lane ends with the same value, computed in an
// order fixed by the lane layout alone.
__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}
__device__ __forceinline__ double warpSum(double v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}
__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// blockSum and blockMax reduce over a one-dimensional block whose size is a
// multiple of 32, with scratch of 32 values; every thread gets the result.
// All threads of the block must call them.
template <class R> __device__ __forceinline__ R blockSum(R v, R *scratch) {
	v = warpSum(v);
	const int nw = blockDim.x >> 5;
	__syncthreads(); // the previous use of scratch is over
	if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
	__syncthreads();
	R r = scratch[0];
	for (int i = 1; i < nw; i++) r += scratch[i];
	return r;
}
__device__ __forceinline__ float blockMax(float v, float *scratch) {
	v = warpMax(v);
	const int nw = blockDim.x >> 5;
	__syncthreads();
	if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
	__syncthreads();
	float r = scratch[0];
	for (int i = 1; i < nw; i++) r = fmaxf(r, scratch[i]);
	return r;
}

// ROW_BOUNDS is the launch bound of the warp-per-row kernels that fit in 80
// registers without spilling: three blocks of THREADS per multiprocessor
// (24 warps) instead of the two their unbounded register use would allow.
#define ROW_BOUNDS __launch_bounds__(THREADS, 3)

// Row kernels that give a row to a warp keep it in registers, ROW_PER_LANE
// elements a lane, when the row length is a multiple of the vector width
// and the pointers are 16-byte aligned: lane l holds the vectors l, l+32,
// l+64, … of its row, so rows of up to WARP_ROW_MAX columns. Other rows are
// streamed through the cache (an element-wise register cache costs too
// many registers), and longer rows go to the block-per-row kernels.
#define ROW_PER_LANE 32
#define WARP_ROW_MAX (32 * ROW_PER_LANE)

// rowCol returns the column of a lane's register e.
template <class T> __device__ __forceinline__ int rowCol(int e, int lane) {
	constexpr int N = VW<T>::N;
	return (lane + 32 * (e / N)) * N + e % N;
}

// rowLoad reads a row of n elements into v, with fill past the end.
template <class T>
__device__ __forceinline__ void rowLoad(const T *p, int n, int lane, float (&v)[ROW_PER_LANE], float fill) {
	constexpr int N = VW<T>::N;
#pragma unroll
	for (int k = 0; k < ROW_PER_LANE / N; k++) {
		const int c = (lane + 32 * k) * N;
		if (c < n) {
			Vec<T, N> a = ldv<T, N>(p + c);
#pragma unroll
			for (int j = 0; j < N; j++) v[k * N + j] = toF(a.v[j]);
		} else {
#pragma unroll
			for (int j = 0; j < N; j++) v[k * N + j] = fill;
		}
	}
}

// rowStore writes the n elements of a row from v.
template <class T> __device__ __forceinline__ void rowStore(T *p, int n, int lane, const float (&v)[ROW_PER_LANE]) {
	constexpr int N = VW<T>::N;
#pragma unroll
	for (int k = 0; k < ROW_PER_LANE / N; k++) {
		const int c = (lane + 32 * k) * N;
		if (c < n) {
			Vec<T, N> a;
#pragma unroll
			for (int j = 0; j < N; j++) a.v[j] = fromF<T>(v[k * N + j]);
			stv<T, N>(p + c, a);
		}
	}
}

// rowEach calls f(e, value) for each element of a row of n that a lane's
// register e holds, streaming the row from memory instead of keeping it.
template <class T, class F> __device__ __forceinline__ void rowEach(const T *p, int n, int lane, F f) {
	constexpr int N = VW<T>::N;
#pragma unroll
	for (int k = 0; k < ROW_PER_LANE / N; k++) {
		const int c = (lane + 32 * k) * N;
		if (c < n) {
			Vec<T, N> a = ldv<T, N>(p + c);
#pragma unroll
			for (int j = 0; j < N; j++) f(k * N + j, toF(a.v[j]));
		}
	}
}

// rowEach2 is rowEach over two rows at once: f(e, p[c], q[c]).
template <class T, class F>
__device__ __forceinline__ void rowEach2(const T *p, const T *q, int n, int lane, F f) {
	constexpr int N = VW<T>::N;
#pragma unroll
	for (int k = 0; k < ROW_PER_LANE / N; k++) {
		const int c = (lane + 32 * k) * N;
		if (c < n) {
			Vec<T, N> a = ldv<T, N>(p + c), b = ldv<T, N>(q + c);
#pragma unroll
			for (int j = 0; j < N; j++) f(k * N + j, toF(a.v[j]), toF(b.v[j]));
		}
	}
}

// warpRows gives the calling lane its warp's first row and the row stride
// of a grid whose warps each take rows grid-stride.
__device__ __forceinline__ void warpRows(int &first, int &stride) {
	first = (int)(((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
	stride = (int)(((long long)gridDim.x * blockDim.x) >> 5);
}
