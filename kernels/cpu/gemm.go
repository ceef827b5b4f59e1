package cpu

import (
	"fmt"
	"sync"
	"unsafe"
)

// Blocking of the packed GEMM (GotoBLAS/BLIS loop order). A micro-tile of C
// is gemmMR×gemmNR and lives in registers; a kc×gemmNR micro-panel of packed
// B (16 KiB at kc = 256) stays in the 32 KiB L1d while the micro-kernel
// walks the mc×kc block of packed A (144 KiB) held in the 512 KiB L2; the
// kc×nc block of packed B (4 MiB) sits in the shared 32 MiB L3. The values
// are those BLIS uses for Zen; mc from 96 to 192 and kc up to 384 measured
// no better on BenchmarkSgemm_*.
const (
	gemmMR = 6
	gemmNR = 16
	gemmMC = 144
	gemmKC = 256
	gemmNC = 4080
)

// gemmRowOrderMax is the largest packed B block, in floats, that block
// sweeps row by row (see rowSweep): half of L2.
const gemmRowOrderMax = 64 << 10

// gemmWorkerMin is the fewest multiply-adds worth a worker of their own:
// about 50 µs on one core, the order of the latency of waking an idle
// thread on a virtual machine (two workers measured slower up to 128³).
const gemmWorkerMin = 1 << 21

// gemmImpl is a micro-kernel and the packing routines that feed it.
type gemmImpl struct {
	name     string
	kernel   gemmKernelFunc
	packRows packRowsFunc
	packCols packColsFunc
}

// gemmKernelFunc runs the micro-kernel over a strip of tiles tiles. Tile t
// multiplies the packed gemmMR×k micro-panel of A at a[t*aStep:] by the
// packed k×gemmNR micro-panel of B at b[t*bStep:] and stores rows [0, mr) of
// alpha·AB + beta·C into the gemmMR×gemmNR tile at c[t*cStep:], of row
// stride ldc. beta == 0 does not read C. tiles, k, mr >= 1.
type gemmKernelFunc func(tiles, k int, a, b, c []float32, ldc, mr int, alpha, beta float32, aStep, bStep, cStep int)

// packRowsFunc interleaves rows full rows of src (row stride ld) column by
// column into dst: dst[p*rows+r] = src[r*ld+p] for r < rows, p < kc. It packs
// full micro-panels of A (rows = gemmMR) and of Bᵀ (rows = gemmNR).
type packRowsFunc func(rows, kc int, src []float32, ld int, dst []float32)

