package trace

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/flowkit/flowkit/units"
)

// Errors returned by this package, wrapped with the details.
var (
	// ErrInvalid reports a trace that breaks a structural invariant.
	ErrInvalid = errors.New("trace: invalid trace")
	// ErrTooFewIterations reports a warm-up that leaves no iteration to measure.
	ErrTooFewIterations = errors.New("trace: too few iterations")
	// ErrMismatch reports two traces that do not describe the same tasks.
	ErrMismatch = errors.New("trace: traces describe different tasks")
)

// Time is an instant in integer nanoseconds since the start of a run.
type Time int64

// Sub returns the duration t−u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// Add returns the instant t+d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// MaxEvents bounds the events of one trace, some 40 bytes each: several
// GiB at the bound. A simulation or a run of more firings, over all its
// iterations, is refused before it starts, not left to run out of memory.
const MaxEvents = 1 << 27

// Event is one execution ("firing") of a plan task.
type Event struct {
	Task  int32 // index into Trace.Tasks
	Iter  int32 // iteration, from 0
	Micro int32 // micro-batch; -1 for tasks that fire once per iteration
	Start Time
	End   Time
}

// Dur returns the event's duration.
func (e Event) Dur() time.Duration { return e.End.Sub(e.Start) }

// StreamRef names one stream of one device.
type StreamRef struct {
	Device int32 // index into Trace.Devices
	Stream int32 // index into Trace.Streams[Device]
}

// TaskInfo labels the events of one task.
type TaskInfo struct {
	ID    int32  // its index in Trace.Tasks
	Name  string // e.g. "s0/fwd/conv2d_1"
	Kind  string // "compute", "copy", "collective", "input", ...
	Op    string // op type, e.g. "conv2d"; "" for non-compute tasks
	Phase string // "forward", "backward", "update", "comm", ...
	// Streams are the streams the task occupies while it runs: one for a
	// compute task, both ends of a transfer, every member of a collective.
	// The first is its home, where single-stream views (CSV, pprof) put it.
	Streams []StreamRef
	FLOPs   units.FLOPs
	Bytes   units.Bytes
}

// Trace is the record of a run of a plan, by the simulator or the runtime.
type Trace struct {
	Source  string     // "sim", "runtime", or any label
	Plan    string     // plan identity (model/strategy/batch), informative
	Devices []string   // device names, indexed by StreamRef.Device
	Streams [][]string // per device, stream names indexed by StreamRef.Stream
	Tasks   []TaskInfo
	Events  []Event
}

// Iterations returns the number of iterations: one more than the largest
// Iter of any event.
func (t *Trace) Iterations() int {
	n := 0
	for _, e := range t.Events {
		n = max(n, int(e.Iter)+1)
	}
	return n
}

// IterationEnds returns, for each iteration, the latest End of its events.
// An iteration without events (which Validate rejects) ends at 0.
func (t *Trace) IterationEnds() []Time {
	ends := make([]Time, t.Iterations())
	for _, e := range t.Events {
		if e.Iter >= 0 {
			ends[e.Iter] = max(ends[e.Iter], e.End)
		}
	}
	return ends
}

// StepTime returns the mean time per iteration after warmup iterations: the
// time from the end of iteration warmup−1 (from 0 when warmup is 0) to the
// end of the last iteration, divided by the number of iterations in between.
// Iterations may overlap, so this is the throughput-relevant period, not the
// span of any single iteration.
func (t *Trace) StepTime(warmup int) (time.Duration, error) {
	from, to, n, err := t.window(warmup)
	if err != nil {
		return 0, err
	}
	return to.Sub(from) / time.Duration(n), nil
}

// window returns the measured span after warmup iterations and the number
// of iterations in it.
func (t *Trace) window(warmup int) (from, to Time, n int, err error) {
	ends := t.IterationEnds()
	if warmup < 0 || warmup >= len(ends) {
		return 0, 0, 0, fmt.Errorf("%w: %d iterations, warmup %d leaves none to measure",
			ErrTooFewIterations, len(ends), warmup)
	}
	if warmup > 0 {
		from = ends[warmup-1]
	}
	return from, ends[len(ends)-1], len(ends) - warmup, nil
}

