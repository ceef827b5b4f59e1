//go:build !purego

#include "textflag.h"

// expRun4 is expIntoGo's loop body four values at a time, the same
// operations in the same order on float64s (no fused multiply-adds, as
// the Go compiler's amd64 default), so each exponential and the sum have
// the same bits. c holds expConsts' rows, 32 bytes each.
#define SCALE 0(R8)
#define SHIFT 32(R8)
#define STEP 64(R8)
#define C24 96(R8)
#define C6 128(R8)
#define C2 160(R8)
#define ONE 192(R8)
#define LOW 224(R8)
#define ZERO 256(R8)
#define MASK 288(R8)

// func expRun4(x, y *float32, n int, m, s float64, c *[10][4]uint64, table *[expSteps]float64) (done int, sum float64)
TEXT ·expRun4(SB), NOSPLIT, $0-72
	MOVQ         x+0(FP), SI
	MOVQ         y+8(FP), DI
	MOVQ         n+16(FP), CX
	VBROADCASTSD m+24(FP), Y8
	VMOVSD       s+32(FP), X15
	MOVQ         c+40(FP), R8
	MOVQ         table+48(FP), R9
	VMOVUPD      SCALE, Y9
	VMOVUPD      SHIFT, Y10
	VMOVUPD      STEP, Y11
	VMOVUPD      C24, Y12
	VMOVUPD      C6, Y13
	VMOVUPD      C2, Y14
	XORQ         AX, AX

loop:
	CMPQ      AX, CX
	JGE       done
	VCVTPS2PD (SI)(AX*4), Y0 // float64(v)
	VSUBPD    Y8, Y0, Y0     // d = v − m
	VCMPPD    $0x12, ZERO, Y0, Y6 // d <= 0 (ordered: false for NaN)
	VCMPPD    $0x1e, LOW, Y0, Y7  // d > expMin
	VANDPD    Y7, Y6, Y6
	VMOVMSKPD Y6, DX
	CMPQ      DX, $15
	JNE       done           // a value out of range: the Go loop takes the group

	VMULPD Y9, Y0, Y1  // d·expScale
	VADDPD Y10, Y1, Y1 // kd = d·expScale + expShift
	VPSUBQ Y10, Y1, Y2 // k = bits(kd) − bits(expShift)
	VSUBPD Y10, Y1, Y3 // kd − expShift
	VMULPD Y11, Y3, Y3 // ·expStep
	VSUBPD Y3, Y0, Y3  // r = d − (kd − expShift)·expStep

	VMULPD Y12, Y3, Y4 // r·(1/24)
	VADDPD Y13, Y4, Y4 // 1/6 + …
	VMULPD Y3, Y4, Y4  // r·(…)
	VADDPD Y14, Y4, Y4 // 1/2 + …
	VMULPD Y3, Y4, Y4  // r·(…)
	VADDPD ONE, Y4, Y4 // 1 + …
	VMULPD Y3, Y4, Y4  // r·(…)
	VADDPD ONE, Y4, Y4 // p = 1 + …

	VPAND      MASK, Y2, Y6            // k & (expSteps−1)
	VPCMPEQQ   Y7, Y7, Y7              // gather all four
	VPGATHERQQ Y7, (R9)(Y6*8), Y5      // expTable[k & (expSteps−1)]
	VPSRLQ     $5, Y2, Y2              // k>>5, whose low 12 bits <<52
	VPSLLQ     $52, Y2, Y2             // are uint64(k>>5)<<52's
	VPADDQ     Y2, Y5, Y5              // 2^(k>>5) · 2^(j/32)
	VMULPD     Y5, Y4, Y4              // e = p · …

	VCVTPD2PSY Y4, X6
	VMOVUPS    X6, (DI)(AX*4) // y = float32(e)

	VADDSD       X4, X15, X15 // s += e, in order
	VPERMILPD    $1, X4, X6
	VADDSD       X6, X15, X15
	VEXTRACTF128 $1, Y4, X7
	VADDSD       X7, X15, X15
	VPERMILPD    $1, X7, X6
	VADDSD       X6, X15, X15

	ADDQ $4, AX
	JMP  loop

done:
	MOVQ   AX, done+56(FP)
	VMOVSD X15, sum+64(FP)
	VZEROUPPER
	RET
