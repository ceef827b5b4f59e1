package cpu

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxPoolRef is max pooling as defined: padding is −Inf, and a value
// replaces the running maximum only if it is larger, so ties go to the
// first in window order.
func maxPoolRef(s PoolShape, x []float64) []float64 {
	oh, ow := s.OutH(), s.OutW()
	y := make([]float64, s.N*s.C*oh*ow)
	for pl := range s.N * s.C {
		for i := range oh {
			for j := range ow {
				m := math.Inf(-1)
				for r := range s.KH {
					for q := range s.KW {
						ih, iw := i*s.StrideH-s.PadH+r, j*s.StrideW-s.PadW+q
						if ih >= 0 && ih < s.H && iw >= 0 && iw < s.W {
							m = max(m, x[(pl*s.H+ih)*s.W+iw])
						}
					}
				}
				y[(pl*oh+i)*ow+j] = m
			}
		}
	}
	return y
}

func (s PoolShape) String() string {
	return fmt.Sprintf("N%dC%dH%dW%d_%dx%d_st%dx%d_pad%dx%d", s.N, s.C, s.H, s.W, s.KH, s.KW, s.StrideH, s.StrideW, s.PadH, s.PadW)
}

var poolCases = []PoolShape{
	{N: 2, C: 3, H: 8, W: 8, KH: 2, KW: 2, StrideH: 2, StrideW: 2},
	{N: 1, C: 2, H: 7, W: 5, KH: 2, KW: 2, StrideH: 2, StrideW: 2}, // odd: the last row and column are dropped
	{N: 2, C: 2, H: 7, W: 7, KH: 3, KW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1},
	{N: 1, C: 3, H: 6, W: 5, KH: 3, KW: 2, StrideH: 1, StrideW: 1, PadH: 1}, // overlapping windows
	{N: 3, C: 1, H: 5, W: 9, KH: 3, KW: 3, StrideH: 3, StrideW: 2, PadH: 2, PadW: 2},
	{N: 1, C: 1, H: 4, W: 4, KH: 4, KW: 4, StrideH: 1, StrideW: 1},
}

// distinctValues returns the values −1 + 2·(k+½)/n for k in a random order:
// all different, spaced wider than two finite-difference steps for n < 1000.
func distinctValues(seed uint64, n int) []float32 {
	x := make([]float32, n)
	for i, k := range newRNG(seed).Perm(n) {
		x[i] = float32(-1 + 2*(float64(k)+0.5)/float64(n))
	}
	return x
}

func TestMaxPool2DForward(t *testing.T) {
	for i, s := range poolCases {
		x := randSlice(newRNG(uint64(i)), s.N*s.C*s.H*s.W)
		want := maxPoolRef(s, to64(x))
		for _, tp := range testPools {
			t.Run(s.String()+"/"+tp.name, func(t *testing.T) {
				y := make([]float32, len(want))
				MaxPool2DForward(tp.p, s, x, y)
				checkClose(t, "y", y, want, 0)
			})
		}
	}
}

func TestMaxPool2DBackward(t *testing.T) {
	for i, s := range poolCases {
		x := distinctValues(uint64(i), s.N*s.C*s.H*s.W)
		r := randSlice(newRNG(uint64(i)+50), s.N*s.C*s.OutH()*s.OutW())
		want := centralDiff(projected(r, func(x []float64) []float64 { return maxPoolRef(s, x) }), to64(x), fdStep)
		for _, tp := range testPools {
			t.Run(s.String()+"/"+tp.name, func(t *testing.T) {
				dx := randSlice(newRNG(1), len(x))
				MaxPool2DBackward(tp.p, s, x, r, dx)
				checkClose(t, "dx", dx, want, gradTol)
			})
		}
	}
}

