package cpu

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
)

// convRef is the direct float64 convolution: the definition, loop by loop.
func convRef(s ConvShape, x, w []float64) []float64 {
	oh, ow := s.OutH(), s.OutW()
	y := make([]float64, s.N*s.K*oh*ow)
	for n := range s.N {
		for k := range s.K {
			for i := range oh {
				for j := range ow {
					var acc float64
					for c := range s.C {
						for r := range s.R {
							for q := range s.S {
								ih, iw := i*s.StrideH-s.PadH+r, j*s.StrideW-s.PadW+q
								if ih < 0 || ih >= s.H || iw < 0 || iw >= s.W {
									continue
								}
								acc += x[((n*s.C+c)*s.H+ih)*s.W+iw] * w[((k*s.C+c)*s.R+r)*s.S+q]
							}
						}
					}
					y[((n*s.K+k)*oh+i)*ow+j] = acc
				}
			}
		}
	}
	return y
}

func (s ConvShape) String() string {
	return fmt.Sprintf("N%dC%dH%dW%d_K%dR%dS%d_st%dx%d_pad%dx%d", s.N, s.C, s.H, s.W, s.K, s.R, s.S, s.StrideH, s.StrideW, s.PadH, s.PadW)
}

// convCases cover odd sizes, strides 1–3, paddings 0–2, non-square filters,
// 1×1 filters (the im2col-free path), N = 1 and batches that run image by
// image or in parallel under testPools.
var convCases = []ConvShape{
	{N: 1, C: 1, H: 5, W: 5, K: 1, R: 3, S: 3, StrideH: 1, StrideW: 1},
	{N: 2, C: 3, H: 7, W: 6, K: 4, R: 3, S: 2, StrideH: 2, StrideW: 1, PadH: 1},
	{N: 3, C: 2, H: 6, W: 7, K: 5, R: 2, S: 3, StrideH: 2, StrideW: 2, PadH: 2, PadW: 2},
	{N: 2, C: 5, H: 4, W: 3, K: 3, R: 1, S: 1, StrideH: 1, StrideW: 1},
	{N: 1, C: 2, H: 5, W: 6, K: 3, R: 1, S: 1, StrideH: 2, StrideW: 2},
	{N: 4, C: 3, H: 9, W: 9, K: 2, R: 5, S: 5, StrideH: 3, StrideW: 3, PadH: 2, PadW: 1},
	{N: 2, C: 2, H: 3, W: 3, K: 2, R: 3, S: 3, StrideH: 1, StrideW: 1},
	{N: 7, C: 2, H: 5, W: 4, K: 3, R: 2, S: 2, StrideH: 3, StrideW: 1, PadW: 1},
	{N: 1, C: 1, H: 1, W: 8, K: 2, R: 1, S: 3, StrideH: 1, StrideW: 1, PadW: 1},
}

func TestConv2DForward(t *testing.T) {
	for i, s := range convCases {
		rng := newRNG(uint64(i))
		x := randSlice(rng, s.N*s.C*s.H*s.W)
		w := randSlice(rng, s.K*s.C*s.R*s.S)
		want := convRef(s, to64(x), to64(w))
		for _, tp := range testPools {
			t.Run(s.String()+"/"+tp.name, func(t *testing.T) {
				y := randSlice(rng, len(want)) // garbage the kernel must overwrite
				Conv2DForward(tp.p, s, x, w, y)
				checkClose(t, "y", y, want, fwdTol)
			})
		}
	}
}

func TestConv2DBackward(t *testing.T) {
	for i, s := range convCases {
		rng := newRNG(uint64(i) + 100)
		x := randSlice(rng, s.N*s.C*s.H*s.W)
		w := randSlice(rng, s.K*s.C*s.R*s.S)
		r := randSlice(rng, s.N*s.K*s.OutH()*s.OutW())
		x64, w64 := to64(x), to64(w)
		wantDx := centralDiff(projected(r, func(x []float64) []float64 { return convRef(s, x, w64) }), x64, fdStep)
		wantDw := centralDiff(projected(r, func(w []float64) []float64 { return convRef(s, x64, w) }), w64, fdStep)
		for _, tp := range testPools {
			t.Run(s.String()+"/"+tp.name, func(t *testing.T) {
				dx, dw := randSlice(rng, len(x)), randSlice(rng, len(w))
				Conv2DBackwardData(tp.p, s, r, w, dx)
				checkClose(t, "dx", dx, wantDx, gradTol)
				Conv2DBackwardFilter(tp.p, s, x, r, dw)
				checkClose(t, "dw", dw, wantDw, gradTol)
			})
		}
	}
}

