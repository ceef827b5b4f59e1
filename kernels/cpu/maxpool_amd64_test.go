//go:build !purego

package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/cpu"
)

// The AVX2 row of 2×2 max-pooling gradients writes the bits the Go row
// writes: on ReLU outputs (ties, +0, +Inf, subnormals) in blocks of eight,
// and where a block holds a negative, a −0 or a NaN (the Go row's), for
// rows of every length around the block size, every element of d0 and d1
// written.
func TestBackward2x2RowsAVX2(t *testing.T) {
	if !cpu.X86.HasAVX2 {
		t.Skip("no AVX2")
	}
	r := newRNG(11)
	relu := []float32{0, 0, 1, 1, 2, 0.5, float32(math.Inf(1)), 1e-40, math.MaxFloat32}
	odd := []float32{-1, float32(math.Copysign(0, -1)), float32(math.NaN()), math.Float32frombits(0x7fc00007), math.Float32frombits(0xffc00000), float32(math.Inf(-1))}
	bits := func(v []float32) []uint32 {
		out := make([]uint32, len(v))
		for i, f := range v {
			out[i] = math.Float32bits(f)
		}
		return out
	}
	for _, ow := range []int{0, 1, 7, 8, 9, 15, 16, 17, 24, 64, 101} {
		for _, oddRate := range []float64{0, 0.01, 0.2} {
			for range 20 {
				x := make([]float32, 4*ow)
				for i := range x {
					x[i] = relu[r.IntN(len(relu))]
					if r.Float64() < oddRate {
						x[i] = odd[r.IntN(len(odd))]
					}
				}
				dy := randSlice(r, ow)
				if ow > 0 {
					dy[r.IntN(ow)] = float32(math.NaN())
				}
				want, got := make([]float32, 4*ow), make([]float32, 4*ow)
				for i := range got {
					got[i] = 7 // each element must be written
				}
				r0, r1 := x[:2*ow], x[2*ow:]
				backward2x2RowsGo(r0, r1, dy, want[:2*ow], want[2*ow:])
				backward2x2RowsAVX2(r0, r1, dy, got[:2*ow], got[2*ow:])
				require.Equal(t, bits(want), bits(got), "ow %d, x %v, dy %v", ow, x, dy)
			}
		}
	}
}
