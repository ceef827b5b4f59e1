//go:build !amd64 || purego

package cpu

// reluRowsImpls lists the ReLU row kernels this CPU can run, slowest first.
var reluRowsImpls = []reluRows{reluRowsGo}
