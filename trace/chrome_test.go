package trace_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flowkit/flowkit/trace"
)

type chromeFile struct {
	DisplayTimeUnit string            `json:"displayTimeUnit"`
	OtherData       map[string]string `json:"otherData"`
	TraceEvents     []struct {
		Name string          `json:"name"`
		Cat  string          `json:"cat"`
		Ph   string          `json:"ph"`
		Ts   json.Number     `json:"ts"`
		Dur  json.Number     `json:"dur"`
		Pid  int             `json:"pid"`
		Tid  int             `json:"tid"`
		Args json.RawMessage `json:"args"`
	} `json:"traceEvents"`
}

func TestWriteChrome(t *testing.T) {
	var buf bytes.Buffer
	if err := trace.WriteChrome(&buf, fixture()); err != nil {
		t.Fatal(err)
	}
	var f chromeFile
	dec := json.NewDecoder(bytes.NewReader(buf.Bytes()))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, buf.Bytes())
	}
	if got, want := f.OtherData["plan"], "toy/pipeline/b2"; got != want {
		t.Errorf("otherData.plan: got %q, want %q", got, want)
	}

	type key struct {
		ph, name string
		pid, tid int
		ts, dur  string
		args     string
	}
	got := make(map[key]int)
	var meta, complete int
	for _, e := range f.TraceEvents {
		switch e.Ph {
		case "M":
			meta++
		case "X":
			complete++
		}
		got[key{e.Ph, e.Name, e.Pid, e.Tid, e.Ts.String(), e.Dur.String(), string(e.Args)}]++
	}
	// 2 process names, 4 thread names and 4 thread sort indices; one X per
	// event and stream: 15 events, the 3 transfers on two streams.
	if meta != 10 || complete != 18 {
		t.Errorf("got %d metadata and %d complete events, want 10 and 18", meta, complete)
	}
	for _, want := range []key{
		{"M", "process_name", 1, 0, "", "", `{"name":"gpu1"}`},
		{"M", "thread_name", 1, 1, "", "", `{"name":"copy"}`},
		{"X", "send", 0, 1, "0.160", "0.020", `{"iter":1,"micro":-1,"kind":"copy","phase":"comm","bytes":4096}`},
		{"X", "send", 1, 1, "0.160", "0.020", `{"iter":1,"micro":-1,"kind":"copy","phase":"comm","bytes":4096}`},
		{"X", "bwd", 1, 0, "0.310", "0.020", `{"iter":2,"micro":1,"kind":"compute","op":"matmul","phase":"backward","flops":2000000}`},
	} {
		if got[want] != 1 {
			t.Errorf("got %d events %+v, want 1", got[want], want)
		}
	}

	var again bytes.Buffer
	if err := trace.WriteChrome(&again, fixture()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Error("two writes of one trace differ")
	}
}

func TestWriteChromeMicroseconds(t *testing.T) {
	tests := []struct {
		start, end trace.Time
		want       string
	}{
		{0, 1, `"ts":0.000,"dur":0.001`},
		{1_234_567, 1_235_567, `"ts":1234.567,"dur":1.000`},
		{90_000_000_000_123, 90_000_000_001_123, `"ts":90000000000.123,"dur":1.000`},
	}
	for _, tt := range tests {
		tr := fixture()
		tr.Events = []trace.Event{{Task: 0, Micro: -1, Start: tt.start, End: tt.end}}
		var buf bytes.Buffer
		if err := trace.WriteChrome(&buf, tr); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), tt.want) {
			t.Errorf("[%d, %d): got\n%s\nwant it to contain %s", tt.start, tt.end, buf.String(), tt.want)
		}
	}
}

func TestWriteChromeInvalid(t *testing.T) {
	tr := fixture()
	tr.Events[0].Task = 9
	if err := trace.WriteChrome(new(bytes.Buffer), tr); !errors.Is(err, trace.ErrInvalid) {
		t.Errorf("got %v, want ErrInvalid", err)
	}
}

// Counters are written as "C" events on their device's process, a value
// each, at nanosecond precision; a counter on no device of the trace, or
// going back in time, is refused.
func TestWriteChromeCounters(t *testing.T) {
	mem := trace.Counter{Device: 1, Name: "live memory (MiB)", Points: []trace.CounterPoint{{At: 0, Value: 1.5}, {At: 1_234_567, Value: 2}, {At: 1_234_567, Value: 0.25}}}
	var buf bytes.Buffer
	if err := trace.WriteChrome(&buf, fixture(), mem); err != nil {
		t.Fatal(err)
	}
	var f chromeFile
	if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range f.TraceEvents {
		if e.Ph == "C" {
			got = append(got, fmt.Sprintf("%s %d %s %s", e.Name, e.Pid, e.Ts, e.Args))
		}
	}
	want := []string{
		`live memory (MiB) 1 0.000 {"value":1.5}`,
		`live memory (MiB) 1 1234.567 {"value":2}`,
		`live memory (MiB) 1 1234.567 {"value":0.25}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("counter events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, bad := range []trace.Counter{
		{Device: 2, Name: "x"},
		{Device: -1, Name: "x"},
		{Device: 0, Name: "x", Points: []trace.CounterPoint{{At: 5}, {At: 4}}},
	} {
		if err := trace.WriteChrome(new(bytes.Buffer), fixture(), bad); !errors.Is(err, trace.ErrInvalid) {
			t.Errorf("counter %+v: got %v, want ErrInvalid", bad, err)
		}
	}
}
