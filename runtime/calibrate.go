package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/trace"
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

// Measured is what one Microbench.Measure measured.
type Measured struct {
	Tasks []TaskSample // one per task
	// Wakes holds, by plan device, its firings woken by another stream
	// (see Wakes).
	Wakes [][]Wake
}

// Measure runs p and returns one sample per task, and its firings woken
// by another stream.
func (m Microbench) Measure(ctx context.Context, p *plans.Plan) (*Measured, error) {
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
	wakes, err := Wakes(p, res.Trace, warmup)
	if err != nil {
		return nil, err
	}
	out := &Measured{Wakes: wakes}
	for _, st := range res.Trace.TaskStats(warmup) {
		if st.Count == 0 {
			continue
		}
		t := int(st.Task)
		dev := p.Streams[p.Tasks[t].Streams[0]].Device
		// The mean, not the median: a step time is a mean over iterations,
		// and on a shared machine task times are skewed by slow outliers.
		out.Tasks = append(out.Tasks, TaskSample{Sample: cost.Sample{Work: p.Work(t), Time: max(st.Mean+gap[dev], 1)},
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

// Wake is a firing released by a firing of another stream that also
// released the next firing of its own stream: a goroutine that must be
// woken while the releasing one goes on on its thread.
type Wake struct {
	// Wait is the time from the release to the firing's start.
	Wait time.Duration
	// Busy is how long the releasing stream went on running from the
	// release: a firing not woken by then takes its thread.
	Busy time.Duration
}

// Wakes returns, by plan device, the firings on the device woken by
// another stream (see Wake) after warmup iterations of tr, a measured
// trace of p. A firing released by a stream that has nothing more to run
// starts on the thread that stream leaves, and is not one.
func Wakes(p *plans.Plan, tr *trace.Trace, warmup int) ([][]Wake, error) {
	deps, err := p.TraceDeps()
	if err != nil {
		return nil, err
	}
	type instance struct {
		trace.Firing
		iter int32
	}
	index := make(map[instance]int, len(tr.Events))
	for i, e := range tr.Events {
		index[instance{trace.Firing{Task: e.Task, Micro: e.Micro}, e.Iter}] = i
	}
	in := map[trace.Firing][]trace.Dep{}
	for _, d := range deps {
		in[d.To] = append(in[d.To], d)
	}
	home := func(i int) int { return p.Tasks[tr.Events[i].Task].Streams[0] }
	// released[i] is the event whose end released event i (the last of
	// those it waited for), −1 if none; next[j] is the firing of its own
	// stream event j released, −1 if none.
	released, next := make([]int, len(tr.Events)), make([]int, len(tr.Events))
	for i, e := range tr.Events {
		released[i], next[i] = -1, -1
		for _, d := range in[trace.Firing{Task: e.Task, Micro: e.Micro}] {
			k, ok := index[instance{d.From, e.Iter - d.Delta}]
			if ok && (released[i] < 0 || tr.Events[k].End > tr.Events[released[i]].End) {
				released[i] = k
			}
		}
	}
	for i, r := range released {
		if r >= 0 && home(r) == home(i) {
			next[r] = i
		}
	}
	// busyUntil is when the stream of event j, going on from it, first
	// had nothing to run.
	busyUntil := func(j int) trace.Time {
		for next[j] >= 0 {
			j = next[j]
		}
		return tr.Events[j].End
	}
	wakes := make([][]Wake, len(p.Devices))
	for i, e := range tr.Events {
		r := released[i]
		if int(e.Iter) < warmup || r < 0 || next[r] < 0 || home(r) == home(i) {
			continue
		}
		end := tr.Events[r].End
		dev := p.Streams[home(i)].Device
		wakes[dev] = append(wakes[dev], Wake{Wait: max(e.Start.Sub(end), 0), Busy: busyUntil(r).Sub(end)})
	}
	return wakes, nil
}

// DispatchLatency estimates from wakes the latency L of waking a
// goroutine as the simulator applies it (sim.Dispatch): a woken firing
// starts after min(L, Busy). Waits cut short by the waking stream's end
// say only that L was longer, so L is the one under which the simulated
// waits add up to the measured ones: Σ min(L, Busy) = Σ Wait (the longest
// Busy if no L is long enough; 0 without wakes).
func DispatchLatency(wakes []Wake) time.Duration {
	var want, longest time.Duration
	for _, w := range wakes {
		want += min(w.Wait, w.Busy)
		longest = max(longest, w.Busy)
	}
	sum := func(l time.Duration) time.Duration {
		var s time.Duration
		for _, w := range wakes {
			s += min(l, w.Busy)
		}
		return s
	}
	lo, hi := time.Duration(0), longest // the least L in [lo, hi] with sum(L) ≥ want
	for lo < hi {
		mid := lo + (hi-lo)/2
		if sum(mid) >= want {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
