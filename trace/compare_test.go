package trace_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/flowkit/flowkit/trace"
)

// serial returns a one-stream trace whose iterations each run the tasks of
// pattern back to back, with the durations of durs[iter] (one per entry of
// pattern). A task listed more than once fires once per micro-batch.
func serial(names []string, pattern []int32, durs [][]time.Duration) *trace.Trace {
	tr := &trace.Trace{Devices: []string{"cpu0"}, Streams: [][]string{{"main"}}}
	for i, n := range names {
		tr.Tasks = append(tr.Tasks, trace.TaskInfo{ID: int32(i), Name: n, Kind: "compute", Streams: []trace.StreamRef{{}}})
	}
	firings := make(map[int32]int32)
	for _, task := range pattern {
		firings[task]++
	}
	var now trace.Time
	for iter, ds := range durs {
		micro := make(map[int32]int32)
		for j, task := range pattern {
			e := trace.Event{Task: task, Iter: int32(iter), Micro: -1, Start: now, End: now.Add(ds[j])}
			if firings[task] > 1 {
				e.Micro = micro[task]
				micro[task]++
			}
			tr.Events = append(tr.Events, e)
			now = e.End
		}
	}
	return tr
}

var (
	names   = []string{"a", "b", "c", "d"}
	pattern = []int32{0, 1, 1, 2, 3} // b fires twice per iteration
)

func TestCompare(t *testing.T) {
	// Steps: predicted 70 ns, measured 66 ns after a 156 ns first iteration.
	pred := serial(names, pattern, [][]time.Duration{{10, 5, 5, 30, 20}, {10, 5, 5, 30, 20}, {10, 5, 5, 30, 20}})
	meas := serial(names, pattern, [][]time.Duration{{100, 8, 8, 25, 15}, {10, 8, 8, 25, 15}, {10, 8, 8, 25, 15}})
	c, err := trace.Compare(pred, meas, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c.PredStep != 70 || c.MeasStep != 66 {
		t.Errorf("step: got %v and %v, want 70ns and 66ns", c.PredStep, c.MeasStep)
	}
	if got, want := c.StepRelErr, 4.0/66; math.Abs(got-want) > 1e-12 {
		t.Errorf("step error: got %v, want %v", got, want)
	}
	if got, want := len(c.Iters), 2; got != want {
		t.Fatalf("iterations: got %d, want %d", got, want)
	}
	if got, want := c.Iters[0], (trace.IterError{Iter: 1, Pred: 70, Meas: 66, RelErr: 4.0 / 66}); got != want {
		t.Errorf("iteration: got %+v, want %+v", got, want)
	}

	// b is off by 3 ns twice an iteration; c and d by 5 ns once (a tie,
	// broken by name); a is exact (its slow warm-up is excluded).
	tests := []struct {
		name        string
		pred, meas  time.Duration
		err, impact time.Duration
		relErr      float64
		perIter     float64
		share       float64
	}{
		{"b", 5, 8, -3, 6, -3.0 / 8, 2, 16.0 / 66},
		{"c", 30, 25, 5, 5, 5.0 / 25, 1, 25.0 / 66},
		{"d", 20, 15, 5, 5, 5.0 / 15, 1, 15.0 / 66},
		{"a", 10, 10, 0, 0, 0, 1, 10.0 / 66},
	}
	if len(c.Tasks) != len(tests) {
		t.Fatalf("tasks: got %d, want %d", len(c.Tasks), len(tests))
	}
	for i, want := range tests {
		got := c.Tasks[i]
		if got.Name != want.name {
			t.Errorf("rank %d: got %s, want %s", i, got.Name, want.name)
			continue
		}
		if got.Pred != want.pred || got.Meas != want.meas || got.Err != want.err || got.Impact != want.impact {
			t.Errorf("%s: got pred %v meas %v err %v impact %v, want %v %v %v %v",
				want.name, got.Pred, got.Meas, got.Err, got.Impact, want.pred, want.meas, want.err, want.impact)
		}
		for _, f := range []struct {
			what      string
			got, want float64
		}{
			{"rel err", got.RelErr, want.relErr},
			{"per iter", got.PerIter, want.perIter},
			{"share", got.Share, want.share},
			{"pred ms", got.PredMs, float64(want.pred) / 1e6},
		} {
			if math.Abs(f.got-f.want) > 1e-12 {
				t.Errorf("%s %s: got %v, want %v", want.name, f.what, f.got, f.want)
			}
		}
	}

	b, err := json.Marshal(c)
	if err != nil {
		t.Fatalf("JSON: %v", err)
	}
	for _, want := range []string{`"pred_step_ns":70`, `"meas_step_ms":0.000066`, `"name":"b"`, `"impact_ns":6`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("JSON %s: want it to contain %s", b, want)
		}
	}
}

func TestCompareErrors(t *testing.T) {
	durs := [][]time.Duration{{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}}
	good := serial(names, pattern, durs)
	tests := []struct {
		name       string
		pred, meas *trace.Trace
		warmup     int
		is         error
		want       string
	}{
		{"task count", good, serial(names[:3], []int32{0, 1, 2}, [][]time.Duration{{1, 1, 1}}), 0,
			trace.ErrMismatch, "predicted has 4 tasks, measured 3"},
		{"task name", good, serial([]string{"a", "b", "x", "d"}, pattern, durs), 0,
			trace.ErrMismatch, `task 2 is "c" in predicted, "x" in measured`},
		{"invalid measured", good, func() *trace.Trace {
			tr := serial(names, pattern, durs)
			tr.Events[1].Start = 0
			return tr
		}(), 0, trace.ErrInvalid, "measured: trace: invalid trace: stream cpu0/main"},
		{"warmup", good, good, 2, trace.ErrTooFewIterations, "predicted: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := trace.Compare(tt.pred, tt.meas, tt.warmup)
			if !errors.Is(err, tt.is) {
				t.Fatalf("got %v, want %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestWriteTableTop(t *testing.T) {
	pred := serial(names, pattern, [][]time.Duration{{10, 5, 5, 30, 20}})
	meas := serial(names, pattern, [][]time.Duration{{10, 8, 8, 25, 15}})
	c, err := trace.Compare(pred, meas, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		top, rows int
		more      string
	}{{0, 4, ""}, {2, 2, "(2 more not shown)"}, {9, 4, ""}} {
		var buf bytes.Buffer
		if err := c.WriteTable(&buf, tt.top); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		rows := 0
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] >= "1" && f[0] <= "9" {
				rows++
			}
		}
		if rows != tt.rows {
			t.Errorf("top %d: got %d rows, want %d:\n%s", tt.top, rows, tt.rows, buf.String())
		}
		if tt.more != "" && lines[len(lines)-1] != tt.more {
			t.Errorf("top %d: got last line %q, want %q", tt.top, lines[len(lines)-1], tt.more)
		}
	}
}
