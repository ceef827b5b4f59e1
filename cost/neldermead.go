package cost

import (
	"math"
	"slices"
)

// nelderMead minimizes f from x0 with the standard Nelder–Mead simplex
// (reflection 1, expansion 2, contraction ½, shrink ½), starting from a
// simplex of steps of size step along each axis. It stops after maxEval
// evaluations or when the simplex's values agree within tol. (gonum's
// optimize package would pull in golang.org/x/tools through its CMA-ES
// dependency; this is the 60 lines we need.)
func nelderMead(f func([]float64) float64, x0 []float64, step float64, maxEval int, tol float64) ([]float64, float64) {
	n := len(x0)
	type vertex struct {
		x []float64
		v float64
	}
	simplex := make([]vertex, n+1)
	evals := 0
	eval := func(x []float64) float64 {
		evals++
		v := f(x)
		if math.IsNaN(v) {
			return math.Inf(1)
		}
		return v
	}
	simplex[0] = vertex{slices.Clone(x0), eval(x0)}
	for i := range n {
		x := slices.Clone(x0)
		x[i] += step
		simplex[i+1] = vertex{x, eval(x)}
	}
	point := func(c []float64, d []float64, t float64) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = c[i] + t*(d[i]-c[i])
		}
		return x
	}
	for evals < maxEval {
		slices.SortStableFunc(simplex, func(a, b vertex) int {
			switch {
			case a.v < b.v:
				return -1
			case a.v > b.v:
				return 1
			}
			return 0
		})
		if math.Abs(simplex[n].v-simplex[0].v) <= tol {
			break
		}
		centroid := make([]float64, n)
		for _, s := range simplex[:n] {
			for i := range centroid {
				centroid[i] += s.x[i] / float64(n)
			}
		}
		worst := simplex[n]
		xr := point(centroid, worst.x, -1)
		vr := eval(xr)
		switch {
		case vr < simplex[0].v:
			xe := point(centroid, worst.x, -2)
			if ve := eval(xe); ve < vr {
				simplex[n] = vertex{xe, ve}
			} else {
				simplex[n] = vertex{xr, vr}
			}
		case vr < simplex[n-1].v:
			simplex[n] = vertex{xr, vr}
		default:
			xc := point(centroid, worst.x, 0.5)
			if vr < worst.v {
				xc = point(centroid, xr, 0.5)
			}
			if vc := eval(xc); vc < min(vr, worst.v) {
				simplex[n] = vertex{xc, vc}
				continue
			}
			for i := 1; i <= n; i++ {
				x := point(simplex[0].x, simplex[i].x, 0.5)
				simplex[i] = vertex{x, eval(x)}
			}
		}
	}
	best := simplex[0]
	for _, s := range simplex[1:] {
		if s.v < best.v {
			best = s
		}
	}
	return best.x, best.v
}
