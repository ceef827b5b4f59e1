/*
 * Host stand-in for CUDA's <cuda_bf16.h>, for kernels compiled by the
 * emulator (see emu.h): bfloat16 as a storage type with CUDA's conversions.
 */
#pragma once

#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
	uint16_t x;
};

static inline float __bfloat162float(__nv_bfloat16 b) {
	uint32_t u = (uint32_t)b.x << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* __float2bfloat16_rn rounds to nearest, ties to even; a NaN stays a NaN
 * (CUDA's canonical 0x7fff). */
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	__nv_bfloat16 b;
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		b.x = 0x7fff;
		return b;
	}
	u += 0x7fffu + ((u >> 16) & 1);
	b.x = (uint16_t)(u >> 16);
	return b;
}
