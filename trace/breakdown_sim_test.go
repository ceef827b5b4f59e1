package trace_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/sim"
)

func compileCPU(t *testing.T, model, strategy string, batch int) *plans.Plan {
	t.Helper()
	st, err := plans.ParseStrategy(strategy, batch)
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]plans.Device, st.Devices())
	for i := range devs {
		devs[i] = plans.Device{Name: fmt.Sprintf("cpu%d", i), Type: "cpu", Workers: 1}
	}
	p, err := plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st,
		Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Simulated plans: the breakdown adds up, the critical path follows the
// plan's edges and never waits (the simulator starts a firing the moment
// its last predecessor ends), and a pipeline idles in its bubble (the
// uneven mnist-cnn's first stage, its bottleneck, does not) while a single
// device never does. Every device communicates: inputs are copies.
func TestBreakdownOfSimulatedPlans(t *testing.T) {
	model := sim.CostModel{Compute: cost.NewComputeModel(nil)}
	for _, tt := range []struct {
		strategy string
		idle     bool // some device idles over 1% of the step
	}{
		{"single", false},
		{"dp=2", false},
		{"pp=2,mb=4,sched=gpipe", true},
		{"dp=2,pp=2,mb=2", true},
	} {
		t.Run(tt.strategy, func(t *testing.T) {
			p := compileCPU(t, "mnist-cnn", tt.strategy, 16)
			tr, err := sim.Simulate(p, model, 4)
			if err != nil {
				t.Fatal(err)
			}
			b, err := tr.Breakdown(1)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Devices) != len(p.Devices) {
				t.Fatalf("got %d devices, want %d", len(b.Devices), len(p.Devices))
			}
			idle := false
			for _, d := range b.Devices {
				if d.Compute+d.ExposedComm+d.Idle != d.Step || d.Idle < 0 || d.ExposedComm > d.Comm {
					t.Errorf("%+v does not add up", d)
				}
				if tt.strategy == "single" && d.Idle != 0 {
					t.Errorf("%s idles %v on one device, want 0", d.Device, d.Idle)
				}
				if d.Comm == 0 {
					t.Errorf("%s does not communicate", d.Device)
				}
				idle = idle || d.Idle > d.Step/100
			}
			if idle != tt.idle {
				t.Errorf("got idling %v, want %v: %+v", idle, tt.idle, b.Devices)
			}
			deps, err := p.TraceDeps()
			if err != nil {
				t.Fatal(err)
			}
			for first := range tr.Iterations() {
				for last := first; last < tr.Iterations(); last++ {
					c, err := tr.CriticalPath(deps, first, last)
					if err != nil {
						t.Fatal(err)
					}
					checkPath(t, tr, deps, c)
					if c.Wait != 0 {
						t.Errorf("iterations %d-%d wait %v on the path, want 0", first, last, c.Wait)
					}
				}
			}
			// Over the window of the breakdown, per step, as long as a step.
			c, err := tr.CriticalPath(deps, 1, tr.Iterations()-1)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Span / time.Duration(b.Iters); got != b.Step {
				t.Errorf("path per step %v, want the step %v", got, b.Step)
			}
		})
	}
}
