package trace_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/flowkit/flowkit/trace"
)

func TestWritePprof(t *testing.T) {
	tests := []struct {
		warmup      int
		total       int64 // sum of the durations of events with Iter ≥ warmup
		durationNs  int64
		sendFirings int64
	}{
		{warmup: 0, total: 150 + 50 + 130 + 30, durationNs: 330, sendFirings: 3},
		{warmup: 1, total: 80 + 30 + 90 + 20, durationNs: 200, sendFirings: 2},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		if err := trace.WritePprof(&buf, fixture(), tt.warmup); err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(&buf)
		if err != nil {
			t.Fatalf("warmup %d: parse: %v", tt.warmup, err)
		}
		if got, want := p.SampleType[0].Type+"/"+p.SampleType[0].Unit, "time/nanoseconds"; got != want {
			t.Errorf("warmup %d: sample type: got %s, want %s", tt.warmup, got, want)
		}
		var total int64
		stacks := make(map[string][]string)
		for _, s := range p.Sample {
			total += s.Value[0]
			var names []string
			for _, l := range s.Location {
				names = append(names, l.Line[0].Function.Name)
			}
			stacks[names[0]] = names
			if names[0] == "send" {
				if got := s.NumLabel["firings"]; !slices.Equal(got, []int64{tt.sendFirings}) {
					t.Errorf("warmup %d: send firings: got %v, want [%d]", tt.warmup, got, tt.sendFirings)
				}
			}
		}
		if total != tt.total {
			t.Errorf("warmup %d: total: got %d, want %d", tt.warmup, total, tt.total)
		}
		if p.DurationNanos != tt.durationNs {
			t.Errorf("warmup %d: duration: got %d, want %d", tt.warmup, p.DurationNanos, tt.durationNs)
		}
		for leaf, want := range map[string][]string{
			"fwd":  {"fwd", "matmul", "forward", "gpu0"},
			"send": {"send", "copy", "comm", "gpu0"},
			"load": {"load", "input", "gpu1"}, // no phase
		} {
			if got := stacks[leaf]; !slices.Equal(got, want) {
				t.Errorf("warmup %d: stack of %s: got %v, want %v", tt.warmup, leaf, got, want)
			}
		}
	}
}

func TestWritePprofErrors(t *testing.T) {
	if err := trace.WritePprof(new(bytes.Buffer), fixture(), 3); !errors.Is(err, trace.ErrTooFewIterations) {
		t.Errorf("warmup 3 of 3: got %v, want ErrTooFewIterations", err)
	}
	tr := fixture()
	tr.Events[2].End = 0
	if err := trace.WritePprof(new(bytes.Buffer), tr, 0); !errors.Is(err, trace.ErrInvalid) {
		t.Errorf("invalid trace: got %v, want ErrInvalid", err)
	}
}
