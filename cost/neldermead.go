package cost

import (
	"math"

	"gonum.org/v1/gonum/optimize"
)

// nelderMead minimizes f from x0 with gonum's Nelder–Mead simplex, starting
// from a simplex of steps of size step along each axis, for at most maxEval
// evaluations or until the simplex's values agree within tol.
func nelderMead(f func([]float64) float64, x0 []float64, step float64, maxEval int, tol float64) ([]float64, float64) {
	p := optimize.Problem{Func: func(x []float64) float64 {
		v := f(x)
		if math.IsNaN(v) {
			return math.Inf(1)
		}
		return v
	}}
	res, err := optimize.Minimize(p, x0, &optimize.Settings{FuncEvaluations: maxEval, Converger: &optimize.FunctionConverge{Absolute: tol, Iterations: 200}},
		&optimize.NelderMead{SimplexSize: step})
	if err != nil && res == nil {
		return x0, f(x0)
	}
	return res.X, res.F
}
