// The activations and their derivatives, shared by the elementwise kernels
// and the fused bias-and-activation ones, so that both compute the same
// float32 values.
#pragma once

#include "common.cuh"

// positive is kernels/cpu's positiveMask as a predicate: the bits of v, read
// as a signed integer, are above zero (NaNs with the sign bit clear count as
// positive; −0 does not).
__device__ __forceinline__ bool positive(float v) { return __float_as_int(v) > 0; }

// gelu is x·Φ(x), the exact form.
__device__ __forceinline__ float gelu(float v) { return v * normcdff(v); }

// geluGrad is Φ(x) + x·φ(x).
__device__ __forceinline__ float geluGrad(float v) {
	const float invSqrt2Pi = 0.3989422804014327f;
	return normcdff(v) + v * (invSqrt2Pi * expf(-0.5f * v * v));
}
