package cpu

import "fmt"

// ConvShape describes a 2-D convolution (cross-correlation, as in every
// framework) of an input x [N,C,H,W] with a filter w [K,C,R,S] into an output
// y [N,K,OutH,OutW]. Padding is zeros, the same on both sides.
type ConvShape struct {
	N, C, H, W       int // input batch, channels, height, width
	K, R, S          int // output channels, filter height, filter width
	StrideH, StrideW int
	PadH, PadW       int
}

// OutH returns the output height, or 0 if the filter does not fit.
func (s ConvShape) OutH() int { return outSize(s.H, s.R, s.StrideH, s.PadH) }

// OutW returns the output width, or 0 if the filter does not fit.
func (s ConvShape) OutW() int { return outSize(s.W, s.S, s.StrideW, s.PadW) }

// outSize returns how many windows of size k fit, stride apart, in an axis
// of size in padded by pad on both sides.
func outSize(in, k, stride, pad int) int {
	if stride < 1 || in+2*pad < k {
		return 0
	}
	return (in+2*pad-k)/stride + 1
}

// Validate reports, wrapping ErrShape, the first field that makes s
// meaningless: a dimension or stride below 1, a negative padding, or a filter
// larger than the padded input.
func (s ConvShape) Validate() error {
	if err := checkDims("ConvShape",
		dim{"N", s.N, 1}, dim{"C", s.C, 1}, dim{"H", s.H, 1}, dim{"W", s.W, 1},
		dim{"K", s.K, 1}, dim{"R", s.R, 1}, dim{"S", s.S, 1},
		dim{"StrideH", s.StrideH, 1}, dim{"StrideW", s.StrideW, 1},
		dim{"PadH", s.PadH, 0}, dim{"PadW", s.PadW, 0}); err != nil {
		return err
	}
	if err := checkFit("ConvShape", "R", s.R, "H", s.H, "PadH", s.PadH); err != nil {
		return err
	}
	return checkFit("ConvShape", "S", s.S, "W", s.W, "PadW", s.PadW)
}

// dim is a named value that must be at least min.
type dim struct {
	name     string
	val, min int
}

// checkDims reports the first of dims below its minimum.
func checkDims(shape string, dims ...dim) error {
	for _, d := range dims {
		if d.val < d.min {
			return fmt.Errorf("%w: %s.%s = %d, want ≥ %d", ErrShape, shape, d.name, d.val, d.min)
		}
	}
	return nil
}

// checkFit reports a window of size k larger than an input axis of size in
// padded by pad on both sides.
func checkFit(shape, kName string, k int, inName string, in int, padName string, pad int) error {
	if k > in+2*pad {
		return fmt.Errorf("%w: %s.%s = %d, want ≤ %s+2·%s = %d", ErrShape, shape, kName, k, inName, padName, in+2*pad)
	}
	return nil
}

// check panics unless s is valid and the three operands have its sizes.
func (s ConvShape) check(kernel, xName string, x []float32, wName string, w []float32, yName string, y []float32) {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	checkLen(kernel, xName, len(x), s.N*s.C*s.H*s.W)
	checkLen(kernel, wName, len(w), s.K*s.C*s.R*s.S)
	checkLen(kernel, yName, len(y), s.N*s.K*s.OutH()*s.OutW())
}

// pointwise reports whether the column matrix of an image is the image
// itself (a 1×1 filter at stride 1 without padding), so im2col can be skipped.
func (s ConvShape) pointwise() bool {
	return s.R == 1 && s.S == 1 && s.StrideH == 1 && s.StrideW == 1 && s.PadH == 0 && s.PadW == 0
}

