package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// reluValues draws n floats, a third of them from the values where ReLU's
// rule is decided (signed zeros, NaNs of either sign, infinities,
// subnormals, the smallest and largest).
func reluValues(r *rand.Rand, n int) []float32 {
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), -float32(math.NaN()),
		math.Float32frombits(0x7fc01234), math.Float32frombits(0xffc04321), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, math.MaxFloat32, -math.MaxFloat32, 1e-40, -1e-40}
	v := make([]float32, n)
	for i := range v {
		if r.IntN(3) == 0 {
			v[i] = special[r.IntN(len(special))]
		} else {
			v[i] = float32(r.NormFloat64())
		}
	}
	return v
}

// Every implementation of the ReLU rows computes the reference's bits, at
// every length (the vector forms' tails included), with dx in place of dy.
func TestReLURowsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	bits := func(v []float32) []uint32 {
		b := make([]uint32, len(v))
		for i, f := range v {
			b[i] = math.Float32bits(f)
		}
		return b
	}
	for _, impl := range reluRowsImpls {
		for n := range 70 {
			for range 4 {
				x, b, dy := reluValues(r, n), reluValues(r, n), reluValues(r, n)
				b0 := reluValues(r, 1)[0]
				want, got := make([]float32, n), make([]float32, n)

				reluRowsGo.fwd(x, b0, want)
				impl.fwd(x, b0, got)
				require.Equal(t, bits(want), bits(got), "%s fwd, n %d", impl.name, n)
				reluRowsGo.fwdVec(x, b, want)
				impl.fwdVec(x, b, got)
				require.Equal(t, bits(want), bits(got), "%s fwdVec, n %d", impl.name, n)

				reluRowsGo.bwd(x, b0, dy, want)
				got = append(got[:0], dy...)
				impl.bwd(x, b0, got, got)
				require.Equal(t, bits(want), bits(got), "%s bwd in place, n %d", impl.name, n)
				reluRowsGo.bwdVec(x, b, dy, want)
				got = append(got[:0], dy...)
				impl.bwdVec(x, b, got, got)
				require.Equal(t, bits(want), bits(got), "%s bwdVec in place, n %d", impl.name, n)
			}
		}
	}
}
