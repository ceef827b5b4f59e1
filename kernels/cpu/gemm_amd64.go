//go:build !purego

package cpu

import "golang.org/x/sys/cpu"

// gemmImpls lists the GEMM implementations this CPU can run, slowest first.
var gemmImpls = func() []gemmImpl {
	impls := []gemmImpl{{"go", gemmKernelGo, packRowsPortable, packColsGo}}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		impls = append(impls, gemmImpl{"avx2", gemmKernelAVX2, packRowsAVX2, packColsAVX2})
	}
	return impls
}()

// gemmDefault is the implementation Sgemm uses: the fastest available.
var gemmDefault = gemmImpls[len(gemmImpls)-1]

// gemmKernelAVX2 is the 6×16 AVX2+FMA micro-kernel.
func gemmKernelAVX2(tiles, k int, a, b, c []float32, ldc, mr int, alpha, beta float32, aStep, bStep, cStep int) {
	last := tiles - 1
	_ = a[last*aStep+k*gemmMR-1]
	_ = b[last*bStep+k*gemmNR-1]
	_ = c[last*cStep+(mr-1)*ldc+gemmNR-1]
	sgemmKernel6x16(tiles, k, &a[0], &b[0], &c[0], ldc, mr, alpha, beta, aStep, bStep, cStep)
}

// packColsAVX2 copies B into micro-panels a row of B at a time.
func packColsAVX2(kc, panels int, src []float32, ld int, dst []float32) {
	_ = src[(kc-1)*ld+panels*gemmNR-1]
	_ = dst[panels*kc*gemmNR-1]
	copyPanels16AVX2(kc, panels, &src[0], ld, &dst[0])
}

// packRowsAVX2 interleaves 8 columns at a time by 8×8 transposes in
// registers; the assembly covers 6 and 16 rows, the two panel heights.
func packRowsAVX2(rows, kc int, src []float32, ld int, dst []float32) {
	done := 0
	if n8 := kc / 8; n8 > 0 && (rows == 6 || rows == 16) {
		_ = src[(rows-1)*ld+8*n8-1]
		_ = dst[rows*8*n8-1]
		if rows == 6 {
			interleave6AVX2(n8, &src[0], ld, &dst[0])
		} else {
			interleave16AVX2(n8, &src[0], ld, &dst[0])
		}
		done = 8 * n8
	}
	packRowsGo(rows, rows, done, kc, src, ld, dst)
}

// sgemmKernel6x16 is gemmKernelAVX2 on raw pointers; see gemmKernelFunc.
//
//go:noescape
func sgemmKernel6x16(tiles, k int, a, b, c *float32, ldc, mr int, alpha, beta float32, aStep, bStep, cStep int)

// copyPanels16AVX2 is packColsAVX2 on raw pointers.
//
//go:noescape
func copyPanels16AVX2(kc, panels int, src *float32, ld int, dst *float32)

// interleave16AVX2 sets dst[p*16+r] = src[r*ld+p] for r < 16, p < 8·n8.
//
//go:noescape
func interleave16AVX2(n8 int, src *float32, ld int, dst *float32)

// interleave6AVX2 sets dst[p*6+r] = src[r*ld+p] for r < 6, p < 8·n8.
//
//go:noescape
func interleave6AVX2(n8 int, src *float32, ld int, dst *float32)
