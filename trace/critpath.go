package trace

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Firing names one execution of a task within an iteration, as events do:
// Micro is −1 for a task that fires once per iteration.
type Firing struct{ Task, Micro int32 }

// Dep is a dependency edge of the plan a trace ran: firing To of
// iteration i may start only after firing From of iteration i−Delta has
// ended (plans.Plan.TraceDeps lists a plan's).
type Dep struct {
	From, To Firing
	Delta    int32
	// Why names the rule the edge comes from ("data", "slot", "stream",
	// ...), for people; a critical path counts its steps by it.
	Why string
}

// Kinds of time on a critical path.
const (
	PathCompute = "compute" // a computing task ran
	PathComm    = "comm"    // a communicating task ran (IsComm)
	PathWait    = "wait"    // the next task on the path had all it waits for and had not started
)

// CriticalPath is the chain of events that decided when iterations First
// to Last ended. It starts from the event that ended iteration Last and
// steps back, along the dependency edges, to the predecessor that ended
// last (the one that released the event), until it reaches the end of
// iteration First−1; the time between a predecessor's end and its
// successor's start is waiting. So the path tiles the span From to To:
// for one iteration the duration IterError measures, for the iterations
// after a warm-up the window StepTime divides. Compute + Comm + Wait =
// Span, and the Streams' Busy + Wait add up to it too.
type CriticalPath struct {
	First   int           `json:"first_iter"`
	Last    int           `json:"last_iter"`
	From    Time          `json:"from_ns"` // end of iteration First−1 (0 for the first)
	To      Time          `json:"to_ns"`   // end of iteration Last
	Span    time.Duration `json:"span_ns"`
	Compute time.Duration `json:"compute_ns"`
	Comm    time.Duration `json:"comm_ns"`
	Wait    time.Duration `json:"wait_ns"`
	// Streams is the path's time by home stream (a task's first), most
	// first: running there, or, for Wait, waiting there to start.
	Streams []PathStream `json:"streams"`
	// Ops is the path's time by op (a task's Op, else its Kind), most
	// first: many layers' tasks, one op.
	Ops []PathOp `json:"ops"`
	// Tasks is the path's time by task, most first.
	Tasks []PathTask `json:"tasks"`
	// Via counts the edges the path steps back along by their Why, most
	// first: how often a task was released by the data it read, a free
	// slot, its stream, ...
	Via []PathVia `json:"via"`
	// Steps is the path in time order (not in JSON: a long path is long).
	Steps []PathStep `json:"-"`
}

// PathStream is a stream's time on a critical path.
type PathStream struct {
	Stream string        `json:"stream"` // "device/stream"
	Busy   time.Duration `json:"busy_ns"`
	Wait   time.Duration `json:"wait_ns"`
}

// PathOp is an op's time on a critical path.
type PathOp struct {
	Op   string        `json:"op"`
	Time time.Duration `json:"time_ns"`
}

// PathVia counts the edges of one Why on a critical path.
type PathVia struct {
	Why   string `json:"why"`
	Edges int    `json:"edges"`
}

// PathTask is a task's time on a critical path, over its Firings there.
type PathTask struct {
	Task    int32         `json:"task"`
	Name    string        `json:"name"`
	Kind    string        `json:"kind"` // PathCompute or PathComm
	Time    time.Duration `json:"time_ns"`
	Firings int           `json:"firings"`
}

// PathStep is one piece of a critical path: an event (clipped to the
// path's span) or a wait before an event's start.
type PathStep struct {
	Kind   string `json:"kind"`   // PathCompute, PathComm or PathWait
	Event  Event  `json:"event"`  // the event, or the one that waited
	Stream string `json:"stream"` // the event's home stream
	Start  Time   `json:"start_ns"`
	End    Time   `json:"end_ns"`
	// Via is, for an event, the Why of the edge along which it released
	// the next event on the path ("" for the last).
	Via string `json:"via,omitempty"`
}

// CriticalPath returns the critical path of iterations first to last
// (first = last for one) over the dependency edges deps. It fails on
// iterations out of range, a span ending before it starts, an edge naming
// a task out of range, an event missing that an edge names, and an event
// starting before a predecessor ends (a trace that broke the edges).
func (t *Trace) CriticalPath(deps []Dep, first, last int) (*CriticalPath, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t.criticalPath(deps, first, last)
}

