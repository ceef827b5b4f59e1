//go:build race

package runtime

// raceEnabled says whether the tests run under the race detector, which
// makes the emulated GPU's kernels (Go, run by the test binary's
// children) several times slower.
const raceEnabled = true
