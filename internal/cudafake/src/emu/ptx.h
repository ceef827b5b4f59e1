/*
 * Host stand-ins for the warp-wide PTX instructions kernels/cuda's ptx.cuh
 * wraps in inline assembly on a GPU: mma.sync.aligned.m16n8k16 on bf16 with
 * fp32 accumulation, and ldmatrix.sync.aligned.m8n8.x4(.trans).b16. Each
 * lane gives its registers (or row address) and gets its own, in the
 * fragment layouts the PTX ISA specifies; with g = lane/4, t = lane%4:
 *
 *   A (16×16, row-major), 4 registers of two bf16 (the lower-numbered
 *     column in the low half): a0 (g, 2t…2t+1), a1 (g+8, 2t…), a2 (g, 2t+8…),
 *     a3 (g+8, 2t+8…).
 *   B (16×8, k × n), 2 registers: b0 (k 2t…2t+1, n g), b1 (k 2t+8…, n g).
 *   C, D (16×8, fp32): c0, c1 (g, 2t and 2t+1), c2, c3 (g+8, 2t and 2t+1).
 *   ldmatrix .x4: lanes 8i…8i+7 give the rows of 8×8 matrix i (16 bytes
 *     each, 16-byte aligned); each lane gets register i = (g, 2t…2t+1) of
 *     matrix i, or with .trans (2t…2t+1, g), i.e. of its transpose.
 *
 * Each is a warp barrier, as the instructions are collective. ldmatrix
 * reads a lane's row when the lane reaches it, before the barrier, so a
 * row another lane writes without a __syncwarp between reads the old or
 * the new bytes depending on the thread order, as on a GPU
 * (FLOWKIT_EMU_SCHEDULE=reverse shows the race). Products are summed in
 * fp32 in k order (a GPU's tensor cores round in their own order).
 */
#pragma once

#include <stdint.h>
#include <string.h>

static inline float emu_bf16_lo(uint32_t r) { return __uint_as_float(r << 16); }
static inline float emu_bf16_hi(uint32_t r) { return __uint_as_float(r & 0xffff0000u); }

/* emu_mma_m16n8k16_bf16 sets d to a·b + c. */
static inline void emu_mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                         const float (&c)[4]) {
	uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]}, all[32][6];
	emu_warp_gather("mma.sync", mine, sizeof mine, all);
	float A[16][16], B[16][8];
	for (int l = 0; l < 32; l++) {
		const int g = l / 4, t = l % 4;
		const uint32_t *r = all[l];
		A[g][2 * t] = emu_bf16_lo(r[0]), A[g][2 * t + 1] = emu_bf16_hi(r[0]);
		A[g + 8][2 * t] = emu_bf16_lo(r[1]), A[g + 8][2 * t + 1] = emu_bf16_hi(r[1]);
		A[g][2 * t + 8] = emu_bf16_lo(r[2]), A[g][2 * t + 9] = emu_bf16_hi(r[2]);
		A[g + 8][2 * t + 8] = emu_bf16_lo(r[3]), A[g + 8][2 * t + 9] = emu_bf16_hi(r[3]);
		B[2 * t][g] = emu_bf16_lo(r[4]), B[2 * t + 1][g] = emu_bf16_hi(r[4]);
		B[2 * t + 8][g] = emu_bf16_lo(r[5]), B[2 * t + 9][g] = emu_bf16_hi(r[5]);
	}
	const int lane = emu_lane(), g = lane / 4, t = lane % 4;
	for (int i = 0; i < 4; i++) {
		const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
		float s = c[i];
		for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
		d[i] = s;
	}
}

/* emu_ldmatrix_x4 loads four 8×8 bf16 matrices, row by row from the lanes'
 * addresses, transposed with trans. */
static inline void emu_ldmatrix_x4(uint32_t (&r)[4], const void *row, bool trans) {
	if ((uintptr_t)row % 16) emu_fail("ldmatrix: row address %p is not 16-byte aligned", row);
	uint16_t mine[8], all[32][8];
	memcpy(mine, row, sizeof mine);
	emu_warp_gather(trans ? "ldmatrix .trans" : "ldmatrix", mine, sizeof mine, all);
	const int lane = emu_lane(), g = lane / 4, t = lane % 4;
	for (int i = 0; i < 4; i++) {
		const uint16_t(*m)[8] = all + 8 * i;
		const uint16_t lo = trans ? m[2 * t][g] : m[g][2 * t], hi = trans ? m[2 * t + 1][g] : m[g][2 * t + 1];
		r[i] = (uint32_t)lo | (uint32_t)hi << 16;
	}
}
