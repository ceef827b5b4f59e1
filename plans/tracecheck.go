package plans

import (
	"fmt"
	"sort"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/trace"
	"github.com/flowkit/flowkit/units"
)

// NewTrace returns an empty trace labelled with the plan's devices,
// streams and tasks, for an engine to fill with events.
func (p *Plan) NewTrace(source string) *trace.Trace {
	tr := &trace.Trace{Source: source, Plan: fmt.Sprintf("%s %s batch %d", p.Model, p.Strategy, p.Batch)}
	tr.Streams = make([][]string, len(p.Devices))
	streamRef := make([]trace.StreamRef, len(p.Streams))
	for _, d := range p.Devices {
		tr.Devices = append(tr.Devices, d.Name)
	}
	for i, s := range p.Streams {
		streamRef[i] = trace.StreamRef{Device: int32(s.Device), Stream: int32(len(tr.Streams[s.Device]))}
		tr.Streams[s.Device] = append(tr.Streams[s.Device], s.Name)
	}
	for _, t := range p.Tasks {
		info := trace.TaskInfo{ID: int32(t.ID), Name: t.Name, Kind: string(t.Kind), Phase: t.Phase, FLOPs: t.FLOPs, Bytes: t.Bytes}
		if t.Op != nil {
			info.Op = t.Op.Type
		}
		for _, s := range t.Streams {
			info.Streams = append(info.Streams, streamRef[s])
		}
		tr.Tasks = append(tr.Tasks, info)
	}
	return tr
}

// TraceDeps returns the plan's dependency edges (Deps) between firings
// named as a trace of the plan names them, for trace.CriticalPath, each
// with the first rule of deps.go that asks for it: "data" (it reads the
// write), "update" (in place), "slot" (it writes a slot the source's read
// frees), "stream" (stream order) or "after" (Firing.After).
func (p *Plan) TraceDeps() ([]trace.Dep, error) {
	edges, err := p.Deps()
	if err != nil {
		return nil, err
	}
	firing := func(f int) trace.Firing {
		return trace.Firing{Task: int32(p.Firings[f].Task), Micro: int32(p.Firings[f].Micro)}
	}
	deps := make([]trace.Dep, len(edges))
	for i, e := range edges {
		deps[i] = trace.Dep{From: firing(e.From), To: firing(e.To), Delta: int32(e.Delta), Why: p.depRules[i].traceWhy()}
	}
	return deps, nil
}

// Work is task t's work for the cost model. Its dtype, which sets the peak
// rate, is that of the first float register the task reads (else writes):
// a bf16 matmul is priced at the bf16 rate, the f32 loss of bf16 logits
// at the bf16 rate too.
func (p *Plan) Work(t int) cost.Work {
	task := &p.Tasks[t]
	kind := string(task.Kind)
	if task.Op != nil {
		kind = task.Op.Type
	}
	w := cost.Work{Kind: kind, FLOPs: task.FLOPs, Bytes: task.Bytes, DType: p.workDType(task), Shape: task.Shape, Family: task.Family}
	if task.Kind == AllReduce {
		w.Traffic = hostAllReduceTraffic(task)
	}
	return w
}

// hostAllReduceTraffic is the memory traffic of all-reduce task on CPU
// devices of one process, as the runtime runs it over n members of b bytes
// each: n−1 sums into the first member (two reads and a write each), a
// scaling (a read and a write; with weights, the sums scale as they add),
// and n−1 copies of the result back (a read and a write each), (5n−3)·b;
// a tensor-parallel sum (Sum) works out of place and first copies every
// member's read to its write, 2n·b more.
func hostAllReduceTraffic(task *Task) units.Bytes {
	n := len(task.Writes)
	if len(task.Shape) > 0 { // the members, of which a plan may list one
		n = task.Shape[0]
	}
	n = max(n, 1)
	traffic := units.Bytes(5*n-3) * task.Bytes
	if task.Sum {
		traffic += units.Bytes(2*n) * task.Bytes
	}
	return traffic
}

