package cpu

// MeanSquare returns Σ x²/len(x), the loss of a model without labels,
// accumulated in float64 over blocks fixed by len(x), so that the result
// does not depend on the number of workers. An empty x gives 0.
func MeanSquare(p *Pool, x []float32) float32 {
	n := len(x)
	if n == 0 {
		return 0
	}
	partial := make([]float64, (n+grainElems-1)/grainElems)
	p.For(len(partial), 1, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			var s float64
			for _, v := range x[b*grainElems : min((b+1)*grainElems, n)] {
				s += float64(v) * float64(v)
			}
			partial[b] = s
		}
	})
	var total float64
	for _, s := range partial {
		total += s
	}
	return float32(total / float64(n))
}

// MeanSquareBackward sets dx to the gradient of MeanSquare scaled by dy:
// dx = 2·x·dy/len(x). dx may alias x.
func MeanSquareBackward(p *Pool, x []float32, dy float32, dx []float32) {
	checkLen("MeanSquareBackward", "dx", len(dx), len(x))
	if len(x) == 0 {
		return
	}
	Scale(p, float32(2*float64(dy)/float64(len(x))), x, dx)
}
