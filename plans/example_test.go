package plans_test

import (
	"fmt"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
)

// Compile a two-stage 1F1B pipeline of the MNIST CNN over two CPU devices.
// On a CPU, transfers run on the sender's compute stream: a copy takes a
// core.
func ExampleCompile() {
	st, err := plans.ParseStrategy("pp=2,mb=4,sched=1f1b", 64)
	if err != nil {
		fmt.Println(err)
		return
	}
	devs := []plans.Device{{Name: "cpu0", Type: "cpu", Workers: 1}, {Name: "cpu1", Type: "cpu", Workers: 1}}
	p, err := plans.Compile(plans.Config{Model: "mnist-cnn", Batch: 64, Strategy: st,
		Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, Devices: devs})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %d micro-batches of %d, %d tasks, %d firings per iteration\n", p.Strategy, p.MB, p.MicroBatch, len(p.Tasks), len(p.Firings))
	for _, s := range p.Streams {
		fmt.Printf("%s/%s: %d firings\n", p.Devices[s.Device].Name, s.Name, len(s.Order))
	}
	// Output:
	// pp=2,mb=4,sched=1f1b: 4 micro-batches of 16, 47 tasks, 164 firings per iteration
	// cpu0/compute: 96 firings
	// cpu1/compute: 68 firings
}
