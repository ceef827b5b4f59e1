package cpu

import "testing"

func meanSquareRef(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return s / float64(len(x))
}

var meanSquareCases = []int{1, 7, 1000, 3*grainElems + 5}

func TestMeanSquare(t *testing.T) {
	for i, n := range meanSquareCases {
		x := randSlice(newRNG(uint64(i)), n)
		want := meanSquareRef(to64(x))
		var serial float32
		for _, tp := range testPools {
			t.Run(tp.name, func(t *testing.T) {
				got := MeanSquare(tp.p, x)
				checkClose(t, "loss", []float32{got}, []float64{want}, fwdTol)
				if tp.p == nil {
					serial = got
				} else if got != serial {
					t.Errorf("got %v with %d workers, want %v as serially", got, tp.p.Workers(), serial)
				}
			})
		}
	}
	if got := MeanSquare(nil, nil); got != 0 {
		t.Errorf("empty: got %v, want 0", got)
	}
}

func TestMeanSquareBackward(t *testing.T) {
	const dy = 1.7
	for i, n := range meanSquareCases {
		if n > 1000 {
			continue
		}
		x := randSlice(newRNG(uint64(i)+10), n)
		want := centralDiff(func(x []float64) float64 { return dy * meanSquareRef(x) }, to64(x), fdStep)
		for _, tp := range testPools {
			t.Run(tp.name, func(t *testing.T) {
				dx := make([]float32, n)
				MeanSquareBackward(tp.p, x, dy, dx)
				checkClose(t, "dx", dx, want, gradTol)
			})
		}
	}
	mustPanicShape(t, func() { MeanSquareBackward(nil, make([]float32, 3), 1, make([]float32, 2)) })
}
