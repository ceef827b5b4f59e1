//go:build !purego

package cpu

import (
	"math"

	"golang.org/x/sys/cpu"
)

// expIntoImpl and sumExpImpl are expInto's and sumExp's loops on this
// CPU: expIntoAVX2's where it runs.
var expIntoImpl, sumExpImpl = func() (func(x, y []float32, m float32) float64, func(x []float32, m float32) float64) {
	if cpu.X86.HasAVX2 {
		return func(x, y []float32, m float32) float64 { return expIntoAVX2(x, y, m, 0) }, sumExpAVX2
	}
	return func(x, y []float32, m float32) float64 { return expIntoGo(x, y, m, 0) }, sumExpGo
}()

// sumExpAVX2 is sumExp by expIntoAVX2, a block of values at a time into
// scratch: the same sum.
func sumExpAVX2(x []float32, m float32) float64 {
	var scratch [512]float32
	var s float64
	for i := 0; i < len(x); i += len(scratch) {
		block := x[i:min(i+len(scratch), len(x))]
		s = expIntoAVX2(block, scratch[:len(block)], m, s)
	}
	return s
}

// expConsts are the constants of expIntoGo's arithmetic, each four times
// (a row per vector register): scale, shift, step, the polynomial's 1/24,
// 1/6, 1/2 and 1, the lower bound, zero and the table index mask.
var expConsts = func() (c [10][4]uint64) {
	for i, v := range []float64{expScale, expShift, expStep, 1.0 / 24, 1.0 / 6, 1.0 / 2, 1, expMin, 0} {
		for j := range c[i] {
			c[i][j] = math.Float64bits(v)
		}
	}
	for j := range c[9] {
		c[9][j] = expSteps - 1
	}
	return c
}()

// expIntoAVX2 is expIntoGo, four values at a time while all four are in
// (−708, 0] after subtracting m; a group with a value outside, and the
// last values, go to the Go loop. The sum, from s, is added value by
// value, in order, as there.
func expIntoAVX2(x, y []float32, m float32, s float64) float64 {
	y = y[:len(x)]
	for i := 0; i < len(x); {
		if n := (len(x) - i) &^ 3; n > 0 {
			var done int
			done, s = expRun4(&x[i], &y[i], n, float64(m), s, &expConsts, &expTable)
			if i += done; done == n && i == len(x) {
				break
			}
		}
		k := min(len(x)-i, 4) // a group the vector loop left, or the tail
		s = expIntoGo(x[i:i+k], y[i:i+k], m, s)
		i += k
	}
	return s
}

// expRun4 sets y[i] = float32(e_i) for e_i = exp(x[i] − m) and adds e_i
// to s, in order, for groups of four values from i = 0 while all four
// are in range (n a positive multiple of 4); it returns how many it did
// and the sum.
//
//go:noescape
func expRun4(x, y *float32, n int, m, s float64, c *[10][4]uint64, table *[expSteps]float64) (done int, sum float64)
