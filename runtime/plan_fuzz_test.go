package runtime

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/flowkit/flowkit/plans"
)

// Whatever a plan file says, if it decodes, running it gives a result or
// an error: never a panic, and no hang (the watchdog ends a stall). Plans
// the fuzzer makes large (memory, firings, batch, workers) are passed
// over, to keep each execution short.
func FuzzRunPlan(f *testing.F) {
	for _, c := range []struct {
		model, strategy string
		batch           int
	}{
		{"mlp3x4096:depth=1,width=2", "single", 2},
		{"mlp3x4096:depth=2,width=2", "pp=2,mb=2", 2},
		{"mlp3x4096:depth=1,width=2", "dp=2", 2},
		{"mlp3x4096:depth=2,width=2", "tp=2", 2},
		{"mlp3x4096:depth=2,width=2", "dp=2,bucket=1GiB", 2},
		{"mlp3x4096:depth=2,width=2", "dp=2,zero=1,bucket=1GiB", 2},
	} {
		var b bytes.Buffer
		if err := plans.Encode(&b, compile(f, c.model, c.strategy, c.batch)); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := plans.Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, m := range p.Memory {
			if m.Peak > 16<<20 {
				return
			}
		}
		if len(p.Firings) > 5000 || p.Batch > 64 {
			return
		}
		for _, d := range p.Devices {
			if d.Workers > 4 {
				return
			}
		}
		r, err := NewPlanRunner(p)
		if err != nil {
			return
		}
		defer r.Close()
		r.Stall = 2 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = r.Run(ctx, 1, NewSyntheticFeeder(p.Images, 10, 2*p.Batch, 7))
	})
}
