// Package cpu holds flowkit's float32 CPU kernels.
//
// Every kernel works on flat row-major slices (images in NCHW) whose sizes are
// given by explicit dimensions; none allocates its outputs. Kernels that read
// a *Pool spread their work over its workers; a nil *Pool runs serially.
// Each kernel is tested against a float64 reference, and each backward
// kernel against central finite differences of that reference.
//
// The package knows nothing of graphs or plans: the runtime maps graph ops to
// these functions.
package cpu
