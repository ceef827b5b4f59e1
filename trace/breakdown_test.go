package trace_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/flowkit/flowkit/trace"
)

// fired is one event of a hand-built trace: task, micro-batch, start and
// end within its iteration.
type fired struct {
	task, micro int32
	start, end  trace.Time
}

// periodic returns a trace of iters iterations that each run the events
// of one, shifted by period.
func periodic(devices []string, streams [][]string, tasks []trace.TaskInfo, one []fired, period trace.Time, iters int) *trace.Trace {
	tr := &trace.Trace{Devices: devices, Streams: streams, Tasks: tasks}
	for i := range iters {
		off := period * trace.Time(i)
		for _, f := range one {
			tr.Events = append(tr.Events, trace.Event{Task: f.task, Iter: int32(i), Micro: f.micro, Start: off + f.start, End: off + f.end})
		}
	}
	return tr
}

func task(id int32, name, kind string, streams ...trace.StreamRef) trace.TaskInfo {
	return trace.TaskInfo{ID: id, Name: name, Kind: kind, Streams: streams}
}

// pipeline is GPipe over two stages with two micro-batches, forward 10 ns
// and backward 20 ns: an iteration takes (m+p−1)·(F+B) = 90 ns, of which
// each stage computes m·(F+B) = 60 ns and idles (p−1)·(F+B) = 30 ns.
func pipeline() (*trace.Trace, []trace.Dep) {
	tasks := []trace.TaskInfo{
		task(0, "s0/fwd", "compute", trace.StreamRef{Device: 0}),
		task(1, "s1/fwd", "compute", trace.StreamRef{Device: 1}),
		task(2, "s1/bwd", "compute", trace.StreamRef{Device: 1}),
		task(3, "s0/bwd", "compute", trace.StreamRef{Device: 0}),
	}
	one := []fired{
		{0, 0, 0, 10}, {0, 1, 10, 20},
		{1, 0, 10, 20}, {1, 1, 20, 30}, {2, 0, 30, 50}, {2, 1, 50, 70},
		{3, 0, 50, 70}, {3, 1, 70, 90},
	}
	tr := periodic([]string{"dev0", "dev1"}, [][]string{{"compute"}, {"compute"}}, tasks, one, 90, 3)
	f := func(task, micro int32) trace.Firing { return trace.Firing{Task: task, Micro: micro} }
	var deps []trace.Dep
	chain := func(delta int32, fs ...trace.Firing) {
		for i := 1; i < len(fs); i++ {
			deps = append(deps, trace.Dep{From: fs[i-1], To: fs[i], Why: "stream"})
		}
		deps = append(deps, trace.Dep{From: fs[len(fs)-1], To: fs[0], Delta: delta, Why: "stream"})
	}
	chain(1, f(0, 0), f(0, 1), f(3, 0), f(3, 1)) // dev0's stream, wrapping
	chain(1, f(1, 0), f(1, 1), f(2, 0), f(2, 1)) // dev1's
	for m := range int32(2) {
		deps = append(deps,
			trace.Dep{From: f(0, m), To: f(1, m), Why: "data"}, // activations
			trace.Dep{From: f(1, m), To: f(2, m), Why: "data"},
			trace.Dep{From: f(2, m), To: f(3, m), Why: "data"}) // gradients
	}
	return tr, deps
}

