package trace_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowkit/flowkit/trace"
	"github.com/flowkit/flowkit/units"
)

// fixture is a two-device pipeline over three iterations: fwd on gpu0, a
// transfer occupying the copy streams of both devices, two micro-batches of
// bwd on gpu1, and an input task on gpu1's copy stream. Iterations end at
// 130, 230 and 330 ns.
func fixture() *trace.Trace {
	gpu0c, gpu0x := trace.StreamRef{Device: 0, Stream: 0}, trace.StreamRef{Device: 0, Stream: 1}
	gpu1c, gpu1x := trace.StreamRef{Device: 1, Stream: 0}, trace.StreamRef{Device: 1, Stream: 1}
	ev := func(task, iter, micro int32, start, end trace.Time) trace.Event {
		return trace.Event{Task: task, Iter: iter, Micro: micro, Start: start, End: end}
	}
	return &trace.Trace{
		Source:  "test",
		Plan:    "toy/pipeline/b2",
		Devices: []string{"gpu0", "gpu1"},
		Streams: [][]string{{"compute", "copy"}, {"compute", "copy"}},
		Tasks: []trace.TaskInfo{
			{ID: 0, Name: "fwd", Kind: "compute", Op: "matmul", Phase: "forward", Streams: []trace.StreamRef{gpu0c}, FLOPs: 1e6},
			{ID: 1, Name: "send", Kind: "copy", Phase: "comm", Streams: []trace.StreamRef{gpu0x, gpu1x}, Bytes: 4096},
			{ID: 2, Name: "bwd", Kind: "compute", Op: "matmul", Phase: "backward", Streams: []trace.StreamRef{gpu1c}, FLOPs: 2e6},
			{ID: 3, Name: "load", Kind: "input", Streams: []trace.StreamRef{gpu1x}, Bytes: 512},
		},
		Events: []trace.Event{
			ev(3, 0, -1, 0, 10), ev(0, 0, -1, 0, 70), ev(1, 0, -1, 70, 90), ev(2, 0, 0, 90, 110), ev(2, 0, 1, 110, 130),
			ev(3, 1, -1, 130, 140), ev(0, 1, -1, 130, 160), ev(1, 1, -1, 160, 180), ev(2, 1, 0, 180, 200), ev(2, 1, 1, 200, 230),
			ev(3, 2, -1, 230, 240), ev(0, 2, -1, 230, 280), ev(1, 2, -1, 280, 290), ev(2, 2, 0, 290, 310), ev(2, 2, 1, 310, 330),
		},
	}
}

