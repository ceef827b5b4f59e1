package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/plans"
)

// Microbench measures the tasks of a plan where they run: it executes the
// plan on this machine's devices and takes each task's mean duration,
// so that every kernel is timed with the operands, the cache state and the
// neighbours it has in a real run (a kernel timed alone, on operands hot in
// cache, runs faster than it does between other kernels).
//
// On a GPU whose plan replays as a CUDA graph, tasks are timed by events the
// graph records around each of them; a graph without those events runs the
// same kernels back to back, each after a launch gap of its own. That gap
// — the untimed step less the timed tasks, spread over the stream's
// firings — is added to every task of the device, so that the tasks of an
// iteration add up to its step.
type Microbench struct {
	// Iters is the number of iterations run (default 8), of which Warmup
	// (default 2) are not timed.
	Iters, Warmup int
}

// TaskSample is one task's measured mean duration.
type TaskSample struct {
	cost.Sample
	Workers int    // of the task's device
	Device  string // the task's device type
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
	defer r.Close()
	feed := NewSyntheticFeeder(p.Images, 10, 256, 1)
	r.TaskTimes = true
	res, err := r.Run(ctx, iters, feed)
	if err != nil {
		return nil, err
	}
	gap, err := m.launchGap(ctx, r, res, feed, iters, warmup)
	if err != nil {
		return nil, err
	}
	var out []TaskSample
	for _, st := range res.Trace.TaskStats(warmup) {
		if st.Count == 0 {
			continue
		}
		t := int(st.Task)
		dev := p.Streams[p.Tasks[t].Streams[0]].Device
		// The mean, not the median: a step time is a mean over iterations,
		// and on a shared machine task times are skewed by slow outliers.
		out = append(out, TaskSample{Sample: cost.Sample{Work: p.Work(t), Time: max(st.Mean+gap[dev], 1)},
			Workers: p.Devices[dev].Workers, Device: p.Devices[dev].Type, Key: p.Tasks[t].Key})
	}
	return out, nil
}

// launchGap returns, by plan device, the time a GPU graph replay spends
// per firing between kernels (zero elsewhere): one untimed run's step less
// the timed run's tasks, over the firings of the device's single stream.
func (m Microbench) launchGap(ctx context.Context, r *PlanRunner, timed *RunResult, feed Feeder, iters, warmup int) ([]time.Duration, error) {
	p := r.p
	gap := make([]time.Duration, len(p.Devices))
	if r.gpu == nil || r.Eager || r.capturable() != "" || len(p.Streams) != 1 {
		return gap, nil
	}
	r.TaskTimes = false
	defer func() { r.TaskTimes = true }()
	res, err := r.Run(ctx, iters, feed)
	if err != nil {
		return nil, err
	}
	step, err := res.StepTime(warmup)
	if err != nil {
		return nil, err
	}
	var busy time.Duration
	for _, st := range timed.Trace.TaskStats(warmup) {
		busy += st.Mean * time.Duration(st.Count) / time.Duration(iters-warmup)
	}
	if g := (step - busy) / time.Duration(len(p.Firings)); g > 0 {
		gap[p.Streams[0].Device] = g
	}
	return gap, nil
}