func TestBreakdownPipelineBubble(t *testing.T) {
	tr, deps := pipeline()
	b, err := tr.Breakdown(1)
	if err != nil {
		t.Fatal(err)
	}
	want := trace.DeviceBreakdown{Step: 90, Compute: 60, Idle: 30}
	for _, d := range b.Devices {
		want.Device = d.Device
		if d != want {
			t.Errorf("got %+v, want %+v", d, want)
		}
	}

	c, err := tr.CriticalPath(deps, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Ties (s0/bwd mb 1 waits for s0/bwd mb 0 and s1/bwd mb 1, both
	// ending at 160) go to the lower task: the path crosses to dev1.
	var got []string
	for _, s := range c.Steps {
		got = append(got, fmt.Sprintf("%s/%d %d-%d", tr.Tasks[s.Event.Task].Name, s.Event.Micro, s.Start, s.End))
	}
	wantSteps := []string{"s0/fwd/0 180-190", "s0/fwd/1 190-200", "s1/fwd/1 200-210", "s1/bwd/0 210-230", "s1/bwd/1 230-250", "s0/bwd/1 250-270"}
	if !slices.Equal(got, wantSteps) {
		t.Errorf("path: got %v, want %v", got, wantSteps)
	}
	if c.Span != 90 || c.Compute != 90 || c.Comm != 0 || c.Wait != 0 {
		t.Errorf("composition: got span %v compute %v comm %v wait %v, want 90ns all compute", c.Span, c.Compute, c.Comm, c.Wait)
	}
	wantStreams := []trace.PathStream{{Stream: "dev1/compute", Busy: 50}, {Stream: "dev0/compute", Busy: 40}}
	if !slices.Equal(c.Streams, wantStreams) {
		t.Errorf("streams: got %v, want %v", c.Streams, wantStreams)
	}
	if top := c.Tasks[0]; top.Name != "s1/bwd" || top.Time != 40 || top.Firings != 2 {
		t.Errorf("top task: got %+v, want s1/bwd 40ns over 2 firings", top)
	}
	if want := []trace.PathVia{{Why: "stream", Edges: 3}, {Why: "data", Edges: 2}}; !slices.Equal(c.Via, want) {
		t.Errorf("via: got %v, want %v", c.Via, want)
	}
}

// Data parallelism on two devices: a 40 ns all-reduce on both devices'
// collective streams, hidden behind compute or after it.
func TestBreakdownAllReduceOverlap(t *testing.T) {
	tasks := []trace.TaskInfo{
		task(0, "fwdbwd", "compute", trace.StreamRef{Device: 0, Stream: 0}),
		task(1, "fwdbwd.1", "compute", trace.StreamRef{Device: 1, Stream: 0}),
		task(2, "allreduce", "allreduce", trace.StreamRef{Device: 0, Stream: 1}, trace.StreamRef{Device: 1, Stream: 1}),
	}
	devs, streams := []string{"gpu0", "gpu1"}, [][]string{{"compute", "coll"}, {"compute", "coll"}}
	for _, tt := range []struct {
		name string
		one  []fired
		want trace.DeviceBreakdown
	}{
		{"overlapped", []fired{{0, -1, 0, 100}, {1, -1, 0, 100}, {2, -1, 50, 90}},
			trace.DeviceBreakdown{Step: 110, Compute: 100, Comm: 40, ExposedComm: 0, Idle: 10}},
		{"exposed", []fired{{0, -1, 0, 60}, {1, -1, 0, 60}, {2, -1, 60, 100}},
			trace.DeviceBreakdown{Step: 110, Compute: 60, Comm: 40, ExposedComm: 40, Idle: 10}},
		{"half", []fired{{0, -1, 0, 80}, {1, -1, 0, 80}, {2, -1, 60, 100}},
			trace.DeviceBreakdown{Step: 110, Compute: 80, Comm: 40, ExposedComm: 20, Idle: 10}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := periodic(devs, streams, tasks, tt.one, 110, 3).Breakdown(1)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range b.Devices {
				tt.want.Device = d.Device
				if d != tt.want {
					t.Errorf("got %+v, want %+v", d, tt.want)
				}
			}
		})
	}
}

// Two compute streams of one device that overlap count once; a device
// with no stream (one that runs as a listed one) is left out.
func TestBreakdownUnionOfStreams(t *testing.T) {
	tasks := []trace.TaskInfo{
		task(0, "a", "compute", trace.StreamRef{Stream: 0}),
		task(1, "b", "compute", trace.StreamRef{Stream: 1}),
		task(2, "c", "copy", trace.StreamRef{Stream: 2}),
	}
	tr := periodic([]string{"gpu0", "gpu1"}, [][]string{{"s0", "s1", "copy"}, nil}, tasks,
		[]fired{{0, -1, 0, 50}, {1, -1, 30, 70}, {2, -1, 60, 90}}, 100, 2)
	b, err := tr.Breakdown(1)
	if err != nil {
		t.Fatal(err)
	}
	want := trace.DeviceBreakdown{Device: "gpu0", Step: 100, Compute: 70, Comm: 30, ExposedComm: 20, Idle: 10}
	if len(b.Devices) != 1 || b.Devices[0] != want || b.Unlisted != 1 {
		t.Errorf("got %+v and %d unlisted, want %+v and 1", b.Devices, b.Unlisted, want)
	}
}

// randomRun draws a valid trace and the edges it ran by: firings in a
// fixed order each start after their edges, their streams free, and a
// random delay.
func randomRun(rt *rapid.T) (*trace.Trace, []trace.Dep) {
	nd := rapid.IntRange(1, 3).Draw(rt, "devices")
	tr := &trace.Trace{}
	var all []trace.StreamRef
	for d := range nd {
		tr.Devices = append(tr.Devices, fmt.Sprintf("d%d", d))
		ns := rapid.IntRange(1, 3).Draw(rt, "streams")
		var names []string
		for s := range ns {
			names = append(names, fmt.Sprintf("s%d", s))
			all = append(all, trace.StreamRef{Device: int32(d), Stream: int32(s)})
		}
		tr.Streams = append(tr.Streams, names)
	}
	kinds := []string{"compute", "compute", "transfer", "allreduce", "input"}
	var firings []trace.Firing
	for i := range rapid.IntRange(1, 6).Draw(rt, "tasks") {
		perm := rapid.Permutation(all).Draw(rt, "perm")
		streams := perm[:rapid.IntRange(1, min(2, len(perm))).Draw(rt, "width")]
		tr.Tasks = append(tr.Tasks, task(int32(i), fmt.Sprintf("t%d", i), rapid.SampledFrom(kinds).Draw(rt, "kind"), streams...))
		micros := rapid.IntRange(0, 2).Draw(rt, "micros") // 0: once per iteration
		if micros == 0 {
			firings = append(firings, trace.Firing{Task: int32(i), Micro: -1})
		}
		for m := range micros {
			firings = append(firings, trace.Firing{Task: int32(i), Micro: int32(m)})
		}
	}
	// Edges: each stream's order, wrapping to the next iteration, and
	// random ones forward in the order or to a later iteration.
	var deps []trace.Dep
	lastOn := map[trace.StreamRef]int{}
	firstOn := map[trace.StreamRef]int{}
	for i, f := range firings {
		for _, s := range tr.Tasks[f.Task].Streams {
			if j, ok := lastOn[s]; ok {
				deps = append(deps, trace.Dep{From: firings[j], To: f, Why: "stream"})
			} else {
				firstOn[s] = i
			}
			lastOn[s] = i
		}
	}
	for s, j := range lastOn {
		deps = append(deps, trace.Dep{From: firings[j], To: firings[firstOn[s]], Delta: 1, Why: "stream"})
	}
	for range rapid.IntRange(0, 8).Draw(rt, "edges") {
		a := rapid.IntRange(0, len(firings)-1).Draw(rt, "from")
		b := rapid.IntRange(0, len(firings)-1).Draw(rt, "to")
		var delta int32
		if b <= a {
			delta = int32(rapid.IntRange(1, 2).Draw(rt, "delta"))
		}
		deps = append(deps, trace.Dep{From: firings[a], To: firings[b], Delta: delta, Why: "random"})
	}

	iters := rapid.IntRange(1, 4).Draw(rt, "iters")
	type inst struct {
		f    trace.Firing
		iter int32
	}
	end := map[inst]trace.Time{}
	free := map[trace.StreamRef]trace.Time{}
	for i := range iters {
		for _, f := range firings {
			var start trace.Time
			for _, d := range deps {
				if j := int32(i) - d.Delta; d.To == f && j >= 0 {
					start = max(start, end[inst{d.From, j}])
				}
			}
			for _, s := range tr.Tasks[f.Task].Streams {
				start = max(start, free[s])
			}
			start += trace.Time(rapid.SampledFrom([]int{0, 0, 0, 1, 5}).Draw(rt, "delay"))
			e := trace.Event{Task: f.Task, Micro: f.Micro, Iter: int32(i), Start: start,
				End: start + trace.Time(rapid.IntRange(0, 20).Draw(rt, "dur"))}
			tr.Events = append(tr.Events, e)
			end[inst{f, int32(i)}] = e.End
			for _, s := range tr.Tasks[f.Task].Streams {
				free[s] = e.End
			}
		}
	}
	return tr, deps
}

// Property: each device's parts add up to its step, and each part is the
// length of a union, as counting nanosecond by nanosecond finds it.
func TestBreakdownProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tr, _ := randomRun(rt)
		warmup := rapid.IntRange(0, tr.Iterations()-1).Draw(rt, "warmup")
		b, err := tr.Breakdown(warmup)
		if err != nil {
			rt.Fatal(err)
		}
		ends := tr.IterationEnds()
		var from trace.Time
		if warmup > 0 {
			from = ends[warmup-1]
		}
		to, n := ends[len(ends)-1], time.Duration(len(ends)-warmup)
		for d, db := range b.Devices {
			if got := db.Compute + db.ExposedComm + db.Idle; got != db.Step || db.Idle < 0 {
				rt.Fatalf("%s: compute %v + exposed %v + idle %v = %v, want step %v", db.Device, db.Compute, db.ExposedComm, db.Idle, got, db.Step)
			}
			var compute, comm, exposed time.Duration
			for x := from; x < to; x++ {
				var c, m bool
				for _, e := range tr.Events {
					info := tr.Tasks[e.Task]
					if e.Start <= x && x < e.End && slices.ContainsFunc(info.Streams, func(s trace.StreamRef) bool { return int(s.Device) == d }) {
						c = c || !trace.IsComm(info.Kind)
						m = m || trace.IsComm(info.Kind)
					}
				}
				compute += b2d(c)
				comm += b2d(m)
				exposed += b2d(m && !c)
			}
			if db.Compute != compute/n || db.Comm != comm/n || db.ExposedComm != exposed/n {
				rt.Fatalf("%s: got compute %v comm %v exposed %v, want %v %v %v", db.Device, db.Compute, db.Comm, db.ExposedComm, compute/n, comm/n, exposed/n)
			}
		}
	})
}