// convFilterGradRef is dw[k,c,r,q] = Σ dy[n,k,i,j]·x[n,c,i·sh−ph+r,j·sw−pw+q],
// the formula finite differences check on small shapes in TestConv2DBackward.
func convFilterGradRef(s ConvShape, x, dy []float64) []float64 {
	oh, ow := s.OutH(), s.OutW()
	dw := make([]float64, s.K*s.C*s.R*s.S)
	for n := range s.N {
		for k := range s.K {
			for i := range oh {
				for j := range ow {
					g := dy[((n*s.K+k)*oh+i)*ow+j]
					for c := range s.C {
						for r := range s.R {
							for q := range s.S {
								ih, iw := i*s.StrideH-s.PadH+r, j*s.StrideW-s.PadW+q
								if ih >= 0 && ih < s.H && iw >= 0 && iw < s.W {
									dw[((k*s.C+c)*s.R+r)*s.S+q] += g * x[((n*s.C+c)*s.H+ih)*s.W+iw]
								}
							}
						}
					}
				}
			}
		}
	}
	return dw
}

// TestConv2DBackwardFilterChunks uses batches whose column matrix exceeds
// filterColBudget, so the gradient is summed over several chunks (one of
// them short).
func TestConv2DBackwardFilterChunks(t *testing.T) {
	for _, s := range []ConvShape{
		{N: 9, C: 8, H: 24, W: 24, K: 3, R: 3, S: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1},
		{N: 5, C: 1, H: 300, W: 240, K: 2, R: 1, S: 1, StrideH: 1, StrideW: 1},
	} {
		if s.N*s.C*s.R*s.S*s.OutH()*s.OutW() <= filterColBudget {
			t.Fatalf("%v fits one chunk; the test needs several", s)
		}
		rng := newRNG(7)
		x := randSlice(rng, s.N*s.C*s.H*s.W)
		dy := randSlice(rng, s.N*s.K*s.OutH()*s.OutW())
		want := convFilterGradRef(s, to64(x), to64(dy))
		for _, tp := range testPools {
			t.Run(s.String()+"/"+tp.name, func(t *testing.T) {
				dw := randSlice(rng, len(want))
				Conv2DBackwardFilter(tp.p, s, x, dy, dw)
				checkClose(t, "dw", dw, want, fwdTol)
			})
		}
	}
}

func TestConvShapeValidate(t *testing.T) {
	ok := ConvShape{N: 1, C: 1, H: 4, W: 4, K: 1, R: 3, S: 3, StrideH: 1, StrideW: 1}
	tests := []struct {
		name  string
		edit  func(*ConvShape)
		field string // "" when valid
	}{
		{"valid", func(*ConvShape) {}, ""},
		{"filter equal to padded input", func(s *ConvShape) { s.H, s.R, s.PadH = 1, 3, 1 }, ""},
		{"zero N", func(s *ConvShape) { s.N = 0 }, "ConvShape.N "},
		{"zero C", func(s *ConvShape) { s.C = 0 }, "ConvShape.C "},
		{"zero K", func(s *ConvShape) { s.K = 0 }, "ConvShape.K "},
		{"negative W", func(s *ConvShape) { s.W = -2 }, "ConvShape.W "},
		{"zero StrideW", func(s *ConvShape) { s.StrideW = 0 }, "ConvShape.StrideW "},
		{"negative PadH", func(s *ConvShape) { s.PadH = -1 }, "ConvShape.PadH "},
		{"filter taller than input", func(s *ConvShape) { s.R = 5 }, "ConvShape.R "},
		{"filter wider than padded input", func(s *ConvShape) { s.S, s.PadW = 7, 1 }, "ConvShape.S "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.edit(&s)
			err := s.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				if s.OutH() < 1 || s.OutW() < 1 {
					t.Fatalf("output got %d×%d, want ≥ 1×1", s.OutH(), s.OutW())
				}
				return
			}
			if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want an ErrShape naming %q", err, tc.field)
			}
		})
	}
}

func TestConvOutSize(t *testing.T) {
	tests := []struct {
		s          ConvShape
		outH, outW int
	}{
		{ConvShape{H: 28, W: 28, R: 3, S: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}, 28, 28},
		{ConvShape{H: 7, W: 8, R: 3, S: 2, StrideH: 2, StrideW: 3}, 3, 3},
		{ConvShape{H: 2, W: 2, R: 3, S: 3, StrideH: 1, StrideW: 1}, 0, 0},
	}
	for _, tc := range tests {
		if h, w := tc.s.OutH(), tc.s.OutW(); h != tc.outH || w != tc.outW {
			t.Errorf("%v: got %d×%d, want %d×%d", tc.s, h, w, tc.outH, tc.outW)
		}
	}
}

