package cpu

import (
	"fmt"
	"math"
)

// PoolShape describes 2-D max pooling of an input x [N,C,H,W] by KH×KW
// windows into an output y [N,C,OutH,OutW]. Padding never wins: a window's
// maximum is taken over the input pixels it covers (as if the padding were
// −Inf), and every window covers at least one.
type PoolShape struct {
	N, C, H, W       int
	KH, KW           int // window height and width
	StrideH, StrideW int
	PadH, PadW       int
}

// OutH returns the output height, or 0 if the window does not fit.
func (s PoolShape) OutH() int { return outSize(s.H, s.KH, s.StrideH, s.PadH) }

// OutW returns the output width, or 0 if the window does not fit.
func (s PoolShape) OutW() int { return outSize(s.W, s.KW, s.StrideW, s.PadW) }

// Validate reports, wrapping ErrShape, the first field that makes s
// meaningless: a dimension or stride below 1, a negative padding, a padding
// as large as the window (a window could then see only padding), or a window
// larger than the padded input.
func (s PoolShape) Validate() error {
	if err := checkDims("PoolShape",
		dim{"N", s.N, 1}, dim{"C", s.C, 1}, dim{"H", s.H, 1}, dim{"W", s.W, 1},
		dim{"KH", s.KH, 1}, dim{"KW", s.KW, 1},
		dim{"StrideH", s.StrideH, 1}, dim{"StrideW", s.StrideW, 1},
		dim{"PadH", s.PadH, 0}, dim{"PadW", s.PadW, 0}); err != nil {
		return err
	}
	if s.PadH >= s.KH {
		return fmt.Errorf("%w: PoolShape.PadH = %d, want < KH = %d", ErrShape, s.PadH, s.KH)
	}
	if s.PadW >= s.KW {
		return fmt.Errorf("%w: PoolShape.PadW = %d, want < KW = %d", ErrShape, s.PadW, s.KW)
	}
	if err := checkFit("PoolShape", "KH", s.KH, "H", s.H, "PadH", s.PadH); err != nil {
		return err
	}
	return checkFit("PoolShape", "KW", s.KW, "W", s.W, "PadW", s.PadW)
}

// check panics unless s is valid and x and y have its sizes.
func (s PoolShape) check(kernel, xName string, x []float32, yName string, y []float32) {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	checkLen(kernel, xName, len(x), s.N*s.C*s.H*s.W)
	checkLen(kernel, yName, len(y), s.N*s.C*s.OutH()*s.OutW())
}

// MaxPool2DForward sets y to the maximum of each window of x; a window
// holding a NaN gives NaN.
func MaxPool2DForward(p *Pool, s PoolShape, x, y []float32) {
	s.check("MaxPool2DForward", "x", x, "y", y)
	hw, ohw := s.H*s.W, s.OutH()*s.OutW()
	p.For(s.N*s.C, rowGrain(hw), func(lo, hi int) {
		colMax := make([]float32, s.W)
		for pl := lo; pl < hi; pl++ {
			s.forwardPlane(x[pl*hw:(pl+1)*hw], y[pl*ohw:(pl+1)*ohw], colMax)
		}
	})
}

// forwardPlane pools one plane x [H,W] into y [OutH,OutW]. For each output
// row it first takes the maximum down the window's rows, column by column
// into colMax [W], then across each window's columns: two plain loops,
// instead of a nest of short ones per window.
func (s PoolShape) forwardPlane(x, y, colMax []float32) {
	ow, W := s.OutW(), s.W
	if s.is2x2() {
		forward2x2(x, y, W, s.OutH(), ow)
		return
	}
	for i := range s.OutH() {
		h0 := i*s.StrideH - s.PadH
		h1 := min(h0+s.KH, s.H)
		h0 = max(h0, 0)
		copy(colMax, x[h0*W:(h0+1)*W])
		for h := h0 + 1; h < h1; h++ {
			row := x[h*W : (h+1)*W]
			row = row[:len(colMax)]
			for k, v := range row {
				colMax[k] = max(colMax[k], v)
			}
		}
		out := y[i*ow : (i+1)*ow]
		for j := range out {
			w0 := j*s.StrideW - s.PadW
			w1 := min(w0+s.KW, W)
			w0 = max(w0, 0)
			m := colMax[w0]
			for _, v := range colMax[w0+1 : w1] {
				m = max(m, v)
			}
			out[j] = m
		}
	}
}

// is2x2 says whether s is the common 2×2 window of stride 2 without
// padding, which has its own loops.
func (s PoolShape) is2x2() bool {
	return s.KH == 2 && s.KW == 2 && s.StrideH == 2 && s.StrideW == 2 && s.PadH == 0 && s.PadW == 0
}

// forward2x2 is forwardPlane for the 2×2 window of stride 2: one pass over
// each pair of rows.
func forward2x2(x, y []float32, W, oh, ow int) {
	for i := range oh {
		r0 := x[2*i*W : 2*i*W+2*ow]
		r1 := x[(2*i+1)*W : (2*i+1)*W+2*ow]
		out := y[i*ow : (i+1)*ow]
		for j := range out {
			c := 2 * j
			out[j] = max(r0[c], r0[c+1], r1[c], r1[c+1])
		}
	}
}