func b2d(b bool) time.Duration {
	if b {
		return 1
	}
	return 0
}

// Property: a critical path tiles its iterations' span, steps only along
// edges, and at each step goes to the predecessor that ended last.
func TestCriticalPathProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tr, deps := randomRun(rt)
		last := rapid.IntRange(0, tr.Iterations()-1).Draw(rt, "last")
		first := rapid.IntRange(0, last).Draw(rt, "first")
		c, err := tr.CriticalPath(deps, first, last)
		if err != nil {
			rt.Fatal(err)
		}
		checkPath(rt, tr, deps, c)
	})
}

// fataler is what checks need of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// checkPath checks the invariants of a critical path of tr over deps.
func checkPath(t fataler, tr *trace.Trace, deps []trace.Dep, c *trace.CriticalPath) {
	t.Helper()
	ends := tr.IterationEnds()
	var from trace.Time
	if c.First > 0 {
		from = ends[c.First-1]
	}
	if c.From != from || c.To != ends[c.Last] || c.Span != c.To.Sub(c.From) {
		t.Fatalf("span: got %d–%d (%v), want %d–%d", c.From, c.To, c.Span, from, ends[c.Last])
	}
	if c.Compute+c.Comm+c.Wait != c.Span {
		t.Fatalf("compute %v + comm %v + wait %v, want span %v", c.Compute, c.Comm, c.Wait, c.Span)
	}
	var streams, ops, tasks time.Duration
	for _, s := range c.Streams {
		streams += s.Busy + s.Wait
	}
	for _, o := range c.Ops {
		ops += o.Time
	}
	for _, pt := range c.Tasks {
		tasks += pt.Time
	}
	if streams != c.Span || ops != c.Compute+c.Comm || tasks != c.Compute+c.Comm {
		t.Fatalf("by stream %v, want %v; by op %v and by task %v, want %v", streams, c.Span, ops, tasks, c.Compute+c.Comm)
	}
	at := c.From
	var prev *trace.PathStep
	for i, s := range c.Steps {
		if s.Start != at || s.End < s.Start {
			t.Fatalf("step %d runs %d–%d, want from %d", i, s.Start, s.End, at)
		}
		at = s.End
		if s.Kind == trace.PathWait {
			continue
		}
		if prev != nil {
			checkReleased(t, tr, deps, *prev, s.Event)
		}
		prev = &c.Steps[i]
	}
	if prev.Via != "" {
		t.Fatalf("the last event %v released %q", prev.Event, prev.Via)
	}
	if at != c.To {
		t.Fatalf("path ends at %d, want %d", at, c.To)
	}
}