// Conv2DForward sets y = conv(x, w): per image, w viewed as [K, C·R·S] times
// the column matrix of x [C·R·S, OutH·OutW], written straight into the
// image's NCHW output. (One GEMM over the whole batch, followed by a scatter
// from [K, N·OutH·OutW] to NCHW, took 15–40% more CPU time on the MNIST
// CNN's convolutions.)
func Conv2DForward(p *Pool, s ConvShape, x, w, y []float32) {
	s.check("Conv2DForward", "x", x, "w", w, "y", y)
	crs, ohw := s.C*s.R*s.S, s.OutH()*s.OutW()
	chw, kohw := s.C*s.H*s.W, s.K*ohw
	if s.pointwise() {
		eachItem(p, s.N, 0, func(q *Pool, n int, _ []float32) {
			Sgemm(q, false, false, s.K, ohw, crs, 1, w, crs, x[n*chw:(n+1)*chw], ohw, 0, y[n*kohw:(n+1)*kohw], ohw)
		})
		return
	}
	eachItem(p, s.N, crs*ohw, func(q *Pool, n int, col []float32) {
		s.im2col(x[n*chw:(n+1)*chw], col, ohw)
		Sgemm(q, false, false, s.K, ohw, crs, 1, w, crs, col, ohw, 0, y[n*kohw:(n+1)*kohw], ohw)
	})
}

// Conv2DBackwardData sets dx to the gradient of the loss with respect to x:
// per image, wᵀ·dy gives the gradient of the column matrix, which col2im
// adds back onto the pixels each column entry was copied from.
func Conv2DBackwardData(p *Pool, s ConvShape, dy, w, dx []float32) {
	s.check("Conv2DBackwardData", "dx", dx, "w", w, "dy", dy)
	crs, ohw := s.C*s.R*s.S, s.OutH()*s.OutW()
	chw, kohw := s.C*s.H*s.W, s.K*ohw
	if s.pointwise() {
		eachItem(p, s.N, 0, func(q *Pool, n int, _ []float32) {
			Sgemm(q, true, false, crs, ohw, s.K, 1, w, crs, dy[n*kohw:(n+1)*kohw], ohw, 0, dx[n*chw:(n+1)*chw], ohw)
		})
		return
	}
	eachItem(p, s.N, crs*ohw, func(q *Pool, n int, col []float32) {
		Sgemm(q, true, false, crs, ohw, s.K, 1, w, crs, dy[n*kohw:(n+1)*kohw], ohw, 0, col, ohw)
		s.col2im(col, ohw, dx[n*chw:(n+1)*chw])
	})
}

// filterColBudget bounds, in floats, the column matrix that
// Conv2DBackwardFilter builds at once: small enough to stay in a core's L2
// cache between im2col and the GEMM that reads it, large enough that the
// GEMM's inner dimension is long. Budgets from one image to 256K floats
// measured alike on the MNIST CNN; the whole batch at once was 20–50% slower.
const filterColBudget = 256 << 10

// Conv2DBackwardFilter sets dw to the gradient of the loss with respect to w:
// dy viewed as [K, N·OutH·OutW] times the transposed column matrix of the
// batch. The batch goes through in chunks of images, each one GEMM that
// accumulates into dw; the chunking depends only on s, so the result does
// not depend on the number of workers.
func Conv2DBackwardFilter(p *Pool, s ConvShape, x, dy, dw []float32) {
	s.check("Conv2DBackwardFilter", "x", x, "dw", dw, "dy", dy)
	crs, ohw := s.C*s.R*s.S, s.OutH()*s.OutW()
	chw, kohw := s.C*s.H*s.W, s.K*ohw
	chunks := (s.N*crs*ohw + filterColBudget - 1) / filterColBudget
	per := (s.N + chunks - 1) / chunks // images per chunk
	buf := getCol((crs + s.K) * per * ohw)
	defer colPool.Put(buf)
	for n0 := 0; n0 < s.N; n0 += per {
		m := min(per, s.N-n0)
		ld := m * ohw
		col, dyc := (*buf)[:crs*ld], (*buf)[crs*ld:(crs+s.K)*ld]
		p.For(m, 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				n := n0 + i
				s.im2col(x[n*chw:(n+1)*chw], col[i*ohw:], ld)
				dyn := dy[n*kohw : (n+1)*kohw]
				for k := range s.K {
					copy(dyc[k*ld+i*ohw:][:ohw], dyn[k*ohw:(k+1)*ohw])
				}
			}
		})
		var beta float32
		if n0 > 0 {
			beta = 1
		}
		Sgemm(p, false, true, s.K, crs, ld, 1, dyc, ld, col, ld, beta, dw, crs)
	}
}

