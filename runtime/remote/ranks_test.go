package remote

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/runtime/internal/plantest"
)

// cpuPlan compiles model under strategy for as many CPU devices as the
// strategy has, one a rank.
func cpuPlan(t *testing.T, model, strategy string, batch int, opt graph.Optimizer) *plans.Plan {
	t.Helper()
	st, err := plans.ParseStrategy(strategy, batch)
	require.NoError(t, err)
	devs := make([]plans.Device, st.Devices())
	for i := range devs {
		devs[i] = plans.Device{Name: fmt.Sprintf("cpu%d", i), Type: "cpu", Workers: 1, Memory: 1 << 30}
	}
	p, err := plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st, Seed: 5, Optimizer: opt, Devices: devs})
	require.NoError(t, err)
	return p
}

// Plans run over ranks that talk gRPC on loopback give every replica the
// bits one process computes: all-reduces in chunks over 3 and 4 ranks,
// registers smaller than the ranks, weighted; ZeRO's reduce-scatters and
// gathers over 3 ranks.
func TestRanksOverGRPC(t *testing.T) {
	compile := func(model, strategy string, batch int) *plans.Plan {
		return cpuPlan(t, model, strategy, batch, graph.SGD{LR: 0.05, Momentum: 0.9})
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

// A run over ranks that talk gRPC, stopped mid-run by rank 0 or at
// another rank's request, ends after the same whole iterations on every
// rank; resumed from a checkpoint of them (over new groups, as a new job
// would), it ends with the bits of a run never stopped.
func TestRanksStopOverGRPC(t *testing.T) {
	const iters = 8
	for _, c := range []struct {
		strategy string
		ranks    []int
		by       int // the rank whose Stop closes
	}{
		{"dp=2", []int{0, 1}, 0},
		{"dp=2", []int{0, 1}, 1},
		{"pp=2,mb=4,sched=1f1b", []int{0, 1}, 0},
		{"pp=2,mb=4,sched=1f1b", []int{0, 1}, 1},
		{"dp=3", []int{0, 1, 2}, 0},
		{"dp=3", []int{0, 1, 2}, 2},
	} {
		t.Run(fmt.Sprintf("%s/by=%d", c.strategy, c.by), func(t *testing.T) {
			p := cpuPlan(t, "mlp", c.strategy, 12, graph.Adam{LR: 0.001, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
			one, err := runtime.NewPlanRunner(p)
			require.NoError(t, err)
			_, err = one.Run(context.Background(), iters, runtime.NewSyntheticFeeder(p.Images, 10, 64, 9))
			require.NoError(t, err)

			n := len(c.ranks)
			runAll := func(rs []*runtime.PlanRunner, iters int, feed runtime.Feeder) []*runtime.RunResult {
				return plantest.RunAll(t, n, func(k int) (*runtime.RunResult, error) { return rs[k].Run(context.Background(), iters, feed) })
			}
			newRanks := func() []*runtime.PlanRunner {
				gs := groups(t, n)
				rs := make([]*runtime.PlanRunner, n)
				for k := range rs {
					rs[k], err = runtime.NewRankRunner(p, c.ranks, gs[k].Link())
					require.NoError(t, err)
					rs[k].Stall = 20 * time.Second
				}
				return rs
			}
			rs := newRanks()
			stops := plantest.NewStops(c.by)
			rs[0].Stop, rs[c.by].Stop, rs[0].StopAsked = stops.Rank0, stops.Stopper, stops.Ask
			res := runAll(rs, iters, plantest.StopFeeder{Feeder: runtime.NewSyntheticFeeder(p.Images, 10, 64, 9), At: 2, Stop: stops.Stopper, Once: new(sync.Once), Reached: stops.Rank0})
			if c.by != 0 {
				require.Equal(t, c.by, stops.Asked(), "the rank that asked rank 0 to stop")
			}
			done := len(res[0].Loss)
			for k, r := range res {
				require.Len(t, r.Loss, done, "rank %d's iterations", k)
			}
			require.True(t, done >= 3 && done < iters, "stopped after %d of %d iterations", done, iters)

			w, err := rs[0].Store()
			require.NoError(t, err)
			for _, r := range rs[1:] {
				s, err := r.Store()
				require.NoError(t, err)
				require.NoError(t, w.Put(s.Tensors()...))
			}
			ckpt := &runtime.Checkpoint{Model: p.Model, Seed: p.Seed, Step: done, Weights: w}
			rs = newRanks()
			for _, r := range rs {
				require.NoError(t, r.Resume(ckpt))
			}
			runAll(rs, iters-done, runtime.NewSyntheticFeeder(p.Images, 10, 64, 9))
			for _, reg := range p.Registers {
				if !reg.Persistent {
					continue
				}
				replica := p.Replica(reg.Device)
				want, ok := one.Param(reg.Name, replica)
				require.True(t, ok, reg.Name)
				got, ok := rs[c.ranks[reg.Device]].Param(reg.Name, replica)
				require.True(t, ok, reg.Name)
				require.Equal(t, want, got, "%s of replica %d after %d+%d steps: the bits of a run never stopped", reg.Name, replica, done, iters-done)
			}
		})
	}
}

// A worker whose coordinator ends the group while the worker is in a Run
// (the coordinator gave up on it: an error, an interrupt) fails the Run at
// once, rather than waiting for messages that will not come until its
// stall timeout.
func TestGoodbyeEndsRun(t *testing.T) {
	p := cpuPlan(t, "mlp", "dp=2", 8, graph.SGD{LR: 0.05})
	gs := groups(t, 2)
	r, err := runtime.NewRankRunner(p, []int{0, 1}, gs[1].Link())
	require.NoError(t, err)
	r.Stall = time.Minute
	ended := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background(), 5, runtime.NewSyntheticFeeder(p.Images, 10, 64, 9))
		ended <- err
	}()
	time.Sleep(200 * time.Millisecond) // rank 1 waits for rank 0, which never runs
	require.NoError(t, gs[0].Close())
	select {
	case err := <-ended:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the worker's Run goes on after the coordinator's goodbye")
	}
}

// A rank whose Run fails over gRPC, its link up, tells the others: their
// Runs fail at once naming it and its error, not after the stall timeout
// (a minute); every group stays up and closes cleanly, the failed rank's
// too.
func TestRanksFailureOverGRPC(t *testing.T) {
	why := errors.New("the data set is gone")
	for _, c := range []struct {
		strategy string
		failing  int
	}{
		{"dp=2", 1},
		{"pp=2,mb=4,sched=1f1b", 0},
		{"dp=3", 2},
	} {
		t.Run(fmt.Sprintf("%s/rank%d", c.strategy, c.failing), func(t *testing.T) {
			p := cpuPlan(t, "mlp", c.strategy, 12, graph.SGD{LR: 0.05})
			n := len(p.Devices)
			gs := groups(t, n)
			ranks := make([]int, n)
			for k := range ranks {
				ranks[k] = k
			}
			plantest.RunFailing(t, n, c.failing, runtime.NewSyntheticFeeder(p.Images, 10, 64, 9), why,
				func(ctx context.Context, k int, feed plantest.Feeder) error {
					r, err := runtime.NewRankRunner(p, ranks, gs[k].Link())
					if err != nil {
						return err
					}
					r.Stall = time.Minute
					_, err = r.Run(ctx, 5, feed)
					return err
				})
			for k, g := range gs {
				require.NoError(t, g.Err(), "rank %d's group", k)
			}
			for k, g := range gs {
				require.NoError(t, g.Close(), "rank %d closes", k)
			}
		})
	}
}
