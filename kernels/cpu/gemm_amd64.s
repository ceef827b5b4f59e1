//go:build !purego

#include "textflag.h"

// The micro-kernel keeps a 6×16 tile of C in Y0..Y11, row r in Y(2r) (columns
// 0-7) and Y(2r+1) (columns 8-15). Each k step loads a 16-wide row of packed
// B into Y12, Y13 and broadcasts the 6 packed A values of the step in turn
// into Y14, Y15: 12 FMAs for 8 loads, which the two FMA pipes of Zen 3 and
// Haswell-class cores retire in 6 cycles.

// KSTEP does one k step with B at DI+bo0, DI+bo1 and A at SI+ao0..ao5.
#define KSTEP(bo0, bo1, ao0, ao1, ao2, ao3, ao4, ao5) \
	VMOVUPS      bo0(DI), Y12; \
	VMOVUPS      bo1(DI), Y13; \
	VBROADCASTSS ao0(SI), Y14; \
	VFMADD231PS  Y12, Y14, Y0; \
	VFMADD231PS  Y13, Y14, Y1; \
	VBROADCASTSS ao1(SI), Y15; \
	VFMADD231PS  Y12, Y15, Y2; \
	VFMADD231PS  Y13, Y15, Y3; \
	VBROADCASTSS ao2(SI), Y14; \
	VFMADD231PS  Y12, Y14, Y4; \
	VFMADD231PS  Y13, Y14, Y5; \
	VBROADCASTSS ao3(SI), Y15; \
	VFMADD231PS  Y12, Y15, Y6; \
	VFMADD231PS  Y13, Y15, Y7; \
	VBROADCASTSS ao4(SI), Y14; \
	VFMADD231PS  Y12, Y14, Y8; \
	VFMADD231PS  Y13, Y14, Y9; \
	VBROADCASTSS ao5(SI), Y15; \
	VFMADD231PS  Y12, Y15, Y10; \
	VFMADD231PS  Y13, Y15, Y11

// PREFETCHROW touches both cache lines a 64-byte row of C at AX may span
// and steps AX to the next row.
#define PREFETCHROW \
	PREFETCHT0 (AX);   \
	PREFETCHT0 63(AX); \
	ADDQ       R8, AX

// STOREROW stores row accumulators lo, hi at DX.
#define STOREROW(lo, hi) \
	VMOVUPS lo, (DX); \
	VMOVUPS hi, 32(DX)

// STOREROWBETA adds beta (Y15) times the row of C at DX to lo, hi and
// stores them there.
#define STOREROWBETA(lo, hi) \
	VFMADD231PS (DX), Y15, lo;   \
	VFMADD231PS 32(DX), Y15, hi; \
	STOREROW(lo, hi)

// NEXTROW ends the tile after mr rows (R9 counts them down) or steps DX to
// the next row of C.
#define NEXTROW \
	DECQ R9;   \
	JZ   next; \
	ADDQ R8, DX

// func sgemmKernel6x16(tiles, k int, a, b, c *float32, ldc, mr int, alpha, beta float32, aStep, bStep, cStep int)
//
// Tile t multiplies the packed micro-panels at a+t·aStep and b+t·bStep and
// stores rows [0, mr) of alpha·AB + beta·C at c+t·cStep. tiles, k, mr >= 1.
TEXT ·sgemmKernel6x16(SB), NOSPLIT, $0-88
	MOVQ tiles+0(FP), R10
	MOVQ a+16(FP), R11
	MOVQ b+24(FP), R12
	MOVQ c+32(FP), R13
	MOVQ ldc+40(FP), R8
	SHLQ $2, R8