// criticalPath is CriticalPath of a trace that Validate passed.
func (t *Trace) criticalPath(deps []Dep, first, last int) (*CriticalPath, error) {
	ends := t.IterationEnds()
	if first < 0 || first > last || last >= len(ends) {
		return nil, fmt.Errorf("%w: no iterations %d to %d in a trace of %d", ErrTooFewIterations, first, last, len(ends))
	}
	c := &CriticalPath{First: first, Last: last, To: ends[last]}
	if first > 0 {
		c.From = ends[first-1]
	}
	if c.To < c.From {
		return nil, fmt.Errorf("%w: iteration %d ends at %d ns, before iteration %d at %d ns", ErrInvalid, last, c.To, first-1, c.From)
	}
	c.Span = c.To.Sub(c.From)

	type instance struct {
		Firing
		iter int32
	}
	index := make(map[instance]int, len(t.Events))
	end := -1 // the event ending iteration last, the first by task and micro-batch on ties
	for i, e := range t.Events {
		index[instance{Firing{e.Task, e.Micro}, e.Iter}] = i
		if int(e.Iter) == last && e.End == c.To && (end < 0 || firingBefore(e, t.Events[end])) {
			end = i
		}
	}
	if end < 0 {
		return nil, fmt.Errorf("%w: iteration %d: no event ends at its end, %d ns (times before 0?)", ErrInvalid, last, c.To)
	}
	in := make(map[Firing][]Dep, len(deps))
	for _, d := range deps {
		for _, task := range []int32{d.From.Task, d.To.Task} {
			if !inRange(task, len(t.Tasks)) {
				return nil, fmt.Errorf("%w: a dependency names task %d, the trace has %d", ErrMismatch, task, len(t.Tasks))
			}
		}
		in[d.To] = append(in[d.To], d)
	}
	for _, ds := range in {
		slices.SortFunc(ds, func(a, b Dep) int {
			return cmp.Or(cmp.Compare(a.From.Task, b.From.Task), cmp.Compare(a.From.Micro, b.From.Micro), cmp.Compare(a.Delta, b.Delta), cmp.Compare(a.Why, b.Why))
		})
	}

	// Walk back from the last event. Every step ends no later than the
	// previous one starts; zero-length events could still cycle on
	// edges that do, so the walk is bounded.
	var steps []PathStep
	cur, pending := t.Events[end], "" // pending: the edge cur released the last step along
	for range len(t.Events) + 1 {
		home := t.streamName(t.Tasks[cur.Task].Streams[0])
		steps = append(steps, PathStep{Kind: pathKind(t.Tasks[cur.Task].Kind), Event: cur, Stream: home, Start: max(cur.Start, c.From), End: cur.End, Via: pending})
		if cur.Start <= c.From {
			break
		}
		pred, via, found := Event{}, "", false
		for _, d := range in[Firing{cur.Task, cur.Micro}] {
			j := cur.Iter - d.Delta
			if j < 0 {
				continue
			}
			k, ok := index[instance{d.From, j}]
			if !ok {
				return nil, fmt.Errorf("%w: %s waits for %s, which the trace lacks",
					ErrMismatch, t.describe(cur), t.describe(Event{Task: d.From.Task, Micro: d.From.Micro, Iter: j}))
			}
			p := t.Events[k]
			if p.End > cur.Start {
				return nil, fmt.Errorf("%w: %s starts at %d ns, before %s, which it waits for, ends at %d ns",
					ErrInvalid, t.describe(cur), cur.Start, t.describe(p), p.End)
			}
			if !found || p.End > pred.End {
				pred, via, found = p, d.Why, true
			}
		}
		from := c.From
		if found {
			from = max(pred.End, c.From)
		}
		if from < cur.Start {
			steps = append(steps, PathStep{Kind: PathWait, Event: cur, Stream: home, Start: from, End: cur.Start})
		}
		if !found || pred.End <= c.From {
			break
		}
		cur, pending = pred, via
	}
	if steps[len(steps)-1].Start != c.From {
		return nil, fmt.Errorf("%w: the critical path to iteration %d cycles through events of no duration", ErrInvalid, last)
	}
	slices.Reverse(steps)
	c.Steps = steps
	c.summarize(t)
	return c, nil
}

func firingBefore(a, b Event) bool {
	return cmp.Or(cmp.Compare(a.Task, b.Task), cmp.Compare(a.Micro, b.Micro)) < 0
}

func pathKind(kind string) string {
	if IsComm(kind) {
		return PathComm
	}
	return PathCompute
}