// MaxPool2DBackward sets dx to the gradient of the loss with respect to x:
// each window's dy goes to its maximum, recomputed from x, and overlapping
// windows add up. Among equal maxima the first in window order (row-major)
// takes it, and a NaN counts as larger than any number.
func MaxPool2DBackward(p *Pool, s PoolShape, x, dy, dx []float32) {
	s.check("MaxPool2DBackward", "x", x, "dy", dy)
	checkLen("MaxPool2DBackward", "dx", len(dx), len(x))
	hw, ohw := s.H*s.W, s.OutH()*s.OutW()
	p.For(s.N*s.C, rowGrain(hw), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			s.backwardPlane(x[pl*hw:(pl+1)*hw], dy[pl*ohw:(pl+1)*ohw], dx[pl*hw:(pl+1)*hw])
		}
	})
}

// backwardPlane routes one plane's dy [OutH,OutW] to dx [H,W].
func (s PoolShape) backwardPlane(x, dy, dx []float32) {
	ow, W := s.OutW(), s.W
	if s.is2x2() {
		if 2*s.OutH() != s.H || 2*ow != W {
			clear(dx) // the last row or column, in no window
		}
		backward2x2(x, dy, dx, W, s.OutH(), ow)
		return
	}
	clear(dx)
	for i := range s.OutH() {
		h0 := i*s.StrideH - s.PadH
		h1 := min(h0+s.KH, s.H)
		h0 = max(h0, 0)
		for j, g := range dy[i*ow : (i+1)*ow] {
			w0 := j*s.StrideW - s.PadW
			w1 := min(w0+s.KW, W)
			w0 = max(w0, 0)
			top := h0*W + w0
			dx[top+argmaxWindow(x[top:], W, h1-h0, w1-w0)] += g
		}
	}
}

// backward2x2 is backwardPlane for the common 2×2 window of stride 2
// without padding, a row of windows at a time (backward2x2Rows).
func backward2x2(x, dy, dx []float32, W, oh, ow int) {
	for i := range oh {
		r0, r1 := 2*i*W, (2*i+1)*W
		backward2x2Rows(x[r0:r0+2*ow], x[r1:r1+2*ow], dy[i*ow:(i+1)*ow], dx[r0:r0+2*ow], dx[r1:r1+2*ow])
	}
}

// backward2x2RowsGo routes a row of 2×2 windows' gradients dy: window j,
// r0[2j], r0[2j+1], r1[2j], r1[2j+1], gives dy[j] to the same place in
// d0 and d1 as its first maximum and +0 to the other three: four order
// keys per window, the first maximum selected by conditional moves. The
// windows do not overlap, so each writes its four elements of dx: one
// pass over dx, where clearing it and adding would take two. A window of
// +0 and positive values (all of them, after a ReLU) compares their bits
// as they are, the order keys' order there: on the MNIST CNN's first pool
// (BenchmarkMaxPool_MNIST/ReLU) 3.6 → 2.0 ms. Values of either sign pay a
// mispredicted branch at random windows instead: 3.6 → 4.1–4.8 ms
// (/Signed); the zoo's CNNs pool after a ReLU.
func backward2x2RowsGo(r0, r1, dy, d0, d1 []float32) {
	r0, r1, d0, d1 = r0[:2*len(dy)], r1[:2*len(dy)], d0[:2*len(dy)], d1[:2*len(dy)]
	for j, g := range dy {
		c := 2 * j
		var at int
		a, b, e, f := math.Float32bits(r0[c]), math.Float32bits(r0[c+1]), math.Float32bits(r1[c]), math.Float32bits(r1[c+1])
		if max(a, b, e, f) <= posInfBits {
			// +0, positive numbers and +Inf (what follows a ReLU):
			// their bits order as they do, no key needed.
			m := a
			if b > m {
				m, at = b, 1
			}
			if e > m {
				m, at = e, 2
			}
			if f > m {
				at = 3
			}
		} else {
			m := orderKey(r0[c])
			if k := orderKey(r0[c+1]); k > m {
				m, at = k, 1
			}
			if k := orderKey(r1[c]); k > m {
				m, at = k, 2
			}
			if k := orderKey(r1[c+1]); k > m {
				at = 3
			}
		}
		var v [4]float32
		v[at&3] = g
		d0[c], d0[c+1], d1[c], d1[c+1] = v[0], v[1], v[2], v[3]
	}
}

// posInfBits is +Inf's bits: below them (as unsigned integers) lie +0 and
// the positive numbers, in their order; above, NaNs and the negatives.
const posInfBits = 0x7f800000

// argmaxWindow returns the offset in x of the first maximum of the window of
// rows×cols elements, rows stride apart, at the start of x. It compares
// order keys (integers) rather than floats, so that the compiler selects the
// running maximum with conditional moves instead of branches that random
// data would mispredict; as its own small function it keeps its loop
// variables in registers.
func argmaxWindow(x []float32, stride, rows, cols int) int {
	best, m := 0, int32(math.MinInt32)
	for h := range rows {
		for k, v := range x[h*stride : h*stride+cols] {
			if key := orderKey(v); key > m {
				m, best = key, h*stride+k
			}
		}
	}
	return best
}

// orderKey maps float32 to int32 preserving order, with −0 equal to +0 and
// every NaN above +Inf, without branches.
func orderKey(v float32) int32 {
	b := math.Float32bits(v + 0) // −0 + 0 = +0
	k := int32(b)
	k ^= int32(uint32(k>>31) >> 1) // negative: reverse the order of magnitudes
	nan := (0x7f800000 - int32(b&0x7fffffff)) >> 31
	return k&^nan | nan&math.MaxInt32
}