// packColsFunc cuts rows [0, kc) of panels·gemmNR columns of src (row
// stride ld) into panels full micro-panels of B, back to back in dst.
type packColsFunc func(kc, panels int, src []float32, ld int, dst []float32)

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices, where
// op(X) is X or Xᵀ. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb and ldc
// are the row strides of A, B and C as stored. beta == 0 overwrites C
// without reading it. The work is spread over p's workers; Sgemm is safe
// for concurrent use on disjoint outputs.
//
// Sgemm panics if a stride is shorter than its row or a slice is too short
// for its matrix.
func Sgemm(p *Pool, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemm(p, gemmDefault, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemm is Sgemm with the implementation as a parameter, so tests can run
// every one without touching shared state.
func sgemm(p *Pool, impl gemmImpl, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemmCheckArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		gemmScaleC(c, m, n, ldc, beta)
		return
	}

	g := gemmArgs{gemmImpl: impl, transA: transA, transB: transB, m: m, n: n, k: k,
		alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc}
	w := max(1, min(p.Workers(), m*n*k/gemmWorkerMin))
	wm, wn := gemmGrid(w, m, n)
	if wm*wn == 1 {
		g.block(0, m, 0, n)
		return
	}
	tm, tn := gemmBlocks(m, gemmMR), gemmBlocks(n, gemmNR)
	shared := g // a copy, so that only this path puts the arguments on the heap
	p.For(wm*wn, 1, func(lo, hi int) {
		for id := lo; id < hi; id++ {
			bi, bj := id/wn, id%wn
			i0, i1 := min(bi*tm/wm*gemmMR, m), min((bi+1)*tm/wm*gemmMR, m)
			j0, j1 := min(bj*tn/wn*gemmNR, n), min((bj+1)*tn/wn*gemmNR, n)
			shared.block(i0, i1, j0, j1)
		}
	})
}

// gemmGrid splits the tiles of an m×n C among at most w workers as a wm×wn
// grid that minimizes the tiles of the busiest worker. Between grids as
// good it splits the longer side of C: each worker packs its own part of
// the larger operand (B when C is wider than tall, A when taller) and all
// of the smaller. A weight gradient dW = dYᵀ·X of a layer widening its
// input, or the forward pass's 2048×384 projection, would otherwise have
// every worker pack all of the larger one.
func gemmGrid(w, m, n int) (wm, wn int) {
	tm, tn := gemmBlocks(m, gemmMR), gemmBlocks(n, gemmNR)
	wm, wn = 1, 1
	best := tm * tn
	for cm := 1; cm <= min(w, tm); cm++ {
		cn := min(w/cm, tn)
		cost := gemmBlocks(tm, cm) * gemmBlocks(tn, cn)
		if cost < best || cost == best && (cm*cn < wm*wn || cm*cn == wm*wn && m > n) {
			best, wm, wn = cost, cm, cn
		}
	}
	return wm, wn
}

// gemmArgs holds one Sgemm call for its workers.
type gemmArgs struct {
	gemmImpl
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b, c        []float32
	lda, ldb, ldc  int
}

// gemmBuffers are one worker's packing buffers, recycled across calls.
type gemmBuffers struct {
	a, b []float32
	pad  []float32 // the rows of a partial A micro-panel
	tile [gemmMR * gemmNR]float32
}

var gemmBufPool = sync.Pool{New: func() any { return new(gemmBuffers) }}

// block computes rows [i0, i1) and columns [j0, j1) of C serially.
func (g *gemmArgs) block(i0, i1, j0, j1 int) {
	buf := gemmBufPool.Get().(*gemmBuffers)
	defer gemmBufPool.Put(buf)

	// Near-equal k blocks avoid a thin last one; multiples of 8 suit the
	// interleavers.
	kb := gemmBlocks(g.k, gemmKC)
	kcMax := min(g.k, gemmBlocks(gemmBlocks(g.k, kb), 8)*8)
	// When the rows fit one mc block, a packed B block serves one pass of
	// the micro-kernel only: cap nc so that the block stays in L2 from
	// packing to use instead of making a round trip through L3 (15–25% on
	// BenchmarkSgemm_MNISTConv2Fwd). The blocks are then swept row-wise.
	ncStep := gemmNC
	if i1-i0 <= gemmMC {
		ncStep = max(gemmNR, gemmRowOrderMax/kcMax/gemmNR*gemmNR)
	}
	ncMax := min(j1-j0, ncStep)
	mcMax := min(i1-i0, gemmMC)
	bp := alignedFloats(&buf.b, kcMax*gemmBlocks(ncMax, gemmNR)*gemmNR)
	ap := alignedFloats(&buf.a, kcMax*gemmBlocks(mcMax, gemmMR)*gemmMR)

	for jc := j0; jc < j1; jc += ncStep {
		nc := min(ncStep, j1-jc)
		for pc := 0; pc < g.k; pc += kcMax {
			kc := min(kcMax, g.k-pc)
			beta := g.beta
			if pc > 0 {
				beta = 1
			}
			g.packB(bp, pc, kc, jc, nc)
			for ic := i0; ic < i1; ic += gemmMC {
				mc := min(gemmMC, i1-ic)
				g.packA(buf, ap, ic, mc, pc, kc)
				if kc*nc <= gemmRowOrderMax {
					g.rowSweep(buf, ap, bp, ic, mc, jc, nc, kc, beta)
					continue
				}
				for jr := 0; jr < nc; jr += gemmNR {
					g.columnSweep(buf, ap, bp[jr*kc:], ic, mc, jc+jr, min(gemmNR, nc-jr), kc, beta)
				}
			}
		}
	}
}

// columnSweep runs the micro-kernel down the mc rows of C at (ic, jc) with
// the B micro-panel bp of width nr. Going down a column keeps bp in L1
// while the A micro-panels stream from L2.
func (g *gemmArgs) columnSweep(buf *gemmBuffers, ap, bp []float32, ic, mc, jc, nr, kc int, beta float32) {
	off := ic*g.ldc + jc
	if nr < gemmNR {
		for ir := 0; ir < mc; ir += gemmMR {
			g.edgeTile(buf, ap[ir*kc:], bp, off+ir*g.ldc, kc, min(gemmMR, mc-ir), nr, beta)
		}
		return
	}
	fullM := mc / gemmMR * gemmMR
	if fullM > 0 {
		g.kernel(fullM/gemmMR, kc, ap, bp, g.c[off:], g.ldc, gemmMR, g.alpha, beta, gemmMR*kc, 0, gemmMR*g.ldc)
	}
	if fullM < mc {
		g.kernel(1, kc, ap[fullM*kc:], bp, g.c[off+fullM*g.ldc:], g.ldc, mc-fullM, g.alpha, beta, 0, 0, 0)
	}
}

// rowSweep runs the micro-kernel along the rows of the mc×nc block of C at
// (ic, jc), for a packed B block that fits in L2: each A micro-panel stays
// in L1 while B streams from L2, and C is written as six sequential row
// streams, which suit the prefetchers better than a column of tiles ldc
// apart. With a short k, as in a first convolution layer, C traffic is most
// of the cost.
func (g *gemmArgs) rowSweep(buf *gemmBuffers, ap, bp []float32, ic, mc, jc, nc, kc int, beta float32) {
	fullN := nc / gemmNR * gemmNR
	for ir := 0; ir < mc; ir += gemmMR {
		mr := min(gemmMR, mc-ir)
		off := (ic+ir)*g.ldc + jc
		if fullN > 0 {
			g.kernel(fullN/gemmNR, kc, ap[ir*kc:], bp, g.c[off:], g.ldc, mr, g.alpha, beta, 0, gemmNR*kc, gemmNR)
		}
		if fullN < nc {
			g.edgeTile(buf, ap[ir*kc:], bp[fullN*kc:], off+fullN, kc, mr, nc-fullN, beta)
		}
	}
}

// edgeTile computes an mr×nr tile with nr < gemmNR through a scratch tile,
// so that the kernel never stores past column n.
func (g *gemmArgs) edgeTile(buf *gemmBuffers, ap, bp []float32, off, kc, mr, nr int, beta float32) {
	g.kernel(1, kc, ap, bp, buf.tile[:], gemmNR, gemmMR, 1, 0, 0, 0, 0)
	for r := range mr {
		t := buf.tile[r*gemmNR : r*gemmNR+nr]
		cr := g.c[off+r*g.ldc : off+r*g.ldc+nr]
		if beta == 0 {
			for j, v := range t {
				cr[j] = g.alpha * v
			}
		} else {
			for j, v := range t {
				cr[j] = g.alpha*v + beta*cr[j]
			}
		}
	}
}

// packA copies op(A)[ic:ic+mc, pc:pc+kc] into dst as gemmMR-row micro-panels,
// each stored column by column, with the last one padded by zero rows.
func (g *gemmArgs) packA(buf *gemmBuffers, dst []float32, ic, mc, pc, kc int) {
	if g.transA {
		packTransA(g.a[pc*g.lda+ic:], g.lda, kc, mc, dst)
		return
	}
	for ir := 0; ir < mc; ir += gemmMR {
		mr := min(gemmMR, mc-ir)
		out := dst[ir*kc : (ir+gemmMR)*kc]
		i := ic + ir
		switch {
		case mr == gemmMR:
			g.packRows(gemmMR, kc, g.a[i*g.lda+pc:], g.lda, out)
		default:
			// Too few rows for the interleaver: give it a copy padded
			// with zero rows.
			pad := alignedFloats(&buf.pad, gemmMR*kc)
			for r := range mr {
				copy(pad[r*kc:(r+1)*kc], g.a[(i+r)*g.lda+pc:])
			}
			clear(pad[mr*kc:])
			g.packRows(gemmMR, kc, pad, kc, out)
		}
	}
}

// packTransA packs op(A) = Aᵀ for packA: dst gets the mc columns of the kc
// rows of src (row stride ld) as gemmMR-column micro-panels, each stored
// row by row, the last padded by zero columns. It walks src a row at a
// time, contiguously, and copies word by word: a copy() of six
// floats is a call to memmove, which cost more than the multiplications of
// a weight gradient's thin panels.
func packTransA(src []float32, ld, kc, mc int, dst []float32) {
	full := mc / gemmMR * gemmMR
	for p := range kc {
		row := src[p*ld : p*ld+mc]
		for ir := 0; ir < full; ir += gemmMR {
			// Six floats as three 8-byte words.
			o := (*[gemmMR / 2]uint64)(unsafe.Pointer((*[gemmMR]float32)(dst[ir*kc+p*gemmMR:])))
			s := (*[gemmMR / 2]uint64)(unsafe.Pointer((*[gemmMR]float32)(row[ir:])))
			o[0], o[1], o[2] = s[0], s[1], s[2]
		}
		if full < mc {
			o := (*[gemmMR]float32)(dst[full*kc+p*gemmMR:])
			*o = [gemmMR]float32{}
			copy(o[:], row[full:])
		}
	}
}

// packB copies op(B)[pc:pc+kc, jc:jc+nc] into dst as gemmNR-column
// micro-panels, each stored row by row, with the last one padded by zero
// columns.
func (g *gemmArgs) packB(dst []float32, pc, kc, jc, nc int) {
	if !g.transB {
		fullN := nc / gemmNR * gemmNR
		src := g.b[pc*g.ldb+jc:]
		if fullN > 0 {
			g.packCols(kc, fullN/gemmNR, src, g.ldb, dst)
		}
		if fullN < nc {
			out := dst[fullN*kc : (fullN+gemmNR)*kc]
			for p := range kc {
				o := out[p*gemmNR : p*gemmNR+gemmNR]
				copy(o, src[p*g.ldb+fullN:p*g.ldb+nc])
				clear(o[nc-fullN:])
			}
		}
		return
	}
	// op(B)[p, j] = B[j, p]: read each stored row contiguously and scatter
	// it down a column of the micro-panel.
	for jr := 0; jr < nc; jr += gemmNR {
		nr := min(gemmNR, nc-jr)
		out := dst[jr*kc : (jr+gemmNR)*kc]
		src := g.b[(jc+jr)*g.ldb+pc:]
		if nr == gemmNR {
			g.packRows(gemmNR, kc, src, g.ldb, out)
			continue
		}
		clear(out)
		packRowsGo(nr, gemmNR, 0, kc, src, g.ldb, out)
	}
}

// packRowsGo interleaves columns [p0, kc) of the first rows rows of src into
// dst, whose micro-panel has stride rows of stride: dst[p*stride+r] =
// src[r*ld+p].
func packRowsGo(rows, stride, p0, kc int, src []float32, ld int, dst []float32) {
	for r := range rows {
		s := src[r*ld+p0 : r*ld+kc]
		for i, v := range s {
			dst[(p0+i)*stride+r] = v
		}
	}
}

// packRowsPortable is the portable packRowsFunc.
func packRowsPortable(rows, kc int, src []float32, ld int, dst []float32) {
	packRowsGo(rows, rows, 0, kc, src, ld, dst)
}

// alignedFloats returns n floats of *buf starting on a 64-byte boundary, so
// that packed micro-panel rows do not straddle cache lines, growing *buf if
// needed.
func alignedFloats(buf *[]float32, n int) []float32 {
	const align = 64 / 4
	if cap(*buf) < n+align {
		*buf = make([]float32, n+align)
	}
	s := (*buf)[:cap(*buf)]
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(s))) % 64 / 4)
	off = (align - off) % align
	return s[off : off+n]
}

