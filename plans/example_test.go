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

// Compile a transformer block split over a tensor-parallel group of two
// devices (Megatron-LM's layout): each device holds half of the block's
// weight matrices, and the group sums partial results twice going forward
// and twice going backward, once per micro-batch.
func ExampleCompile_tensorParallel() {
	const model = "gpt2s-blocks:layers=1,hidden=64,heads=4,seq=16"
	devs := []plans.Device{{Name: "cpu0", Type: "cpu", Workers: 1}, {Name: "cpu1", Type: "cpu", Workers: 1}}
	for _, s := range []string{"single", "tp=2"} {
		st, err := plans.ParseStrategy(s, 8)
		if err != nil {
			fmt.Println(err)
			return
		}
		p, err := plans.Compile(plans.Config{Model: model, Batch: 8, Strategy: st,
			Optimizer: graph.SGD{LR: 0.01}, Devices: devs})
		if err != nil {
			fmt.Println(err)
			return
		}
		sums := 0
		for _, t := range p.Tasks {
			if t.Sum {
				sums++
			}
		}
		fmt.Printf("%s: %d device(s), %d sums; device 0 holds %v of weights\n", p.Strategy, len(p.Devices), sums, p.Memory[0].Persistent)
	}
	// Output:
	// single: 1 device(s), 0 sums; device 0 holds 195.25 KiB of weights
	// tp=2: 2 device(s), 4 sums; device 0 holds 98.38 KiB of weights
}
