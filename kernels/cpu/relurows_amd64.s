//go:build !purego

#include "textflag.h"

// ReLU keeps v where its bits, as a signed integer, are above zero: the
// positive numbers and the NaNs whose sign bit is clear (as positiveMask).
// VPCMPGTD Y15(zero), Y0, Y1 sets Y1 to all ones where Y0 > 0. x is the
// first operand of each addition, as in the Go rows: of two NaNs, an
// addition returns its first operand's.

// func addReLU8(n int, x *float32, b float32, y *float32)
TEXT ·addReLU8(SB), NOSPLIT, $0-32
	MOVQ         n+0(FP), CX
	MOVQ         x+8(FP), SI
	VBROADCASTSS b+16(FP), Y14
	MOVQ         y+24(FP), DI
	VPXOR        Y15, Y15, Y15
	XORQ         AX, AX

loop:
	VMOVUPS  (SI)(AX*4), Y0
	VADDPS   Y14, Y0, Y0
	VPCMPGTD Y15, Y0, Y1
	VPAND    Y1, Y0, Y0
	VMOVUPS  Y0, (DI)(AX*4)
	ADDQ     $8, AX
	CMPQ     AX, CX
	JLT      loop
	VZEROUPPER
	RET

// func addReLUVec8(n int, x, b, y *float32)
TEXT ·addReLUVec8(SB), NOSPLIT, $0-32
	MOVQ  n+0(FP), CX
	MOVQ  x+8(FP), SI
	MOVQ  b+16(FP), BX
	MOVQ  y+24(FP), DI
	VPXOR Y15, Y15, Y15
	XORQ  AX, AX

loop:
	VMOVUPS  (SI)(AX*4), Y0
	VADDPS   (BX)(AX*4), Y0, Y0
	VPCMPGTD Y15, Y0, Y1
	VPAND    Y1, Y0, Y0
	VMOVUPS  Y0, (DI)(AX*4)
	ADDQ     $8, AX
	CMPQ     AX, CX
	JLT      loop
	VZEROUPPER
	RET

// func addReLUGrad8(n int, x *float32, b float32, dy, dx *float32)
TEXT ·addReLUGrad8(SB), NOSPLIT, $0-40
	MOVQ         n+0(FP), CX
	MOVQ         x+8(FP), SI
	VBROADCASTSS b+16(FP), Y14
	MOVQ         dy+24(FP), DX
	MOVQ         dx+32(FP), DI
	VPXOR        Y15, Y15, Y15
	XORQ         AX, AX

loop:
	VMOVUPS  (SI)(AX*4), Y0
	VADDPS   Y14, Y0, Y0
	VPCMPGTD Y15, Y0, Y1
	VPAND    (DX)(AX*4), Y1, Y0
	VMOVUPS  Y0, (DI)(AX*4)
	ADDQ     $8, AX
	CMPQ     AX, CX
	JLT      loop
	VZEROUPPER
	RET

// func addReLUGradVec8(n int, x, b, dy, dx *float32)
TEXT ·addReLUGradVec8(SB), NOSPLIT, $0-40
	MOVQ  n+0(FP), CX
	MOVQ  x+8(FP), SI
	MOVQ  b+16(FP), BX
	MOVQ  dy+24(FP), DX
	MOVQ  dx+32(FP), DI
	VPXOR Y15, Y15, Y15
	XORQ  AX, AX

loop:
	VMOVUPS  (SI)(AX*4), Y0
	VADDPS   (BX)(AX*4), Y0, Y0
	VPCMPGTD Y15, Y0, Y1
	VPAND    (DX)(AX*4), Y1, Y0
	VMOVUPS  Y0, (DI)(AX*4)
	ADDQ     $8, AX
	CMPQ     AX, CX
	JLT      loop
	VZEROUPPER
	RET
