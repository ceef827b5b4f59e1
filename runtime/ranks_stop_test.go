package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/runtime/internal/plantest"
)

// slowStop delays rank 0's MsgPause, so that the other ranks may end
// their Run before it reaches them, and its MsgStopAt, so that paused
// ranks wait for it a while.
type slowStop struct {
	Link
	delay time.Duration
}

func (l slowStop) Send(to int, m *Message) error {
	if m.Kind == MsgPause || m.Kind == MsgStopAt {
		time.Sleep(l.delay)
	}
	return l.Link.Send(to, m)
}

// runRanksTogether runs iters iterations on every runner at once and
// returns each rank's result.
func runRanksTogether(t *testing.T, rs []*PlanRunner, iters int, feed Feeder) []*RunResult {
	t.Helper()
	return plantest.RunAll(t, len(rs), func(k int) (*RunResult, error) { return rs[k].Run(context.Background(), iters, feed) })
}

// A multi-process run whose rank 0 stops mid-run ends on every rank
// after the same whole iterations, however far each rank had got: resumed
// from a checkpoint of them for the steps left, it ends with the bits of
// a run never stopped. Stopped in the last iteration, with the pause late
// to reach the other ranks, it runs every iteration (ranks that ended
// their Run before the pause reached them told rank 0 so). So too when
// rank 1's Stop closes: it asks rank 0, whose StopAsked closes rank 0's.
func TestRanksStop(t *testing.T) {
	const iters = 8
	cases := []struct {
		strategy string
		ranks    []int
	}{
		{"dp=2", []int{0, 1}},
		{"pp=2,mb=4,sched=1f1b", []int{0, 1}},
		{"pp=2,mb=2,sched=1f1b", []int{1, 0}}, // rank 0 holds the last stage, rank 1 the inputs
		{"dp=2,pp=2,mb=2", []int{0, 1, 2, 0}},
	}
	for _, c := range cases {
		p := compile(t, "mlp", c.strategy, 16)
		one, err := NewPlanRunner(p)
		require.NoError(t, err)
		_, err = one.Run(context.Background(), iters, NewSyntheticFeeder(p.Images, 10, 64, 9))
		require.NoError(t, err)
		for _, at := range []int{1, 3, iters - 1} {
			for _, stop := range []struct {
				by    int // the rank whose Stop closes
				delay time.Duration
			}{{0, 0}, {0, 300 * time.Millisecond}, {1, 0}} {
				delay := stop.delay
				t.Run(fmt.Sprintf("%s/%v/at=%d/by=%d/delay=%v", c.strategy, c.ranks, at, stop.by, delay), func(t *testing.T) {
					n := slices.Max(c.ranks) + 1
					h := newMemHub(n)
					rs := make([]*PlanRunner, n)
					for k := range rs {
						var l Link = memLink{h, k}
						if k == 0 {
							l = slowStop{l, delay}
						}
						rs[k], err = NewRankRunner(p, c.ranks, l)
						require.NoError(t, err)
						rs[k].Stall = 10 * time.Second
					}
					stops := plantest.NewStops(stop.by)
					rs[0].Stop, rs[stop.by].Stop, rs[0].StopAsked = stops.Rank0, stops.Stopper, stops.Ask
					feed := plantest.StopFeeder{Feeder: NewSyntheticFeeder(p.Images, 10, 64, 9), At: at, Stop: stops.Stopper, Once: new(sync.Once),
						Reached: stops.Rank0} // by rank 1: its request reaches rank 0 before the run ends
					res := runRanksTogether(t, rs, iters, feed)
					if stop.by != 0 && at < iters-1 {
						require.Equal(t, stop.by, stops.Asked(), "the rank that asked rank 0 to stop")
					}
					done := len(res[0].Loss)
					for k, r := range res {
						require.Len(t, r.Loss, done, "rank %d's iterations", k)
						require.Equal(t, done, rs[k].Iteration(), "rank %d's iteration count", k)
					}
					require.GreaterOrEqual(t, done, at+1, "the iteration fed when Stop closed is run")
					if at < iters-1 {
						require.Less(t, done, iters, "stopped early")
					}
					var parts []*RankResult
					for _, r := range res {
						parts = append(parts, r.Part)
					}
					merged, err := MergeRanks(p, parts, make([]time.Duration, n))
					require.NoError(t, err)
					require.NoError(t, p.CheckTrace(merged.Trace), "the merged trace obeys the plan")

					if done < iters {
						w, err := rs[0].Store()
						require.NoError(t, err)
						for _, r := range rs[1:] {
							s, err := r.Store()
							require.NoError(t, err)
							require.NoError(t, w.Put(s.Tensors()...))
						}
						ckpt := &Checkpoint{Model: p.Model, Seed: p.Seed, Step: done, Weights: w}
						h = newMemHub(n)
						for k := range rs {
							rs[k], err = NewRankRunner(p, c.ranks, memLink{h, k})
							require.NoError(t, err)
							require.NoError(t, rs[k].Resume(ckpt))
						}
						runRanksTogether(t, rs, iters-done, NewSyntheticFeeder(p.Images, 10, 64, 9))
					}
					for i, reg := range p.Registers {
						if !reg.Persistent {
							continue
						}
						want, err := one.value(i)
						require.NoError(t, err)
						got, err := rs[c.ranks[reg.Device]].value(i)
						require.NoError(t, err)
						require.Equal(t, want.F, got.F, "%s on %s after %d+%d steps: the bits of a run never stopped", reg.Name, p.Devices[reg.Device].Name, done, iters-done)
					}
				})
			}
		}
	}
}

// A paused rank's streams may begin the iterations another stream has
// begun, and wait to begin any other until the ranks agree where to stop
// (or the run fails).
func TestPauseAtIterationBoundary(t *testing.T) {
	x := &run{r: &PlanRunner{}, iters: 10, asked: 10, ctx: context.Background(), rr: &rankRun{}}
	x.cond = sync.NewCond(&x.mu)
	require.True(t, x.begin(0)) // stream a
	require.True(t, x.begin(1)) // a, ahead
	x.paused = true
	require.True(t, x.begin(0)) // stream b catches up
	require.True(t, x.begin(1))
	began := make(chan bool)
	go func() { began <- x.begin(2) }()
	select {
	case <-began:
		t.Fatal("began iteration 2 while paused")
	case <-time.After(50 * time.Millisecond):
	}
	x.mu.Lock()
	x.iters, x.paused = 2, false // MsgStopAt 2
	x.cond.Broadcast()
	x.mu.Unlock()
	require.False(t, <-began)

	ctx, cancel := context.WithCancel(context.Background())
	x = &run{r: &PlanRunner{}, iters: 10, asked: 10, ctx: ctx, rr: &rankRun{}, paused: true}
	x.cond = sync.NewCond(&x.mu)
	go func() { began <- x.begin(0) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	x.mu.Lock()
	x.cond.Broadcast() // as the watchdog does
	x.mu.Unlock()
	require.False(t, <-began, "a failed run begins nothing")
}