tile:
	MOVQ   R11, SI
	MOVQ   R12, DI
	MOVQ   R13, DX
	MOVQ   k+8(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

	// Warm the C tile while the products accumulate.
	MOVQ DX, AX
	PREFETCHROW
	PREFETCHROW
	PREFETCHROW
	PREFETCHROW
	PREFETCHROW
	PREFETCHROW

	MOVQ CX, BX
	SHRQ $2, BX
	JZ   tail

loop4:
	KSTEP(0, 32, 0, 4, 8, 12, 16, 20)
	KSTEP(64, 96, 24, 28, 32, 36, 40, 44)
	KSTEP(128, 160, 48, 52, 56, 60, 64, 68)
	KSTEP(192, 224, 72, 76, 80, 84, 88, 92)
	ADDQ $96, SI
	ADDQ $256, DI
	DECQ BX
	JNZ  loop4

tail:
	ANDQ $3, CX
	JZ   scale

loop1:
	KSTEP(0, 32, 0, 4, 8, 12, 16, 20)
	ADDQ $24, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  loop1

scale:
	VBROADCASTSS alpha+56(FP), Y14
	VMULPS       Y14, Y0, Y0
	VMULPS       Y14, Y1, Y1
	VMULPS       Y14, Y2, Y2
	VMULPS       Y14, Y3, Y3
	VMULPS       Y14, Y4, Y4
	VMULPS       Y14, Y5, Y5
	VMULPS       Y14, Y6, Y6
	VMULPS       Y14, Y7, Y7
	VMULPS       Y14, Y8, Y8
	VMULPS       Y14, Y9, Y9
	VMULPS       Y14, Y10, Y10
	VMULPS       Y14, Y11, Y11
	MOVQ         mr+48(FP), R9

	// beta == ±0 must not read C, which may hold NaNs.
	MOVL  beta+60(FP), AX
	TESTL $0x7fffffff, AX
	JZ    store

	VBROADCASTSS beta+60(FP), Y15
	STOREROWBETA(Y0, Y1)
	NEXTROW
	STOREROWBETA(Y2, Y3)
	NEXTROW
	STOREROWBETA(Y4, Y5)
	NEXTROW
	STOREROWBETA(Y6, Y7)
	NEXTROW
	STOREROWBETA(Y8, Y9)
	NEXTROW
	STOREROWBETA(Y10, Y11)
	JMP next

store:
	STOREROW(Y0, Y1)
	NEXTROW
	STOREROW(Y2, Y3)
	NEXTROW
	STOREROW(Y4, Y5)
	NEXTROW
	STOREROW(Y6, Y7)
	NEXTROW
	STOREROW(Y8, Y9)
	NEXTROW
	STOREROW(Y10, Y11)

next:
	MOVQ aStep+64(FP), AX
	LEAQ (R11)(AX*4), R11
	MOVQ bStep+72(FP), AX
	LEAQ (R12)(AX*4), R12
	MOVQ cStep+80(FP), AX
	LEAQ (R13)(AX*4), R13
	DECQ R10
	JNZ  tile
	VZEROUPPER
	RET

// TRANSPOSE8 transposes the 8×8 block whose rows are Y0..Y7, leaving
// column i in Y(8+i); Y0..Y7 are clobbered.
#define TRANSPOSE8 \
	VUNPCKLPS  Y1, Y0, Y8; \
	VUNPCKHPS  Y1, Y0, Y9; \
	VUNPCKLPS  Y3, Y2, Y10; \
	VUNPCKHPS  Y3, Y2, Y11; \
	VUNPCKLPS  Y5, Y4, Y12; \
	VUNPCKHPS  Y5, Y4, Y13; \
	VUNPCKLPS  Y7, Y6, Y14; \
	VUNPCKHPS  Y7, Y6, Y15; \
	VSHUFPS    $0x44, Y10, Y8, Y0; \
	VSHUFPS    $0xEE, Y10, Y8, Y1; \
	VSHUFPS    $0x44, Y11, Y9, Y2; \
	VSHUFPS    $0xEE, Y11, Y9, Y3; \
	VSHUFPS    $0x44, Y14, Y12, Y4; \
	VSHUFPS    $0xEE, Y14, Y12, Y5; \
	VSHUFPS    $0x44, Y15, Y13, Y6; \
	VSHUFPS    $0xEE, Y15, Y13, Y7; \
	VPERM2F128 $0x20, Y4, Y0, Y8; \
	VPERM2F128 $0x20, Y5, Y1, Y9; \
	VPERM2F128 $0x20, Y6, Y2, Y10; \
	VPERM2F128 $0x20, Y7, Y3, Y11; \
	VPERM2F128 $0x31, Y4, Y0, Y12; \
	VPERM2F128 $0x31, Y5, Y1, Y13; \
	VPERM2F128 $0x31, Y6, Y2, Y14; \
	VPERM2F128 $0x31, Y7, Y3, Y15

// LOAD4 loads 8 floats from each of the 4 rows at base, base+BX, base+2BX,
// base+3BX (DX = 3BX) into r0..r3.
#define LOAD4(base, r0, r1, r2, r3) \
	VMOVUPS (base), r0; \
	VMOVUPS (base)(BX*1), r1; \
	VMOVUPS (base)(BX*2), r2; \
	VMOVUPS (base)(DX*1), r3

// PREFETCH4 prefetches the 4 rows at base, base+BX, base+2BX, base+3BX
// 512 bytes ahead. The packing routines read 1 KiB (kc = 256) of each of
// many rows, which defeats the hardware stream prefetchers when the
// operand comes from DRAM; running ahead also warms the start of the next
// k block's run of the same rows.
#define PREFETCH4(base) \
	PREFETCHT0 512(base);        \
	PREFETCHT0 512(base)(BX*1); \
	PREFETCHT0 512(base)(BX*2); \
	PREFETCHT0 512(base)(DX*1)

// func interleave16AVX2(n8 int, src *float32, ld int, dst *float32)
//
// dst[p*16+r] = src[r*ld+p] for r < 16, p < 8·n8; n8 >= 1.
TEXT ·interleave16AVX2(SB), NOSPLIT, $0-32
	MOVQ n8+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), BX
	MOVQ dst+24(FP), DI
	SHLQ $2, BX
	LEAQ (BX)(BX*2), DX
	MOVQ SI, R10
	LEAQ (R10)(BX*4), R11
	LEAQ (R11)(BX*4), R12
	LEAQ (R12)(BX*4), R13