func TestConvPanicsOnBadCall(t *testing.T) {
	s := convCases[1]
	x := make([]float32, s.N*s.C*s.H*s.W)
	w := make([]float32, s.K*s.C*s.R*s.S)
	y := make([]float32, s.N*s.K*s.OutH()*s.OutW())
	bad := s
	bad.StrideH = 0
	for name, f := range map[string]func(){
		"short y":       func() { Conv2DForward(nil, s, x, w, y[1:]) },
		"short w":       func() { Conv2DBackwardData(nil, s, y, w[1:], x) },
		"long dx":       func() { Conv2DBackwardData(nil, s, y, w, append(x, 0)) },
		"invalid shape": func() { Conv2DBackwardFilter(nil, bad, x, y, w) },
	} {
		t.Run(name, func(t *testing.T) { mustPanicShape(t, f) })
	}
}

// TestConvConcurrent runs the conv kernels from several goroutines at once,
// sharing the scratch pool, as the runtime's streams do.
func TestConvConcurrent(t *testing.T) {
	s := convCases[2]
	rng := newRNG(11)
	x := randSlice(rng, s.N*s.C*s.H*s.W)
	w := randSlice(rng, s.K*s.C*s.R*s.S)
	dy := randSlice(rng, s.N*s.K*s.OutH()*s.OutW())
	want := [3][]float32{make([]float32, len(dy)), make([]float32, len(x)), make([]float32, len(w))}
	Conv2DForward(nil, s, x, w, want[0])
	Conv2DBackwardData(nil, s, dy, w, want[1])
	Conv2DBackwardFilter(nil, s, x, dy, want[2])
	p := NewPool(2)
	var wg sync.WaitGroup
	errs := make(chan string, 12)
	for g := range 4 {
		wg.Go(func() {
			for range 5 {
				got := [3][]float32{make([]float32, len(dy)), make([]float32, len(x)), make([]float32, len(w))}
				Conv2DForward(p, s, x, w, got[0])
				Conv2DBackwardData(p, s, dy, w, got[1])
				Conv2DBackwardFilter(p, s, x, dy, got[2])
				for i, name := range []string{"y", "dx", "dw"} {
					if e := relErr(got[i], to64(want[i])); e > fwdTol {
						errs <- fmt.Sprintf("goroutine %d: %s relative error got %.3g, want ≤ %.0g", g, name, e, fwdTol)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// im2col writes, for any shape (strides, paddings, filters; the
// stride-1 same-width case by its block copies), what its definition
// says: x's pixel where the filter covers one, 0 in the padding.
func TestIm2colDefinition(t *testing.T) {
	r := newRNG(7)
	for range 400 {
		s := ConvShape{N: 1, C: 1 + r.IntN(3), H: 1 + r.IntN(9), W: 1 + r.IntN(9), K: 1,
			R: 1 + r.IntN(5), S: 1 + r.IntN(5), StrideH: 1 + r.IntN(2), StrideW: 1 + r.IntN(2)}
		if r.IntN(2) == 0 { // the fast path's case
			s.StrideH, s.StrideW = 1, 1
			s.S |= 1
			s.PadW = s.S / 2
		} else {
			s.PadW = r.IntN(s.S)
		}
		s.PadH = r.IntN(s.R)
		if s.Validate() != nil {
			continue
		}
		oh, ow := s.OutH(), s.OutW()
		x := randSlice(r, s.C*s.H*s.W)
		ld := oh*ow + r.IntN(3)
		col := make([]float32, s.C*s.R*s.S*ld)
		for i := range col {
			col[i] = float32(math.NaN()) // every entry must be written
		}
		s.im2col(x, col, ld)
		for c := range s.C {
			for fr := range s.R {
				for ft := range s.S {
					for i := range oh {
						for j := range ow {
							ih, iw := i*s.StrideH-s.PadH+fr, j*s.StrideW-s.PadW+ft
							want := float32(0)
							if ih >= 0 && ih < s.H && iw >= 0 && iw < s.W {
								want = x[(c*s.H+ih)*s.W+iw]
							}
							got := col[((c*s.R+fr)*s.S+ft)*ld+i*ow+j]
							if math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("%+v: col[c %d, r %d, t %d][%d,%d] = %g, want %g", s, c, fr, ft, i, j, got, want)
							}
						}
					}
				}
			}
		}
	}
}