// summarize fills the totals by kind, stream and task from the steps.
func (c *CriticalPath) summarize(t *Trace) {
	streams := map[string]*PathStream{}
	tasks := map[int32]*PathTask{}
	ops := map[string]time.Duration{}
	via := map[string]int{}
	for _, s := range c.Steps {
		if s.Via != "" {
			via[s.Via]++
		}
		d := s.End.Sub(s.Start)
		ps := streams[s.Stream]
		if ps == nil {
			ps = &PathStream{Stream: s.Stream}
			streams[s.Stream] = ps
		}
		if s.Kind == PathWait {
			c.Wait += d
			ps.Wait += d
			continue
		}
		if s.Kind == PathComm {
			c.Comm += d
		} else {
			c.Compute += d
		}
		ps.Busy += d
		pt := tasks[s.Event.Task]
		if pt == nil {
			pt = &PathTask{Task: s.Event.Task, Name: t.Tasks[s.Event.Task].Name, Kind: s.Kind}
			tasks[s.Event.Task] = pt
		}
		pt.Time += d
		pt.Firings++
		info := &t.Tasks[s.Event.Task]
		ops[cmp.Or(info.Op, info.Kind)] += d
	}
	for _, ps := range streams {
		c.Streams = append(c.Streams, *ps)
	}
	slices.SortFunc(c.Streams, func(a, b PathStream) int {
		return cmp.Or(cmp.Compare(b.Busy+b.Wait, a.Busy+a.Wait), cmp.Compare(a.Stream, b.Stream))
	})
	for op, d := range ops {
		c.Ops = append(c.Ops, PathOp{Op: op, Time: d})
	}
	slices.SortFunc(c.Ops, func(a, b PathOp) int { return cmp.Or(cmp.Compare(b.Time, a.Time), cmp.Compare(a.Op, b.Op)) })
	for why, n := range via {
		c.Via = append(c.Via, PathVia{Why: why, Edges: n})
	}
	slices.SortFunc(c.Via, func(a, b PathVia) int { return cmp.Or(cmp.Compare(b.Edges, a.Edges), cmp.Compare(a.Why, b.Why)) })
	for _, pt := range tasks {
		c.Tasks = append(c.Tasks, *pt)
	}
	slices.SortFunc(c.Tasks, func(a, b PathTask) int {
		return cmp.Or(cmp.Compare(b.Time, a.Time), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Task, b.Task))
	})
}

// WriteSummary writes c for people in two lines: its composition by kind,
// then the top streams, ops and tasks on it (top of each; all if top ≤ 0).
func (c *CriticalPath) WriteSummary(w io.Writer, top int) error { return c.writeSummary(w, "", top) }

// writeSummary is WriteSummary, the first line prefixed with label.
func (c *CriticalPath) writeSummary(w io.Writer, label string, top int) error {
	pct := func(d time.Duration) string {
		if c.Span == 0 {
			return "0%"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(d)/float64(c.Span))
	}
	iters := fmt.Sprintf("iteration %d", c.Last)
	if c.First < c.Last {
		iters = fmt.Sprintf("iterations %d-%d", c.First, c.Last)
	}
	var via []string
	for _, v := range c.Via {
		via = append(via, fmt.Sprintf("%s %d", v.Why, v.Edges))
	}
	edges := ""
	if len(via) > 0 {
		edges = "; released by " + strings.Join(via, ", ")
	}
	firings := 0
	for _, s := range c.Steps {
		if s.Kind != PathWait {
			firings++
		}
	}
	if _, err := fmt.Fprintf(w, "%scritical path of %s (%s, %d firings%s): compute %s, comm %s, wait %s\n",
		label, iters, fmtDur(c.Span), firings, edges, pct(c.Compute), pct(c.Comm), pct(c.Wait)); err != nil {
		return err
	}
	n := func(l int) int {
		if top > 0 {
			return min(top, l)
		}
		return l
	}
	var streams, ops, tasks []string
	for _, s := range c.Streams[:n(len(c.Streams))] {
		streams = append(streams, s.Stream+" "+pct(s.Busy+s.Wait))
	}
	for _, o := range c.Ops[:n(len(c.Ops))] {
		ops = append(ops, o.Op+" "+pct(o.Time))
	}
	for _, task := range c.Tasks[:n(len(c.Tasks))] {
		tasks = append(tasks, task.Name+" "+pct(task.Time))
	}
	_, err := fmt.Fprintf(w, "  on streams: %s; ops: %s; tasks: %s\n",
		strings.Join(streams, ", "), strings.Join(ops, ", "), strings.Join(tasks, ", "))
	return err
}