// checkReleased checks that an edge of a's Via leads from a's event to b
// and that no predecessor of b ended after a.
func checkReleased(t fataler, tr *trace.Trace, deps []trace.Dep, step trace.PathStep, b trace.Event) {
	t.Helper()
	a, edge := step.Event, false
	for _, d := range deps {
		if d.To != (trace.Firing{Task: b.Task, Micro: b.Micro}) {
			continue
		}
		if d.From == (trace.Firing{Task: a.Task, Micro: a.Micro}) && b.Iter-d.Delta == a.Iter && d.Why == step.Via {
			edge = true
		}
		for _, e := range tr.Events {
			if e.Task == d.From.Task && e.Micro == d.From.Micro && e.Iter == b.Iter-d.Delta && e.End > a.End {
				t.Fatalf("%v waits for %v, which ended after %v", b, e, a)
			}
		}
	}
	if !edge {
		t.Fatalf("no edge leads from %v to %v", a, b)
	}
}

// Property: the same events in any order give the same bytes.
func TestBreakdownDeterministic(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tr, deps := randomRun(rt)
		out := func(tr *trace.Trace) []byte {
			b, err := tr.Breakdown(0)
			if err != nil {
				rt.Fatal(err)
			}
			c, err := tr.CriticalPath(deps, 0, tr.Iterations()-1)
			if err != nil {
				rt.Fatal(err)
			}
			var buf bytes.Buffer
			if err := json.NewEncoder(&buf).Encode([]any{b, c, c.Steps}); err != nil {
				rt.Fatal(err)
			}
			if err := b.WriteTable(&buf); err != nil {
				rt.Fatal(err)
			}
			if err := c.WriteSummary(&buf, 0); err != nil {
				rt.Fatal(err)
			}
			return buf.Bytes()
		}
		want := out(tr)
		shuffled := *tr
		shuffled.Events = slices.Clone(tr.Events)
		r := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 1))
		r.Shuffle(len(shuffled.Events), func(i, j int) { shuffled.Events[i], shuffled.Events[j] = shuffled.Events[j], shuffled.Events[i] })
		if got := out(&shuffled); !bytes.Equal(got, want) {
			rt.Fatalf("shuffled events give\n%s\nwant\n%s", got, want)
		}
	})
}