// gemmCheckArgs panics unless the operands of Sgemm fit their shapes.
func gemmCheckArgs(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("cpu: Sgemm: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	gemmCheckOperand("A", a, ar, ac, lda)
	gemmCheckOperand("B", b, br, bc, ldb)
	gemmCheckOperand("C", c, m, n, ldc)
}

// gemmCheckOperand panics unless x holds a rows×cols matrix with row stride ld.
func gemmCheckOperand(name string, x []float32, rows, cols, ld int) {
	if ld < max(1, cols) {
		panic(fmt.Sprintf("cpu: Sgemm: ld%s = %d < %d columns", name, ld, cols))
	}
	if rows > 0 && cols > 0 && len(x) < (rows-1)*ld+cols {
		panic(fmt.Sprintf("cpu: Sgemm: len(%s) = %d, want >= %d", name, len(x), (rows-1)*ld+cols))
	}
}

// gemmScaleC sets the m×n matrix c to beta·c, or to zero if beta == 0.
func gemmScaleC(c []float32, m, n, ldc int, beta float32) {
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(row)
		case 1:
		default:
			for j := range row {
				row[j] *= beta
			}
		}
	}
}

// gemmKernelGo is the portable micro-kernel.
func gemmKernelGo(tiles, k int, a, b, c []float32, ldc, mr int, alpha, beta float32, aStep, bStep, cStep int) {
	for t := range tiles {
		tileGo(k, a[t*aStep:], b[t*bStep:], c[t*cStep:], ldc, mr, alpha, beta)
	}
}

