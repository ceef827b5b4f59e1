//go:build !amd64 || purego

package cpu

// gemmImpls lists the GEMM implementations this build can run, slowest
// first.
var gemmImpls = []gemmImpl{{"go", gemmKernelGo, packRowsPortable, packColsGo}}

// gemmDefault is the implementation Sgemm uses.
var gemmDefault = gemmImpls[0]
