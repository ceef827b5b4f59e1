package runtime

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/plans"
)

// Microbench measures tasks of plans in isolation, the way a plan runs
// them: same kernels, same worker count, fresh random operands.
type Microbench struct {
	// Repeats is the number of timed runs per task (median kept; default 15).
	Repeats int
	// MinTime is the least total time spent timing one task (default 20ms).
	MinTime time.Duration
}

// Measure times every distinct task of p (by work key and worker count) and
// returns one sample per task, keyed by the device's worker count.
func (m Microbench) Measure(ctx context.Context, p *plans.Plan, seen map[string]bool) ([]TaskSample, error) {
	repeats := m.Repeats
	if repeats <= 0 {
		repeats = 15
	}
	minTime := m.MinTime
	if minTime <= 0 {
		minTime = 20 * time.Millisecond
	}
	r, err := newIsolated(p)
	if err != nil {
		return nil, err
	}
	var out []TaskSample
	for t := range p.Tasks {
		task := &p.Tasks[t]
		workers := p.Devices[p.Streams[task.Streams[0]].Device].Workers
		key := fmt.Sprintf("%d|%s|%v", workers, p.Work(t).Kind, task.Shape)
		if seen[key] {
			continue
		}
		seen[key] = true
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d, err := r.time(t, repeats, minTime)
		if err != nil {
			return nil, fmt.Errorf("runtime: calibrating %s: %w", task.Name, err)
		}
		out = append(out, TaskSample{Workers: workers, Sample: cost.Sample{Work: p.Work(t), Time: d}, Key: task.Key})
	}
	return out, nil
}

// TaskSample is one measured task.
type TaskSample struct {
	Workers int
	Key     string
	cost.Sample
}

// isolated runs single tasks of a plan on fresh buffers.
type isolated struct {
	*PlanRunner
	feed Feeder
}

func newIsolated(p *plans.Plan) (*isolated, error) {
	r, err := NewPlanRunner(p)
	if err != nil {
		return nil, err
	}
	// Random operands everywhere, valid labels and ids.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range p.Registers {
		reg := &p.Registers[i]
		for k := range reg.Slots {
			b := r.slot(i, k)
			for j := range b.F {
				b.F[j] = float32(rng.NormFloat64())
			}
			for j := range b.I {
				b.I[j] = int32(rng.IntN(10))
			}
		}
	}
	return &isolated{PlanRunner: r, feed: NewSyntheticFeeder(p.Images, 10, 256, 1)}, nil
}

// time returns the median duration of task t's firing.
func (r *isolated) time(t, repeats int, minTime time.Duration) (time.Duration, error) {
	x := &run{r: r.PlanRunner, ctx: context.Background(), iters: 1, feed: r.feed, loss: make([]float64, 1)}
	f := slices.IndexFunc(r.p.Firings, func(fi plans.Firing) bool { return fi.Task == t })
	if _, err := x.fire(f, 0); err != nil { // warm up
		return 0, err
	}
	var ds []time.Duration
	start := time.Now()
	for len(ds) < repeats || time.Since(start) < minTime {
		t0 := time.Now()
		if _, err := x.fire(f, 0); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(t0))
		if len(ds) >= 1000 {
			break
		}
	}
	// Parameters were updated in place by optimizer tasks: harmless for
	// timing, and the plan is not reused for training.
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}