func (p *Plan) workDType(task *Task) string {
	for _, u := range task.Reads {
		if d := p.Registers[u.Reg].Spec.DType; d.IsFloat() {
			return d.String()
		}
	}
	for _, r := range task.Writes {
		if d := p.Registers[r].Spec.DType; d.IsFloat() {
			return d.String()
		}
	}
	return graph.F32.String()
}

// CheckTrace verifies that an execution trace of the plan (simulated or
// measured) obeys the plan's execution rules: every firing of every
// iteration appears once, each starts only after everything its
// dependency edges name has finished, and no register ever holds more
// live versions than it has slots (a version is live from the start of
// its write to the end of its last read).
func (p *Plan) CheckTrace(tr *trace.Trace) error {
	_, err := p.CheckedTrace(tr)
	return err
}

// CheckedTrace checks tr as CheckTrace does and returns it checked
// (trace.Check), for the analyses that would otherwise validate it again:
// flowrun exec checks each run's trace against the plan, then compares
// it, breaks its step down and writes it out.
func (p *Plan) CheckedTrace(tr *trace.Trace) (trace.Checked, error) {
	c, err := trace.Check(tr)
	if err != nil {
		return trace.Checked{}, err
	}
	if err := p.checkRules(tr); err != nil {
		return trace.Checked{}, err
	}
	return c, nil
}

// checkRules checks a trace that Validate passed against the plan's
// execution rules (CheckTrace).
func (p *Plan) checkRules(tr *trace.Trace) error {
	edges, err := p.Deps()
	if err != nil {
		return err
	}
	ev, iters, err := p.firingEvents(tr)
	if err != nil {
		return err
	}
	for _, e := range edges {
		for i := e.Delta; i < iters; i++ {
			from, to := ev[e.From][i-e.Delta], ev[e.To][i]
			if to.Start < from.End {
				return fmt.Errorf("plans: %s of iteration %d started at %d ns, before %s of iteration %d ended at %d ns",
					p.FiringName(e.To), i, to.Start, p.FiringName(e.From), i-e.Delta, from.End)
			}
		}
	}
	live, err := p.liveSpans(ev, iters)
	if err != nil {
		return err
	}
	if err := p.checkSlots(live); err != nil {
		return err
	}
	return p.checkMemory(live)
}

// firingEvents indexes a valid trace of the plan's iterations by firing
// and iteration, and fails unless every firing of every iteration is in
// it once.
func (p *Plan) firingEvents(tr *trace.Trace) (ev [][]*trace.Event, iters int, err error) {
	iters = tr.Iterations()
	firingOf := p.firingIndex()
	ev = make([][]*trace.Event, len(p.Firings)) // [firing][iter]
	for f := range ev {
		ev[f] = make([]*trace.Event, iters)
	}
	for i := range tr.Events {
		e := &tr.Events[i]
		if int(e.Task) >= len(p.Tasks) {
			return nil, 0, fmt.Errorf("plans: trace event names task %d, the plan has %d", e.Task, len(p.Tasks))
		}
		f := firingOf(int(e.Task), int(e.Micro))
		if p.Firings[f].Task != int(e.Task) || (p.Tasks[e.Task].PerMicro && p.Firings[f].Micro != int(e.Micro)) {
			return nil, 0, fmt.Errorf("plans: trace event of %s has micro-batch %d", p.Tasks[e.Task].Name, e.Micro)
		}
		ev[f][e.Iter] = e
	}
	for f := range ev {
		for i, e := range ev[f] {
			if e == nil {
				return nil, 0, fmt.Errorf("plans: trace lacks %s of iteration %d", p.FiringName(f), i)
			}
		}
	}
	return ev, iters, nil
}

// span is the life of one version of a register: from the start of its
// write to the end of its last read.
type span struct{ start, end trace.Time }

