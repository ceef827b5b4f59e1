package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/topology"
)

// probeTolerance is the change of the reference kernels' speed past which
// flowrun warns: while a calibration measures, or between a calibration
// and a run checked against it. Probes in a row on the 2-core VMs flowkit
// is developed on spread by up to 14% (max − min), 7% around their middle;
// those VMs drift by 10–20% over minutes.
const probeTolerance = 0.10

// speedCheck compares the speed of a CPU device kind of a plan, probed
// around exec's runs, with the speed its calibration probed.
type speedCheck struct {
	Key        string     `json:"device"` // calibration key, "cpu/2"
	Calibrated cost.Probe `json:"calibrated"`
	Now        cost.Probe `json:"now"` // mean of the probes before and after the runs
	// Change is how much slower (positive) the reference kernels ran
	// now than when calibrated.
	Change float64 `json:"change"`

	workers int
	before  cost.Probe
}

// speedChecks returns a check for each CPU device kind of p whose
// calibration in c holds a probe, each once, in key order.
func speedChecks(p *plans.Plan, c *cost.Calibration) ([]*speedCheck, error) {
	var checks []*speedCheck
	for _, d := range p.Devices {
		spec, err := topology.Spec(d.Type, d.Workers)
		if err != nil {
			return nil, err
		}
		dc := c.For(spec)
		key := cost.CalibrationKey(spec)
		if spec.Class != topology.CPU || dc == nil || dc.Probe == nil ||
			slices.ContainsFunc(checks, func(s *speedCheck) bool { return s.Key == key }) {
			continue
		}
		checks = append(checks, &speedCheck{Key: key, Calibrated: *dc.Probe, workers: spec.Cores})
	}
	slices.SortFunc(checks, func(a, b *speedCheck) int { return strings.Compare(a.Key, b.Key) })
	return checks, nil
}

// start probes before the runs, finish after them.
func (s *speedCheck) start() { s.before = runtime.ProbeCPU(s.workers) }

func (s *speedCheck) finish() {
	s.Now = cost.Between(s.before, runtime.ProbeCPU(s.workers))
	s.Change = s.Calibrated.Change(s.Now)
}

// String says how the speed compares, and what that means for the
// prediction when it is past probeTolerance.
func (s *speedCheck) String() string {
	dir := "slower"
	if s.Change < 0 {
		dir = "faster"
	}
	msg := fmt.Sprintf("%s ran the reference kernels %.1f%% %s than when calibrated (GEMM %.3f → %.3f ms, stream %.3f → %.3f ms)",
		s.Key, 100*math.Abs(s.Change), dir, ms(s.Calibrated.GEMM), ms(s.Now.GEMM), ms(s.Calibrated.Stream), ms(s.Now.Stream))
	if math.Abs(s.Change) > probeTolerance {
		low := "low"
		if s.Change < 0 {
			low = "high"
		}
		msg += fmt.Sprintf(": its kernels' predicted times, priced at the calibration's speed, run %s for the machine's sake, not the model's", low)
	}
	if s.Now.Drift > probeTolerance {
		msg += fmt.Sprintf("; the speed changed by %.0f%% during the runs", 100*s.Now.Drift)
	}
	return msg
}
