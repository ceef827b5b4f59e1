package runtime

import (
	"context"
	"fmt"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/plans"
)

// Microbench measures the tasks of a plan where they run: it executes the
// plan on this machine's CPU devices and takes each task's mean duration,
// so that every kernel is timed with the operands, the cache state and the
// neighbours it has in a real run (a kernel timed alone, on operands hot in
// cache, runs faster than it does between other kernels).
type Microbench struct {
	// Iters is the number of iterations run (default 8), of which Warmup
	// (default 2) are not timed.
	Iters, Warmup int
}

// TaskSample is one task's measured mean duration.
type TaskSample struct {
	cost.Sample
	Workers int    // of the task's device
	Key     string // the task's work, for people
}

// Measure runs p and returns one sample per task.
func (m Microbench) Measure(ctx context.Context, p *plans.Plan) ([]TaskSample, error) {
	iters, warmup := m.Iters, m.Warmup
	if iters <= 0 {
		iters = 8
	}
	if warmup <= 0 {
		warmup = min(2, iters-1)
	}
	if warmup >= iters {
		return nil, fmt.Errorf("runtime: microbench: warmup %d must be less than iterations %d", warmup, iters)
	}
	r, err := NewPlanRunner(p)
	if err != nil {
		return nil, err
	}
	res, err := r.Run(ctx, iters, NewSyntheticFeeder(p.Images, 10, 256, 1))
	if err != nil {
		return nil, err
	}
	var out []TaskSample
	for _, st := range res.Trace.TaskStats(warmup) {
		if st.Count == 0 {
			continue
		}
		t := int(st.Task)
		workers := p.Devices[p.Streams[p.Tasks[t].Streams[0]].Device].Workers
		// The mean, not the median: a step time is a mean over iterations,
		// and on a shared machine task times are skewed by slow outliers.
		out = append(out, TaskSample{Sample: cost.Sample{Work: p.Work(t), Time: max(st.Mean, 1)}, Workers: workers, Key: p.Tasks[t].Key})
	}
	return out, nil
}
