package trace_test

import (
	"fmt"
	"os"
	"time"

	"github.com/flowkit/flowkit/trace"
)

func ExampleCompare() {
	// run returns a three-iteration trace of a four-task step on one GPU
	// stream, the tasks back to back with the given durations.
	run := func(source string, durs ...time.Duration) *trace.Trace {
		tr := &trace.Trace{
			Source:  source,
			Plan:    "mlp/dp1/b64",
			Devices: []string{"gpu0"},
			Streams: [][]string{{"compute"}},
		}
		for i, name := range []string{"fwd/fc1", "fwd/fc2", "bwd/fc2", "bwd/fc1"} {
			tr.Tasks = append(tr.Tasks, trace.TaskInfo{
				ID: int32(i), Name: name, Kind: "compute", Op: "matmul",
				Streams: []trace.StreamRef{{Device: 0, Stream: 0}},
			})
		}
		var now trace.Time
		for iter := range 3 {
			for task, d := range durs {
				e := trace.Event{Task: int32(task), Iter: int32(iter), Micro: -1, Start: now, End: now.Add(d)}
				tr.Events = append(tr.Events, e)
				now = e.End
			}
		}
		return tr
	}
	pred := run("sim", 400*time.Microsecond, 100*time.Microsecond, 200*time.Microsecond, 800*time.Microsecond)
	meas := run("runtime", 420*time.Microsecond, 150*time.Microsecond, 210*time.Microsecond, 700*time.Microsecond)

	c, err := trace.Compare(pred, meas, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.WriteTable(os.Stdout, 3); err != nil {
		fmt.Println(err)
	}
	// Output:
	// plan: mlp/dp1/b64
	// step time: predicted 1.500ms, measured 1.480ms, error +1.4% (warmup 1; 2 predicted, 2 measured iterations)
	//
	//   #    impact      pred      meas      error  rel err  share  n/iter  task
	//   1  100.00µs  800.00µs  700.00µs  +100.00µs   +14.3%  47.3%       1  bwd/fc1
	//   2   50.00µs  100.00µs  150.00µs   -50.00µs   -33.3%  10.1%       1  fwd/fc2
	//   3   20.00µs  400.00µs  420.00µs   -20.00µs    -4.8%  28.4%       1  fwd/fc1
	// (1 more not shown)
}