// tileGo computes one tile for gemmKernelGo.
func tileGo(k int, a, b, c []float32, ldc, mr int, alpha, beta float32) {
	var acc [gemmMR][gemmNR]float32
	a, b = a[:k*gemmMR], b[:k*gemmNR]
	for p := range k {
		bp := (*[gemmNR]float32)(b[p*gemmNR:])
		ap := (*[gemmMR]float32)(a[p*gemmMR:])
		for r, av := range ap {
			row := &acc[r]
			for j, bv := range bp {
				row[j] += av * bv
			}
		}
	}
	for r := range mr {
		cr := c[r*ldc : r*ldc+gemmNR]
		if beta == 0 {
			for j, v := range acc[r] {
				cr[j] = alpha * v
			}
		} else {
			for j, v := range acc[r] {
				cr[j] = alpha*v + beta*cr[j]
			}
		}
	}
}

// packColsGo is the portable packColsFunc.
func packColsGo(kc, panels int, src []float32, ld int, dst []float32) {
	for p := range kc {
		row := src[p*ld : p*ld+panels*gemmNR]
		for q := range panels {
			copy(dst[(q*kc+p)*gemmNR:(q*kc+p+1)*gemmNR], row[q*gemmNR:])
		}
	}
}

// gemmBlocks returns the number of blocks of the given size that cover n.
func gemmBlocks(n, size int) int { return (n + size - 1) / size }