loop16:
	PREFETCH4(R10)
	PREFETCH4(R11)
	PREFETCH4(R12)
	PREFETCH4(R13)
	LOAD4(R10, Y0, Y1, Y2, Y3)
	LOAD4(R11, Y4, Y5, Y6, Y7)
	TRANSPOSE8
	VMOVUPS Y8, 0(DI)
	VMOVUPS Y9, 64(DI)
	VMOVUPS Y10, 128(DI)
	VMOVUPS Y11, 192(DI)
	VMOVUPS Y12, 256(DI)
	VMOVUPS Y13, 320(DI)
	VMOVUPS Y14, 384(DI)
	VMOVUPS Y15, 448(DI)
	LOAD4(R12, Y0, Y1, Y2, Y3)
	LOAD4(R13, Y4, Y5, Y6, Y7)
	TRANSPOSE8
	VMOVUPS Y8, 32(DI)
	VMOVUPS Y9, 96(DI)
	VMOVUPS Y10, 160(DI)
	VMOVUPS Y11, 224(DI)
	VMOVUPS Y12, 288(DI)
	VMOVUPS Y13, 352(DI)
	VMOVUPS Y14, 416(DI)
	VMOVUPS Y15, 480(DI)
	ADDQ $32, R10
	ADDQ $32, R11
	ADDQ $32, R12
	ADDQ $32, R13
	ADDQ $512, DI
	DECQ CX
	JNZ  loop16
	VZEROUPPER
	RET

// STORE6 stores the first 6 floats of y (x is its low half) at DI+off.
#define STORE6(y, x, off) \
	VMOVUPS      x, off(DI);  \
	VEXTRACTF128 $1, y, X0;   \
	VMOVQ        X0, off+16(DI)

// func interleave6AVX2(n8 int, src *float32, ld int, dst *float32)
//
// dst[p*6+r] = src[r*ld+p] for r < 6, p < 8·n8; n8 >= 1. The transpose runs
// on 8 rows; rows 6 and 7 are whatever Y6 and Y7 hold and are not stored.
TEXT ·interleave6AVX2(SB), NOSPLIT, $0-32
	MOVQ n8+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), BX
	MOVQ dst+24(FP), DI
	SHLQ $2, BX
	LEAQ (BX)(BX*2), DX
	MOVQ SI, R10
	LEAQ (R10)(BX*4), R11

loop6:
	PREFETCH4(R10)
	PREFETCHT0 512(R11)
	PREFETCHT0 512(R11)(BX*1)
	LOAD4(R10, Y0, Y1, Y2, Y3)
	VMOVUPS (R11), Y4
	VMOVUPS (R11)(BX*1), Y5
	TRANSPOSE8
	STORE6(Y8, X8, 0)
	STORE6(Y9, X9, 24)
	STORE6(Y10, X10, 48)
	STORE6(Y11, X11, 72)
	STORE6(Y12, X12, 96)
	STORE6(Y13, X13, 120)
	STORE6(Y14, X14, 144)
	STORE6(Y15, X15, 168)
	ADDQ $32, R10
	ADDQ $32, R11
	ADDQ $192, DI
	DECQ CX
	JNZ  loop6
	VZEROUPPER
	RET

// func copyPanels16AVX2(kc, panels int, src *float32, ld int, dst *float32)
//
// dst[q*kc*16+p*16+j] = src[p*ld+q*16+j] for p < kc, q < panels, j < 16:
// row by row, so that src is read sequentially, prefetching two rows ahead
// since the runs are short (16·panels floats) when m is small and nc is cut
// to fit L2. kc, panels >= 1.
TEXT ·copyPanels16AVX2(SB), NOSPLIT, $0-40
	MOVQ kc+0(FP), CX
	MOVQ src+16(FP), SI
	MOVQ ld+24(FP), BX
	MOVQ dst+32(FP), DI
	SHLQ $2, BX
	MOVQ CX, DX
	SHLQ $6, DX

row:
	MOVQ panels+8(FP), R8
	MOVQ SI, R10
	MOVQ DI, R11

panel:
	PREFETCHT0 (R10)(BX*2)
	VMOVUPS    (R10), Y0
	VMOVUPS    32(R10), Y1
	VMOVUPS    Y0, (R11)
	VMOVUPS    Y1, 32(R11)
	ADDQ $64, R10
	ADDQ DX, R11
	DECQ R8
	JNZ  panel

	ADDQ BX, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  row
	VZEROUPPER
	RET