func TestTime(t *testing.T) {
	if got, want := trace.Time(250).Sub(100), 150*time.Nanosecond; got != want {
		t.Errorf("Sub: got %v, want %v", got, want)
	}
	if got, want := trace.Time(100).Add(time.Microsecond), trace.Time(1100); got != want {
		t.Errorf("Add: got %v, want %v", got, want)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*trace.Trace)
		want   string // substring of the error; "" for a valid trace
	}{
		{"valid", func(*trace.Trace) {}, ""},
		{"zero-length event", func(tr *trace.Trace) { tr.Events[0].End = tr.Events[0].Start }, ""},
		{"no events", func(tr *trace.Trace) { tr.Events = nil }, ""},
		{"stream names per device", func(tr *trace.Trace) { tr.Streams = tr.Streams[:1] }, "2 devices but stream names for 1"},
		{"task id", func(tr *trace.Trace) { tr.Tasks[2].ID = 7 }, `task 2 ("bwd") has ID 7`},
		{"no stream", func(tr *trace.Trace) { tr.Tasks[0].Streams = nil }, `task "fwd" occupies no stream`},
		{"device range", func(tr *trace.Trace) { tr.Tasks[1].Streams[1].Device = 2 }, `task "send": device 2 out of range [0,2)`},
		{"stream range", func(tr *trace.Trace) { tr.Tasks[0].Streams[0].Stream = 5 }, `task "fwd": stream 5 of device "gpu0" out of range [0,2)`},
		{"stream twice", func(tr *trace.Trace) { tr.Tasks[1].Streams[1] = tr.Tasks[1].Streams[0] }, `task "send" lists stream gpu0/copy twice`},
		{"negative FLOPs", func(tr *trace.Trace) { tr.Tasks[0].FLOPs = -1 }, `task "fwd": FLOPs -1`},
		{"NaN FLOPs", func(tr *trace.Trace) { tr.Tasks[0].FLOPs = units.FLOPs(math.NaN()) }, `task "fwd": FLOPs NaN`},
		{"negative bytes", func(tr *trace.Trace) { tr.Tasks[3].Bytes = -2 }, `task "load": negative bytes -2`},
		{"event task range", func(tr *trace.Trace) { tr.Events[4].Task = 4 }, "event 4: task 4 out of range [0,4)"},
		{"negative iteration", func(tr *trace.Trace) { tr.Events[1].Iter = -1 }, `event 1 ("fwd" iter -1): negative iteration`},
		{"micro below -1", func(tr *trace.Trace) { tr.Events[3].Micro = -2 }, `event 3 ("bwd" iter 0 micro -2): micro-batch below -1`},
		{"end before start", func(tr *trace.Trace) { tr.Events[2].End = 60 }, `event 2 ("send" iter 0): ends at 60 ns before it starts at 70 ns`},
		{"duplicate firing", func(tr *trace.Trace) { tr.Events[4].Micro = 0 }, `events 3 and 4 both record "bwd" iter 0 micro 0`},
		{"missing iteration", func(tr *trace.Trace) {
			for i := range tr.Events {
				if tr.Events[i].Iter == 1 {
					tr.Events[i].Iter = 3
				}
			}
		}, "iteration 1 of 4 has no events"},
		{"overlap, one task", func(tr *trace.Trace) { tr.Events[6].Start = 60 },
			`stream gpu0/compute runs two tasks at once: "fwd" iter 0 [0, 70) ns and "fwd" iter 1 [60, 160) ns`},
		{"overlap on a transfer's second stream", func(tr *trace.Trace) { tr.Events[0].End = 75 },
			`stream gpu1/copy runs two tasks at once: "load" iter 0 [0, 75) ns and "send" iter 0 [70, 90) ns`},
		{"overlap inside a longer event", func(tr *trace.Trace) { tr.Events[3].End = 300 },
			`stream gpu1/compute runs two tasks at once: "bwd" iter 0 micro 0 [90, 300) ns and "bwd" iter 0 micro 1 [110, 130) ns`},
		{"earliest overlap first", func(tr *trace.Trace) {
			tr.Events[11].Start = 150 // gpu0/compute, at 150
			tr.Events[0].End = 75     // gpu1/copy, at 70
		}, "stream gpu1/copy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := fixture()
			tt.mutate(tr)
			err := tr.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want nil", err)
			case tt.want == "":
				return
			case err == nil:
				t.Fatalf("got nil, want an error containing %q", tt.want)
			case !errors.Is(err, trace.ErrInvalid):
				t.Errorf("got %v, want it to wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestIterationEnds(t *testing.T) {
	got := fixture().IterationEnds()
	want := []trace.Time{130, 230, 330}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestStepTime(t *testing.T) {
	tests := []struct {
		warmup  int
		want    time.Duration
		wantErr bool
	}{
		{warmup: 0, want: 110}, // 330 / 3
		{warmup: 1, want: 100}, // (330 − 130) / 2
		{warmup: 2, want: 100}, // (330 − 230) / 1
		{warmup: 3, wantErr: true},
		{warmup: -1, wantErr: true},
	}
	for _, tt := range tests {
		got, err := fixture().StepTime(tt.warmup)
		switch {
		case tt.wantErr && !errors.Is(err, trace.ErrTooFewIterations):
			t.Errorf("warmup %d: got error %v, want ErrTooFewIterations", tt.warmup, err)
		case !tt.wantErr && err != nil:
			t.Errorf("warmup %d: got error %v, want nil", tt.warmup, err)
		case got != tt.want:
			t.Errorf("warmup %d: got %v, want %v", tt.warmup, got, tt.want)
		}
	}
}

func TestTaskStats(t *testing.T) {
	tests := []struct {
		warmup int
		want   []trace.TaskStat
	}{
		{0, []trace.TaskStat{
			{Task: 0, Count: 3, Total: 150, Mean: 50, Median: 50, Min: 30, Max: 70},
			{Task: 1, Count: 3, Total: 50, Mean: 16, Median: 20, Min: 10, Max: 20},
			{Task: 2, Count: 6, Total: 130, Mean: 21, Median: 20, Min: 20, Max: 30},
			{Task: 3, Count: 3, Total: 30, Mean: 10, Median: 10, Min: 10, Max: 10},
		}},
		{1, []trace.TaskStat{
			{Task: 0, Count: 2, Total: 80, Mean: 40, Median: 40, Min: 30, Max: 50},
			{Task: 1, Count: 2, Total: 30, Mean: 15, Median: 15, Min: 10, Max: 20},
			{Task: 2, Count: 4, Total: 90, Mean: 22, Median: 20, Min: 20, Max: 30},
			{Task: 3, Count: 2, Total: 20, Mean: 10, Median: 10, Min: 10, Max: 10},
		}},
		{3, []trace.TaskStat{{Task: 0}, {Task: 1}, {Task: 2}, {Task: 3}}},
	}
	for _, tt := range tests {
		got := fixture().TaskStats(tt.warmup)
		if !slices.Equal(got, tt.want) {
			t.Errorf("warmup %d:\ngot  %+v\nwant %+v", tt.warmup, got, tt.want)
		}
	}
}