// TestMaxPoolTies checks that among equal values the first in window order
// takes the gradient, and that padding never does.
func TestMaxPoolTies(t *testing.T) {
	tests := []struct {
		s    PoolShape
		want []float32 // dx for x = 0 and dy = 1
	}{
		{PoolShape{N: 1, C: 1, H: 4, W: 4, KH: 2, KW: 2, StrideH: 2, StrideW: 2}, []float32{
			1, 0, 1, 0,
			0, 0, 0, 0,
			1, 0, 1, 0,
			0, 0, 0, 0}},
		{PoolShape{N: 1, C: 1, H: 3, W: 3, KH: 2, KW: 2, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}, []float32{
			4, 2, 2,
			2, 1, 1,
			2, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.s.String(), func(t *testing.T) {
			x := make([]float32, tc.s.H*tc.s.W)
			dy := make([]float32, tc.s.OutH()*tc.s.OutW())
			Fill(nil, 1, dy)
			dx := make([]float32, len(x))
			MaxPool2DBackward(nil, tc.s, x, dy, dx)
			if fmt.Sprint(dx) != fmt.Sprint(tc.want) {
				t.Errorf("dx got %v, want %v", dx, tc.want)
			}
		})
	}
}

func TestMaxPoolNaN(t *testing.T) {
	s := PoolShape{N: 1, C: 1, H: 2, W: 4, KH: 2, KW: 2, StrideH: 2, StrideW: 2}
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	x := []float32{1, nan, negZero, 0, nan, 3, 0, negZero}
	y := make([]float32, 2)
	MaxPool2DForward(nil, s, x, y)
	if !math.IsNaN(float64(y[0])) || y[1] != 0 {
		t.Fatalf("y got %v, want [NaN 0]", y)
	}
	dx := make([]float32, len(x))
	MaxPool2DBackward(nil, s, x, []float32{1, 1}, dx)
	if want := fmt.Sprint([]float32{0, 1, 1, 0, 0, 0, 0, 0}); fmt.Sprint(dx) != want {
		t.Fatalf("dx got %v, want %v (the first NaN, and −0 tied with 0 before it)", dx, want)
	}
}

func TestOrderKey(t *testing.T) {
	inf := float32(math.Inf(1))
	ordered := []float32{-inf, -math.MaxFloat32, -2, -1, -math.SmallestNonzeroFloat32, 0, math.SmallestNonzeroFloat32, 1, 2, math.MaxFloat32, inf}
	for i := 1; i < len(ordered); i++ {
		if a, b := orderKey(ordered[i-1]), orderKey(ordered[i]); a >= b {
			t.Errorf("orderKey(%v) = %d, orderKey(%v) = %d: got ≥, want <", ordered[i-1], a, ordered[i], b)
		}
	}
	negZero := float32(math.Copysign(0, -1))
	if a, b := orderKey(negZero), orderKey(0); a != b {
		t.Errorf("orderKey(−0) = %d, orderKey(+0) = %d, want equal", a, b)
	}
	for _, nan := range []float32{float32(math.NaN()), -float32(math.NaN())} {
		if k := orderKey(nan); k <= orderKey(inf) {
			t.Errorf("orderKey(NaN) = %d, want > orderKey(+Inf) = %d", k, orderKey(inf))
		}
	}
}

func TestPoolShapeValidate(t *testing.T) {
	ok := PoolShape{N: 1, C: 1, H: 4, W: 4, KH: 2, KW: 2, StrideH: 2, StrideW: 2}
	tests := []struct {
		name  string
		edit  func(*PoolShape)
		field string // "" when valid
	}{
		{"valid", func(*PoolShape) {}, ""},
		{"largest padding", func(s *PoolShape) { s.KH, s.PadH = 3, 2 }, ""},
		{"zero C", func(s *PoolShape) { s.C = 0 }, "PoolShape.C "},
		{"zero KW", func(s *PoolShape) { s.KW = 0 }, "PoolShape.KW "},
		{"zero StrideH", func(s *PoolShape) { s.StrideH = 0 }, "PoolShape.StrideH "},
		{"negative PadW", func(s *PoolShape) { s.PadW = -1 }, "PoolShape.PadW "},
		{"padding as large as the window", func(s *PoolShape) { s.PadH = 2 }, "PoolShape.PadH "},
		{"window wider than input", func(s *PoolShape) { s.KW = 5 }, "PoolShape.KW "},
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
				return
			}
			if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want an ErrShape naming %q", err, tc.field)
			}
		})
	}
}

func TestMaxPoolPanicsOnBadCall(t *testing.T) {
	s := poolCases[0]
	x := make([]float32, s.N*s.C*s.H*s.W)
	y := make([]float32, s.N*s.C*s.OutH()*s.OutW())
	for name, f := range map[string]func(){
		"short y":  func() { MaxPool2DForward(nil, s, x, y[1:]) },
		"short dx": func() { MaxPool2DBackward(nil, s, x, y, x[1:]) },
	} {
		t.Run(name, func(t *testing.T) { mustPanicShape(t, f) })
	}
}

// The 2×2 backward pass routes each window's gradient where argmaxWindow
// (the order keys) says, whether its values are all +0 or positive (the
// fast path: ReLU's outputs, ties and +Inf among them) or not (−0, NaNs,
// negatives).
func TestMaxPool2x2BackwardMatchesArgmax(t *testing.T) {
	r := newRNG(3)
	sets := [][]float32{
		{0, 1, 1, 2, float32(math.Inf(1)), 1e-40, math.MaxFloat32},
		{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.NaN()), math.Float32frombits(0x7fc00007), float32(math.Inf(-1)), 1e-40},
	}
	s := PoolShape{N: 2, C: 3, H: 6, W: 10, KH: 2, KW: 2, StrideH: 2, StrideW: 2}
	for range 200 {
		set := sets[r.IntN(len(sets))]
		x := make([]float32, s.N*s.C*s.H*s.W)
		for i := range x {
			x[i] = set[r.IntN(len(set))]
		}
		dy := randSlice(r, s.N*s.C*s.OutH()*s.OutW())
		dx := make([]float32, len(x))
		MaxPool2DBackward(nil, s, x, dy, dx)
		want := make([]float32, len(x))
		for pl := range s.N * s.C {
			for i := range s.OutH() {
				for j := range s.OutW() {
					top := pl*s.H*s.W + 2*i*s.W + 2*j
					want[top+argmaxWindow(x[top:], s.W, 2, 2)] = dy[(pl*s.OutH()+i)*s.OutW()+j]
				}
			}
		}
		require.Equal(t, want, dx, "x %v", x)
	}
}
