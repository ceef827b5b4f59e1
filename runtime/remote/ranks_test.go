package remote

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/runtime/internal/plantest"
)

// Plans run over ranks that talk gRPC on loopback give every replica the
// bits one process computes: all-reduces in chunks over 3 and 4 ranks,
// registers smaller than the ranks, weighted; ZeRO's reduce-scatters and
// gathers over 3 ranks.
func TestRanksOverGRPC(t *testing.T) {
	compile := func(model, strategy string, batch int) *plans.Plan {
		st, err := plans.ParseStrategy(strategy, batch)
		require.NoError(t, err)
		devs := make([]plans.Device, st.DP)
		for i := range devs {
			devs[i] = plans.Device{Name: fmt.Sprintf("cpu%d", i), Type: "cpu", Workers: 1, Memory: 1 << 30}
		}
		p, err := plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st, Seed: 5,
			Optimizer: graph.SGD{LR: 0.05, Momentum: 0.9}, Devices: devs})
		require.NoError(t, err)
		return p
	}
	const gpt3 = "gpt:layers=2,hidden=36,heads=4,seq=8,vocab=64"
	for _, c := range []struct {
		name string
		p    *plans.Plan
	}{
		{"3 ranks", plantest.AllReduces([]int{2, 5000, 3*4096 + 7}, 3, nil)},
		{"4 ranks, weighted", plantest.AllReduces([]int{3, 4*4096 + 1, 70000}, 4, []int{2, 1, 3, 1})},
		{"3 ranks, zero=2", compile(gpt3, "dp=3,mb=2,zero=2", 12)},
		{"3 ranks, zero=3", compile(gpt3, "dp=3,mb=2,zero=3", 12)},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := c.p
			n := len(p.Devices)
			feed := runtime.NewSyntheticFeeder(p.Images, 10, 64, 9)
			one, err := runtime.NewPlanRunner(p)
			require.NoError(t, err)
			want, err := one.Run(context.Background(), 2, feed)
			require.NoError(t, err)

			gs := groups(t, n)
			ranks := make([]int, n)
			rs := make([]*runtime.PlanRunner, n)
			for k := range ranks {
				ranks[k] = k
			}
			for k := range rs {
				r, err := runtime.NewRankRunner(p, ranks, gs[k].Link())
				require.NoError(t, err)
				rs[k] = r
			}
			var loss float64
			var mu sync.Mutex
			var wg sync.WaitGroup
			errs := make([]error, n)
			for k, r := range rs {
				wg.Go(func() {
					res, err := r.Run(context.Background(), 2, feed)
					errs[k] = err
					if err == nil {
						mu.Lock()
						loss += res.Part.Loss[1]
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			for k, err := range errs {
				require.NoError(t, err, "rank %d", k)
			}
			require.InDelta(t, want.Loss[1], loss, 1e-6, "the last iteration's loss")
			for _, reg := range p.Registers {
				if !reg.Persistent {
					continue
				}
				replica := p.Replica(reg.Device)
				w, ok := one.Param(reg.Name, replica)
				require.True(t, ok, reg.Name)
				g, ok := rs[reg.Device].Param(reg.Name, replica)
				require.True(t, ok, reg.Name)
				require.Equal(t, w, g, "%s of replica %d: the bits of one process", reg.Name, replica)
			}
		})
	}
}
