package trace

import (
	"io"

	"github.com/google/pprof/profile"
)

// WritePprof writes t as a gzipped pprof profile of time: one sample per
// task, its total duration over the events after warmup iterations, under
// the stack device → phase → op (the kind for tasks without an op) → task,
// with empty levels left out and the device taken from the task's home
// stream. Two profiles of the same plan compare with
//
//	go tool pprof -diff_base predicted.pb.gz measured.pb.gz
//
// Times of tasks that run concurrently add up, so the total can exceed the
// wall-clock duration (recorded as the profile's duration) when streams
// overlap.
func WritePprof(w io.Writer, t *Trace, warmup int) error {
	if err := t.Validate(); err != nil {
		return err
	}
	return writePprof(w, t, warmup)
}

// writePprof is WritePprof of a trace that Validate passed.
func writePprof(w io.Writer, t *Trace, warmup int) error {
	from, to, _, err := t.window(warmup)
	if err != nil {
		return err
	}
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "time", Unit: "nanoseconds"}},
		PeriodType:    &profile.ValueType{Type: "time", Unit: "nanoseconds"},
		Period:        1,
		DurationNanos: int64(to.Sub(from)),
	}
	if t.Source != "" {
		p.Comments = append(p.Comments, "source: "+t.Source)
	}
	if t.Plan != "" {
		p.Comments = append(p.Comments, "plan: "+t.Plan)
	}

	// One function and location per distinct frame name, created in task
	// order so that the output is deterministic.
	// The mapping only keeps pprof from looking for a binary to symbolize.
	m := &profile.Mapping{ID: 1, File: "flowkit-plan", HasFunctions: true}
	p.Mapping = []*profile.Mapping{m}
	locs := make(map[string]*profile.Location)
	frame := func(name string) *profile.Location {
		if l, ok := locs[name]; ok {
			return l
		}
		id := uint64(len(p.Function) + 1)
		f := &profile.Function{ID: id, Name: name, SystemName: name}
		l := &profile.Location{ID: id, Mapping: m, Line: []profile.Line{{Function: f}}}
		p.Function = append(p.Function, f)
		p.Location = append(p.Location, l)
		locs[name] = l
		return l
	}
	for i, s := range t.TaskStats(warmup) {
		if s.Count == 0 {
			continue
		}
		task := &t.Tasks[i]
		what := task.Op
		if what == "" {
			what = task.Kind
		}
		var stack []*profile.Location // leaf first
		for _, name := range []string{task.Name, what, task.Phase, t.Devices[task.Streams[0].Device]} {
			if name != "" {
				stack = append(stack, frame(name))
			}
		}
		sample := &profile.Sample{
			Location: stack,
			Value:    []int64{int64(s.Total)},
			NumLabel: map[string][]int64{"firings": {int64(s.Count)}},
		}
		if task.Kind != "" {
			sample.Label = map[string][]string{"kind": {task.Kind}}
		}
		p.Sample = append(p.Sample, sample)
	}
	if err := p.CheckValid(); err != nil {
		return err
	}
	return p.Write(w)
}