// TaskStat summarizes the durations of one task's events.
type TaskStat struct {
	Task   int32
	Count  int // events counted
	Total  time.Duration
	Mean   time.Duration
	Median time.Duration // mean of the two middle values for an even count
	Min    time.Duration
	Max    time.Duration
}

// TaskStats returns the statistics of each task, indexed like Tasks, over
// the events with Iter ≥ warmup. A task without such events has Count 0 and
// zero durations.
func (t *Trace) TaskStats(warmup int) []TaskStat {
	// Bucket the durations by task in one allocation (a counting sort).
	off := make([]int, len(t.Tasks)+1)
	for _, e := range t.Events {
		if int(e.Iter) >= warmup && inRange(e.Task, len(t.Tasks)) {
			off[e.Task+1]++
		}
	}
	for i := range t.Tasks {
		off[i+1] += off[i]
	}
	durs := make([]time.Duration, off[len(t.Tasks)])
	next := slices.Clone(off[:len(t.Tasks)])
	for _, e := range t.Events {
		if int(e.Iter) >= warmup && inRange(e.Task, len(t.Tasks)) {
			durs[next[e.Task]] = e.Dur()
			next[e.Task]++
		}
	}

	stats := make([]TaskStat, len(t.Tasks))
	for i := range stats {
		d := durs[off[i]:off[i+1]]
		s := TaskStat{Task: int32(i), Count: len(d)}
		if len(d) > 0 {
			slices.Sort(d)
			for _, x := range d {
				s.Total += x
			}
			s.Mean = s.Total / time.Duration(len(d))
			s.Min, s.Max = d[0], d[len(d)-1]
			m := len(d) / 2
			s.Median = d[m]
			if len(d)%2 == 0 {
				s.Median = d[m-1] + (d[m]-d[m-1])/2
			}
		}
		stats[i] = s
	}
	return stats
}

// validations counts Validate's calls, for the tests that check that a
// trace is validated once however many analyses run on it (Checked).
var validations atomic.Int64

// Validate checks the trace's structural invariants and returns the first
// violation, wrapping ErrInvalid: names and indices in range, each task on
// at least one distinct stream, End ≥ Start, each firing (task, iteration,
// micro-batch) recorded once, iterations numbered from 0 without gaps, and
// no two events overlapping in time on one stream (a stream runs one task
// at a time; events that only touch, one ending when the next starts, are
// fine). Overlaps are reported earliest first.
func (t *Trace) Validate() error {
	validations.Add(1)
	if len(t.Streams) != len(t.Devices) {
		return fmt.Errorf("%w: %d devices but stream names for %d", ErrInvalid, len(t.Devices), len(t.Streams))
	}
	for i, task := range t.Tasks {
		if err := t.validateTask(i, task); err != nil {
			return err
		}
	}

	type firing struct{ task, iter, micro int32 }
	seen := make(map[firing]int, len(t.Events))
	iters := make([]bool, t.Iterations())
	for i, e := range t.Events {
		if !inRange(e.Task, len(t.Tasks)) {
			return fmt.Errorf("%w: event %d: task %d out of range [0,%d)", ErrInvalid, i, e.Task, len(t.Tasks))
		}
		switch {
		case e.Iter < 0:
			return fmt.Errorf("%w: event %d (%s): negative iteration", ErrInvalid, i, t.describe(e))
		case e.Micro < -1:
			return fmt.Errorf("%w: event %d (%s): micro-batch below -1", ErrInvalid, i, t.describe(e))
		case e.End < e.Start:
			return fmt.Errorf("%w: event %d (%s): ends at %d ns before it starts at %d ns",
				ErrInvalid, i, t.describe(e), e.End, e.Start)
		}
		f := firing{e.Task, e.Iter, e.Micro}
		if j, ok := seen[f]; ok {
			return fmt.Errorf("%w: events %d and %d both record %s", ErrInvalid, j, i, t.describe(e))
		}
		seen[f] = i
		iters[e.Iter] = true
	}
	if i := slices.Index(iters, false); i >= 0 {
		return fmt.Errorf("%w: iteration %d of %d has no events", ErrInvalid, i, len(iters))
	}
	return t.validateStreams()
}

