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
