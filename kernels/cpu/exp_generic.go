//go:build !amd64 || purego

package cpu

// expIntoImpl is expInto's loop on this CPU.
var expIntoImpl = func(x, y []float32, m float32) float64 { return expIntoGo(x, y, m, 0) }

// sumExpImpl is sumExp's loop on this CPU.
var sumExpImpl = sumExpGo