// liveSpans returns, by register and version, when each version was live.
// Writes are spanned first and then extended by their reads, which a
// firing listed before the writer's may do (a read of the previous
// iteration's write, a task added to the plan before its input's
// writer). The first in-place write of an iteration starts afresh (an
// accumulation's first micro-batch overwrites), as the memory planner
// takes it: the registers updated in place across iterations are
// persistent, always live.
func (p *Plan) liveSpans(ev [][]*trace.Event, iters int) ([]map[int]*span, error) {
	live := make([]map[int]*span, len(p.Registers))
	for r := range live {
		live[r] = map[int]*span{}
	}
	for f, fi := range p.Firings {
		t := &p.Tasks[fi.Task]
		for i := range iters {
			e := ev[f][i]
			for _, r := range t.Writes {
				v := p.WriteVersion(r, t.ID, i, fi.Micro)
				s := live[r][v]
				if s == nil {
					s = &span{start: e.Start, end: e.End}
					live[r][v] = s
				}
				s.start = min(s.start, e.Start)
				s.end = max(s.end, e.End)
			}
		}
	}
	for f, fi := range p.Firings {
		t := &p.Tasks[fi.Task]
		for i := range iters {
			e := ev[f][i]
			for _, u := range t.Reads {
				if p.Idle(t, u, fi.Micro) {
					continue
				}
				v, err := p.ReadVersion(u, i, fi.Micro)
				if err != nil {
					return nil, err
				}
				if s := live[u.Reg][v]; s != nil {
					s.end = max(s.end, e.End)
				}
			}
			if t.InPlace { // an in-place write reads the previous version of its iteration
				for _, r := range t.Writes {
					v := p.WriteVersion(r, t.ID, i, fi.Micro)
					if s := live[r][v-1]; s != nil && v%p.WritesPerIteration(r) != 0 {
						s.end = max(s.end, e.End)
					}
				}
			}
		}
	}
	return live, nil
}

// checkSlots counts, for every register, the versions live at once.
func (p *Plan) checkSlots(live []map[int]*span) error {
	for r, vs := range live {
		type point struct {
			t     trace.Time
			delta int
		}
		var pts []point
		for _, s := range vs {
			// An in-place write ends its predecessor's life as it starts
			// its own: count ends before starts at equal times.
			pts = append(pts, point{s.start, +1}, point{s.end, -1})
		}
		sort.Slice(pts, func(i, j int) bool {
			if pts[i].t != pts[j].t {
				return pts[i].t < pts[j].t
			}
			return pts[i].delta < pts[j].delta
		})
		n := 0
		for _, pt := range pts {
			n += pt.delta
			if limit := p.Registers[r].Slots + inPlaceOverlap(p, r); n > limit {
				return fmt.Errorf("plans: register %s held %d live versions at %d ns, it has %d slot(s)", p.Registers[r].Name, n, pt.t, p.Registers[r].Slots)
			}
		}
	}
	return nil
}

// inPlaceOverlap is 1 for registers updated in place: while an in-place
// write runs, the old and the new version share the one slot.
func inPlaceOverlap(p *Plan, r int) int {
	for _, w := range p.Registers[r].Writers {
		if p.Tasks[w].InPlace {
			return 1
		}
	}
	return 0
}

// checkMemory verifies the memory plan: two registers whose bytes overlap
// in a device arena are never live at the same time.
func (p *Plan) checkMemory(live []map[int]*span) error {
	byDevice := make([][]int, len(p.Devices))
	for r := range p.Registers {
		byDevice[p.Registers[r].Device] = append(byDevice[p.Registers[r].Device], r)
	}
	overlapBytes := func(a, b *Register) bool {
		return a.Offset < b.Offset+b.Bytes() && b.Offset < a.Offset+a.Bytes()
	}
	for _, regs := range byDevice {
		for i, a := range regs {
			for _, b := range regs[i+1:] {
				ra, rb := &p.Registers[a], &p.Registers[b]
				if !overlapBytes(ra, rb) {
					continue
				}
				if ra.Persistent || rb.Persistent {
					return fmt.Errorf("plans: memory plan: %s and %s share bytes and one is persistent", ra.Name, rb.Name)
				}
				for _, sa := range live[a] {
					for _, sb := range live[b] {
						if sa.start < sb.end && sb.start < sa.end {
							return fmt.Errorf("plans: memory plan: %s and %s share bytes on %s and were both live at %d ns",
								ra.Name, rb.Name, p.Devices[ra.Device].Name, max(sa.start, sb.start))
						}
					}
				}
			}
		}
	}
	return nil
}
