package sim

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/trace"
)

// Durations prices plan tasks: how long one firing of task t runs.
type Durations interface {
	Duration(p *plans.Plan, t int) (time.Duration, error)
}

// Simulate executes iters iterations of p and returns the trace. Each
// firing starts as soon as every firing its edges name has finished and
// runs for its task's duration.
func Simulate(p *plans.Plan, d Durations, iters int) (*trace.Trace, error) {
	if iters < 1 {
		return nil, fmt.Errorf("sim: iterations must be ≥ 1, got %d", iters)
	}
	edges, err := p.Deps()
	if err != nil {
		return nil, err
	}
	dur := make([]time.Duration, len(p.Tasks))
	for t := range p.Tasks {
		if dur[t], err = d.Duration(p, t); err != nil {
			return nil, fmt.Errorf("sim: pricing %s: %w", p.Tasks[t].Name, err)
		}
		if dur[t] < 0 {
			return nil, fmt.Errorf("sim: pricing %s: negative duration %v", p.Tasks[t].Name, dur[t])
		}
	}
	nf := len(p.Firings)
	out := make([][]plans.Edge, nf)
	waiting := make([]int, nf*iters) // unfinished dependencies, by instance f + i·nf
	for _, e := range edges {
		out[e.From] = append(out[e.From], e)
		for i := e.Delta; i < iters; i++ {
			waiting[e.To+i*nf]++
		}
	}

	tr := p.NewTrace("sim")
	tr.Events = make([]trace.Event, 0, nf*iters)
	s := &engine{}
	start := func(inst int, now trace.Time) {
		f := p.Firings[inst%nf]
		s.push(now.Add(dur[f.Task]), inst, now)
	}
	for inst, w := range waiting {
		if w == 0 {
			start(inst, 0)
		}
	}
	done := 0
	for s.Len() > 0 {
		ev := heap.Pop(s).(event)
		f, i := ev.inst%nf, ev.inst/nf
		fi := p.Firings[f]
		tr.Events = append(tr.Events, trace.Event{Task: int32(fi.Task), Iter: int32(i), Micro: int32(fi.Micro), Start: ev.start, End: ev.at})
		done++
		for _, e := range out[f] {
			j := i + e.Delta
			if j >= iters {
				continue
			}
			next := e.To + j*nf
			if waiting[next]--; waiting[next] == 0 {
				start(next, ev.at)
			}
		}
	}
	if done != nf*iters {
		return nil, fmt.Errorf("sim: %d of %d firings never became ready (a dependency cycle across iterations)", nf*iters-done, nf*iters)
	}
	return tr, nil
}

// event is the end of one firing instance.
type event struct {
	at, start trace.Time
	seq       uint64
	inst      int
}

// engine is the event queue, a heap ordered by (time, sequence).
type engine struct {
	q   []event
	seq uint64
}

func (s *engine) push(at trace.Time, inst int, start trace.Time) {
	s.seq++
	heap.Push(s, event{at: at, start: start, seq: s.seq, inst: inst})
}

func (s *engine) Len() int { return len(s.q) }
func (s *engine) Less(i, j int) bool {
	if s.q[i].at != s.q[j].at {
		return s.q[i].at < s.q[j].at
	}
	return s.q[i].seq < s.q[j].seq
}
func (s *engine) Swap(i, j int) { s.q[i], s.q[j] = s.q[j], s.q[i] }
func (s *engine) Push(x any)    { s.q = append(s.q, x.(event)) }
func (s *engine) Pop() any {
	e := s.q[len(s.q)-1]
	s.q = s.q[:len(s.q)-1]
	return e
}

// DurationFunc adapts a function to Durations.
type DurationFunc func(p *plans.Plan, t int) (time.Duration, error)

// Duration implements Durations.
func (f DurationFunc) Duration(p *plans.Plan, t int) (time.Duration, error) { return f(p, t) }