// Odd traces give errors, never panics.
func TestBreakdownErrors(t *testing.T) {
	tr, deps := pipeline()
	var empty trace.Trace
	if _, err := empty.Breakdown(0); !errors.Is(err, trace.ErrTooFewIterations) {
		t.Errorf("empty trace: got %v, want ErrTooFewIterations", err)
	}
	if _, err := empty.CriticalPath(nil, 0, 0); !errors.Is(err, trace.ErrTooFewIterations) {
		t.Errorf("empty trace: got %v, want ErrTooFewIterations", err)
	}
	if _, err := tr.Breakdown(3); !errors.Is(err, trace.ErrTooFewIterations) {
		t.Errorf("warmup 3 of 3: got %v, want ErrTooFewIterations", err)
	}
	if _, err := tr.CriticalPath(deps, 3, 3); !errors.Is(err, trace.ErrTooFewIterations) {
		t.Errorf("iteration 3 of 3: got %v, want ErrTooFewIterations", err)
	}
	if _, err := tr.CriticalPath(deps, 2, 1); !errors.Is(err, trace.ErrTooFewIterations) {
		t.Errorf("iterations 2 to 1: got %v, want ErrTooFewIterations", err)
	}

	missing := *tr
	missing.Events = slices.DeleteFunc(slices.Clone(tr.Events), func(e trace.Event) bool { return e.Iter == 2 && e.Task == 2 && e.Micro == 1 })
	if _, err := missing.CriticalPath(deps, 2, 2); !errors.Is(err, trace.ErrMismatch) {
		t.Errorf("missing event: got %v, want ErrMismatch", err)
	}
	bad := append(slices.Clone(deps), trace.Dep{From: trace.Firing{Task: 9}, To: trace.Firing{Task: 0}})
	if _, err := tr.CriticalPath(bad, 2, 2); !errors.Is(err, trace.ErrMismatch) {
		t.Errorf("edge out of range: got %v, want ErrMismatch", err)
	}
	// s1/bwd mb 0, on the path, made to wait for the later s0/bwd mb 0:
	// the trace breaks the edge.
	broken := append(slices.Clone(deps), trace.Dep{From: trace.Firing{Task: 3, Micro: 0}, To: trace.Firing{Task: 2, Micro: 0}})
	if _, err := tr.CriticalPath(broken, 2, 2); !errors.Is(err, trace.ErrInvalid) {
		t.Errorf("broken edge: got %v, want ErrInvalid", err)
	}
	invalid := *tr
	invalid.Events = append(slices.Clone(tr.Events), trace.Event{Task: 7})
	if _, err := invalid.Breakdown(0); !errors.Is(err, trace.ErrInvalid) {
		t.Errorf("task out of range: got %v, want ErrInvalid", err)
	}
	if err := trace.WriteBreakdowns(&bytes.Buffer{}, &trace.Breakdown{Devices: make([]trace.DeviceBreakdown, 1)}, &trace.Breakdown{}); !errors.Is(err, trace.ErrMismatch) {
		t.Errorf("breakdowns of different devices: got %v, want ErrMismatch", err)
	}
}
