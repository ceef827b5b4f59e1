package runtime

import (
	"fmt"
	"math"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/kernels/cpu"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
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
	gemm := func() {
		cpu.Sgemm(pool, false, false, probeGEMM, probeGEMM, probeGEMM, 1, a, probeGEMM, b, probeGEMM, 0, c, probeGEMM)
	}
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

// ProbeTolerance is the change of the reference kernels' speed past which
// flowkit says a prediction runs high or low for the machine's sake. The
// probes of a span are many, their median its speed: on the 2-core VMs
// flowkit is developed on, single probes in a row spread by up to 14%
// (max − min), and by 20–40% over a calibration's minutes.
const ProbeTolerance = 0.10

// SpeedCheck compares the speed of a kind of CPU device through some runs,
// probed before, between and after them, with the speed its calibration
// probed.
type SpeedCheck struct {
	Key        string     `json:"device"` // calibration key, "cpu/2"
	Calibrated cost.Probe `json:"calibrated"`
	Now        cost.Probe `json:"now"` // over the probes taken (cost.Over)
	// Change is how much slower (positive) the reference kernels ran now
	// than when calibrated.
	Change float64 `json:"change"`

	workers int
	probes  []cost.Probe
}

// SpeedChecks returns a check for each kind of CPU device among devs whose
// calibration in c holds a probe, each once, in key order (none for a nil
// c).
func SpeedChecks(c *cost.Calibration, devs []plans.Device) ([]*SpeedCheck, error) {
	var checks []*SpeedCheck
	for _, d := range devs {
		spec, err := topology.Spec(d.Type, d.Workers)
		if err != nil {
			return nil, err
		}
		dc := c.For(spec)
		key := cost.CalibrationKey(spec)
		if spec.Class != topology.CPU || dc == nil || dc.Probe == nil ||
			slices.ContainsFunc(checks, func(s *SpeedCheck) bool { return s.Key == key }) {
			continue
		}
		checks = append(checks, &SpeedCheck{Key: key, Calibrated: *dc.Probe, workers: spec.Cores})
	}
	slices.SortFunc(checks, func(a, b *SpeedCheck) int { return strings.Compare(a.Key, b.Key) })
	return checks, nil
}

// Unprobed returns the calibration keys of devs' CPU devices that c
// calibrates without a probe (files of before probes were taken): for
// them no SpeedCheck can say whether the machine still runs at the
// calibration's speed, or is the machine calibrated at all.
func Unprobed(c *cost.Calibration, devs []plans.Device) ([]string, error) {
	var keys []string
	for _, d := range devs {
		spec, err := topology.Spec(d.Type, d.Workers)
		if err != nil {
			return nil, err
		}
		if dc := c.For(spec); spec.Class == topology.CPU && dc != nil && dc.Probe == nil {
			keys = append(keys, cost.CalibrationKey(spec))
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// Probe probes the device kind's speed once more: call it before the
// runs, between them and after them.
func (s *SpeedCheck) Probe() { s.probes = append(s.probes, ProbeCPU(s.workers)) }

// Finish sets Now and Change from the probes taken (at least one).
func (s *SpeedCheck) Finish() {
	s.Now = cost.Over(s.probes)
	s.Change = s.Calibrated.Change(s.Now)
}

// String says how the speed compares, and, past ProbeTolerance, what that
// means for a prediction priced by the calibration.
func (s *SpeedCheck) String() string {
	dir := "slower"
	if s.Change < 0 {
		dir = "faster"
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	msg := fmt.Sprintf("%s ran the reference kernels %.1f%% %s than when calibrated (GEMM %.3f → %.3f ms, stream %.3f → %.3f ms; medians of %d probes, spread %.0f%%)",
		s.Key, 100*math.Abs(s.Change), dir, ms(s.Calibrated.GEMM), ms(s.Now.GEMM), ms(s.Calibrated.Stream), ms(s.Now.Stream), len(s.probes), 100*s.Now.Spread)
	if math.Abs(s.Change) > ProbeTolerance {
		low := "low"
		if s.Change < 0 {
			low = "high"
		}
		msg += fmt.Sprintf(": its kernels' predicted times, priced at the calibration's speed, may run %s for the machine's sake, not the model's", low)
	}
	return msg
}
