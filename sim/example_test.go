package sim_test

import (
	"fmt"
	"time"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/sim"
)

// Simulate a data-parallel plan with every kernel taking 100 µs and
// communication free: the two replicas run side by side.
func ExampleSimulate() {
	st, _ := plans.ParseStrategy("dp=2", 32)
	devs := []plans.Device{{Name: "cpu0", Type: "cpu", Workers: 1}, {Name: "cpu1", Type: "cpu", Workers: 1}}
	p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 32, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs})
	if err != nil {
		fmt.Println(err)
		return
	}
	kernels := sim.DurationFunc(func(p *plans.Plan, t int) (time.Duration, error) {
		if p.Tasks[t].Kind == plans.Compute {
			return 100 * time.Microsecond, nil
		}
		return 0, nil
	})
	tr, err := sim.Simulate(p, kernels, 5)
	if err != nil {
		fmt.Println(err)
		return
	}
	step, _ := tr.StepTime(1)
	perReplica := 0
	for _, t := range p.Tasks {
		if t.Kind == plans.Compute && t.Replica == 0 {
			perReplica++
		}
	}
	fmt.Printf("%d compute tasks per replica, step %v\n", perReplica, step)
	// Output:
	// 20 compute tasks per replica, step 2ms
}

// What fills memory in a simulated run of a two-stage pipeline: the
// planned arena beside the bytes live at the peak, by category.
func ExampleSimulate_liveMemory() {
	st, _ := plans.ParseStrategy("pp=2,mb=4", 32)
	devs := []plans.Device{{Name: "cpu0", Type: "cpu", Workers: 1}, {Name: "cpu1", Type: "cpu", Workers: 1}}
	p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 32, Strategy: st,
		Optimizer: graph.Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, Devices: devs})
	if err != nil {
		fmt.Println(err)
		return
	}
	tr, err := sim.Simulate(p, sim.DurationFunc(func(*plans.Plan, int) (time.Duration, error) { return time.Microsecond, nil }), 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := p.LiveMemory(tr, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range m.Devices {
		fmt.Printf("%s: arena %v, live peak %v: %v\n", d.Device, d.Arena, d.Peak, d.ByCategory)
	}
	// Output:
	// cpu0: arena 3.92 MiB, live peak 3.90 MiB: weights 785.00 KiB, optimizer 1.53 MiB, gradients 1.53 MiB, activations 57.00 KiB, temporaries 8.00 KiB
	// cpu1: arena 1.34 MiB, live peak 1.32 MiB: weights 267.04 KiB, optimizer 534.08 KiB, gradients 534.08 KiB, activations 8.00 KiB, temporaries 8.00 KiB
}
