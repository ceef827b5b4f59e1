package runtime

import (
	goruntime "runtime"
	"slices"
	"time"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/kernels/cpu"
)

// Sizes of the reference kernels of ProbeCPU: a GEMM of probeGEMM³ (34
// MFLOP, in the caches) and y += a·x over probeStream floats (24 MiB moved,
// out of them), each run probeRuns times.
const (
	probeGEMM   = 256
	probeStream = 1 << 21
	probeRuns   = 61
)

// ProbeCPU times cost.Probe's reference kernels on a CPU device of the
// given workers (cores): the runtime's own GEMM and axpy, one after the
// other probeRuns times (so that a slow spell touches both alike), after
// one untimed run of each; the lower quartiles. A run's time is the
// kernel's plus whatever interrupted it (a neighbour, the collector), a
// distribution with a long tail: its lower quartile moves with the
// machine's speed and least with the tail. On a 2-core VM, ten probes in
// a row spread by 3–14% (max − min) a kernel; a twentieth of a second.
func ProbeCPU(workers int) cost.Probe {
	pool := cpu.NewPool(workers)
	a := make([]float32, probeGEMM*probeGEMM)
	b := make([]float32, len(a))
	c := make([]float32, len(a))
	for i := range a {
		a[i] = float32(i%7) / 7
		b[i] = float32(i%5) / 5
	}
	x := make([]float32, probeStream)
	y := make([]float32, probeStream)
	for i := range x {
		x[i] = 1
	}
	gemm := func() { cpu.Sgemm(pool, false, false, probeGEMM, probeGEMM, probeGEMM, 1, a, probeGEMM, b, probeGEMM, 0, c, probeGEMM) }
	stream := func() { cpu.Axpy(pool, 1e-3, x, y) }
	gemm()
	stream()
	goruntime.GC() // of the probe's buffers, not during its runs
	var g, s []time.Duration
	for range probeRuns {
		t := time.Now()
		gemm()
		g = append(g, time.Since(t))
		t = time.Now()
		stream()
		s = append(s, time.Since(t))
	}
	quartile := func(ts []time.Duration) time.Duration {
		slices.Sort(ts)
		return ts[len(ts)/4]
	}
	return cost.Probe{GEMM: quartile(g), Stream: quartile(s)}
}
