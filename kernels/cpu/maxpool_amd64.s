//go:build !purego

#include "textflag.h"

// func maxPool2x2Back8(n int, r0, r1, dy, d0, d1 *float32) int
//
// For outputs j < n (n a multiple of 8), eight at a time: the 2×2 window
// r0[2j], r0[2j+1], r1[2j], r1[2j+1] gets dy[j] at its first maximum and
// +0 elsewhere, written to d0 and d1 at the same offsets. The values are
// compared as signed integers, which orders +0, the positive numbers and
// +Inf as floats: a block of eight windows holding anything else (a sign
// bit set, or a NaN, above +Inf's bits) is left unwritten, and the count
// of outputs done before it is returned (n if none).
//
// Operands are in Go's order, the destination last: VPCMPGTD B, A, D sets
// D = A > B; VPANDN B, A, D sets D = ~A & B.
TEXT ·maxPool2x2Back8(SB), NOSPLIT, $0-56
	MOVQ         n+0(FP), CX
	MOVQ         r0+8(FP), SI
	MOVQ         r1+16(FP), BX
	MOVQ         dy+24(FP), DX
	MOVQ         d0+32(FP), DI
	MOVQ         d1+40(FP), R8
	MOVL         $0x7f800000, R9
	MOVQ         R9, X15
	VPBROADCASTD X15, Y15      // +Inf's bits
	XORQ         AX, AX        // j

loop:
	// The windows' four values, deinterleaved: p = r0[2j+2k], q = r0[2j+2k+1],
	// r = r1[2j+2k], s = r1[2j+2k+1] for k < 8. VSHUFPS takes the even
	// (0x88) or odd (0xdd) elements of two vectors within each 128-bit
	// lane; VPERMQ $0xd8 puts the lanes' halves in order.
	VMOVUPS (SI)(AX*8), Y0
	VMOVUPS 32(SI)(AX*8), Y1
	VSHUFPS $0x88, Y1, Y0, Y2 // p
	VSHUFPS $0xdd, Y1, Y0, Y3 // q
	VMOVUPS (BX)(AX*8), Y0
	VMOVUPS 32(BX)(AX*8), Y1
	VSHUFPS $0x88, Y1, Y0, Y4 // r
	VSHUFPS $0xdd, Y1, Y0, Y5 // s
	VPERMQ  $0xd8, Y2, Y2
	VPERMQ  $0xd8, Y3, Y3
	VPERMQ  $0xd8, Y4, Y4
	VPERMQ  $0xd8, Y5, Y5

	// m = the windows' maxima; stop at a block with a sign bit or a NaN.
	VPMAXSD   Y3, Y2, Y6
	VPMAXSD   Y5, Y4, Y7
	VPMAXSD   Y7, Y6, Y6     // m
	VPOR      Y3, Y2, Y8
	VPOR      Y5, Y4, Y9
	VPOR      Y9, Y8, Y8     // sign bits: negatives (and −0)
	VPCMPGTD  Y15, Y6, Y9    // m > +Inf: a NaN
	VPOR      Y9, Y8, Y8
	VMOVMSKPS Y8, R10
	TESTL     R10, R10
	JNZ       done

	// The first maximum in window order: e0 = p == m, e1 = q == m and
	// not e0, e2 = r == m and neither, e3 = none of them.
	VMOVUPS  (DX)(AX*4), Y0 // dy
	VPCMPEQD Y6, Y2, Y2     // e0
	VPCMPEQD Y6, Y3, Y3
	VPANDN   Y3, Y2, Y3     // e1
	VPOR     Y3, Y2, Y7     // e0 | e1
	VPCMPEQD Y6, Y4, Y4
	VPANDN   Y4, Y7, Y4     // e2
	VPOR     Y4, Y7, Y7     // e0 | e1 | e2
	VPAND    Y0, Y2, Y2     // the gradient at p
	VPAND    Y0, Y3, Y3     // at q
	VPAND    Y0, Y4, Y4     // at r
	VPANDN   Y0, Y7, Y5     // at s

	// Interleaved back: VPERMQ $0xd8 undoes itself, and VUNPCKLPS and
	// VUNPCKHPS pair the even and odd columns' values within each lane.
	VPERMQ    $0xd8, Y2, Y2
	VPERMQ    $0xd8, Y3, Y3
	VPERMQ    $0xd8, Y4, Y4
	VPERMQ    $0xd8, Y5, Y5
	VUNPCKLPS Y3, Y2, Y0
	VUNPCKHPS Y3, Y2, Y1
	VMOVUPS   Y0, (DI)(AX*8)
	VMOVUPS   Y1, 32(DI)(AX*8)
	VUNPCKLPS Y5, Y4, Y0
	VUNPCKHPS Y5, Y4, Y1
	VMOVUPS   Y0, (R8)(AX*8)
	VMOVUPS   Y1, 32(R8)(AX*8)

	ADDQ $8, AX
	CMPQ AX, CX
	JLT  loop

done:
	MOVQ AX, ret+48(FP)
	VZEROUPPER
	RET