func (t *Trace) validateTask(i int, task TaskInfo) error {
	if task.ID != int32(i) {
		return fmt.Errorf("%w: task %d (%q) has ID %d", ErrInvalid, i, task.Name, task.ID)
	}
	if len(task.Streams) == 0 {
		return fmt.Errorf("%w: task %q occupies no stream", ErrInvalid, task.Name)
	}
	for j, s := range task.Streams {
		if !inRange(s.Device, len(t.Devices)) {
			return fmt.Errorf("%w: task %q: device %d out of range [0,%d)", ErrInvalid, task.Name, s.Device, len(t.Devices))
		}
		if n := len(t.Streams[s.Device]); !inRange(s.Stream, n) {
			return fmt.Errorf("%w: task %q: stream %d of device %q out of range [0,%d)",
				ErrInvalid, task.Name, s.Stream, t.Devices[s.Device], n)
		}
		if slices.Contains(task.Streams[:j], s) {
			return fmt.Errorf("%w: task %q lists stream %s twice", ErrInvalid, task.Name, t.streamName(s))
		}
	}
	if f := float64(task.FLOPs); f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("%w: task %q: FLOPs %v", ErrInvalid, task.Name, f)
	}
	if task.Bytes < 0 {
		return fmt.Errorf("%w: task %q: negative bytes %d", ErrInvalid, task.Name, task.Bytes)
	}
	return nil
}

// validateStreams reports the earliest overlap of two events on one stream.
// It assumes the tasks and events were checked.
func (t *Trace) validateStreams() error {
	base := make([]int, len(t.Streams)+1) // flat stream index of device d's stream 0
	for d, names := range t.Streams {
		base[d+1] = base[d] + len(names)
	}
	perStream := make([][]int, base[len(t.Streams)]) // event indices
	for i, e := range t.Events {
		for _, s := range t.Tasks[e.Task].Streams {
			k := base[s.Device] + int(s.Stream)
			perStream[k] = append(perStream[k], i)
		}
	}

	var (
		found       bool
		first, then int // the overlapping events; then starts before first ends
		where       StreamRef
	)
	for d := range t.Streams {
		for s := range t.Streams[d] {
			evs := perStream[base[d]+s]
			slices.SortFunc(evs, func(a, b int) int {
				ea, eb := t.Events[a], t.Events[b]
				return cmp.Or(cmp.Compare(ea.Start, eb.Start), cmp.Compare(ea.End, eb.End), cmp.Compare(a, b))
			})
			last := -1 // the event seen so far that ends latest
			for _, i := range evs {
				if last >= 0 && t.Events[i].Start < t.Events[last].End {
					if !found || t.Events[i].Start < t.Events[then].Start {
						found, first, then = true, last, i
						where = StreamRef{int32(d), int32(s)}
					}
					break
				}
				if last < 0 || t.Events[i].End > t.Events[last].End {
					last = i
				}
			}
		}
	}
	if !found {
		return nil
	}
	a, b := t.Events[first], t.Events[then]
	return fmt.Errorf("%w: stream %s runs two tasks at once: %s [%d, %d) ns and %s [%d, %d) ns",
		ErrInvalid, t.streamName(where), t.describe(a), a.Start, a.End, t.describe(b), b.Start, b.End)
}

// describe names an event's firing for error messages.
func (t *Trace) describe(e Event) string {
	name := fmt.Sprintf("task %d", e.Task)
	if inRange(e.Task, len(t.Tasks)) {
		name = fmt.Sprintf("%q", t.Tasks[e.Task].Name)
	}
	if e.Micro == -1 {
		return fmt.Sprintf("%s iter %d", name, e.Iter)
	}
	return fmt.Sprintf("%s iter %d micro %d", name, e.Iter, e.Micro)
}

// streamName returns "device/stream" for a stream in range.
func (t *Trace) streamName(s StreamRef) string {
	return t.Devices[s.Device] + "/" + t.Streams[s.Device][s.Stream]
}

func inRange(i int32, n int) bool { return i >= 0 && int(i) < n }