// validRange returns the outputs [lo, hi) of an axis of out outputs whose
// input index o·stride+d lies in [0, size).
func validRange(d, size, stride, out int) (lo, hi int) {
	if d > size-1 {
		return 0, 0
	}
	if d < 0 {
		lo = (-d + stride - 1) / stride
	}
	hi = min((size-1-d)/stride+1, out)
	return min(lo, hi), hi
}

// im2col writes the column matrix of one image x [C,H,W]: row (c·R+r)·S+t,
// column oh·OutW+ow holds x[c, oh·StrideH−PadH+r, ow·StrideW−PadW+t], or 0 in
// the padding. Rows are ldc apart in col.
func (s ConvShape) im2col(x, col []float32, ldc int) {
	oh, ow := s.OutH(), s.OutW()
	hw := s.H * s.W
	for c := range s.C {
		plane := x[c*hw : (c+1)*hw]
		for r := range s.R {
			ihLo, ihHi := validRange(r-s.PadH, s.H, s.StrideH, oh)
			for t := range s.S {
				row := col[((c*s.R+r)*s.S+t)*ldc:][:oh*ow]
				d := t - s.PadW
				lo, hi := validRange(d, s.W, s.StrideW, ow)
				clear(row[:ihLo*ow])
				clear(row[ihHi*ow:])
				if s.StrideH == 1 && s.StrideW == 1 && ow == s.W {
					shiftedBlock(plane, row[ihLo*ow:ihHi*ow], (ihLo-s.PadH+r)*s.W+d, ow, lo, hi)
					continue
				}
				for i := ihLo; i < ihHi; i++ {
					dst := row[i*ow : (i+1)*ow]
					ih := i*s.StrideH - s.PadH + r
					src := plane[ih*s.W : (ih+1)*s.W]
					clear(dst[:lo])
					clear(dst[hi:])
					iw := lo*s.StrideW + d
					if s.StrideW == 1 {
						copy(dst[lo:hi], src[iw:])
						continue
					}
					for j := lo; j < hi; j++ {
						dst[j] = src[iw]
						iw += s.StrideW
					}
				}
			}
		}
	}
}

// shiftedBlock is im2col's row of one (channel, kernel row, kernel column)
// for stride 1 and an output as wide as the input, over its output rows
// that read the input (dst, whole rows of w): output row i reads input row
// i−PadH+r, consecutive rows, and column j reads j+d. So dst is one block
// of the plane starting at from (which may lie before it, or run past its
// end, by the columns that read padding), copied at once instead of a row
// at a time, and then each row's columns outside [lo, hi), which the copy
// filled from the neighbouring rows, cleared. The MNIST CNN's rows are 14
// or 28 values: one copy in place of a few dozen short ones.
func shiftedBlock(plane, dst []float32, from, w, lo, hi int) {
	a, b := max(0, -from), min(len(dst), len(plane)-from)
	if a < b {
		copy(dst[a:b], plane[from+a:from+b])
	}
	for i := 0; i < len(dst); i += w {
		row := dst[i : i+w]
		for j := range lo {
			row[j] = 0
		}
		for j := hi; j < w; j++ {
			row[j] = 0
		}
	}
}

// col2im sets x [C,H,W] to the sum, over the entries of the column matrix
// col (rows ldc apart), of each entry at the pixel im2col copied it from.
func (s ConvShape) col2im(col []float32, ldc int, x []float32) {
	clear(x)
	oh, ow := s.OutH(), s.OutW()
	hw := s.H * s.W
	for c := range s.C {
		plane := x[c*hw : (c+1)*hw]
		for r := range s.R {
			ihLo, ihHi := validRange(r-s.PadH, s.H, s.StrideH, oh)
			for t := range s.S {
				row := col[((c*s.R+r)*s.S+t)*ldc:][:oh*ow]
				d := t - s.PadW
				lo, hi := validRange(d, s.W, s.StrideW, ow)
				for i := ihLo; i < ihHi; i++ {
					src := row[i*ow+lo : i*ow+hi]
					ih := i*s.StrideH - s.PadH + r
					dst := plane[ih*s.W : (ih+1)*s.W]
					iw := lo*s.StrideW + d
					if s.StrideW == 1 {
						dst := dst[iw : iw+len(src)]
						for j, v := range src {
							dst[j] += v
						}
						continue
					}
					for _, v := range src {
						dst[iw] += v
						iw += s.StrideW
					}
				}
			}
		}
	}
}
