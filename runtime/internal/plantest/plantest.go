// Package plantest builds small plans by hand for the runtime's tests and
// benchmarks: plans that hold nothing but collectives, whose sizes and
// placement a test chooses freely, which the compiler would not make.
package plantest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/units"
)

// AllReduces returns a plan of one all-reduce per size, in order, over
// len(shares) CPU devices of one replica each: device d's persistent
// register of each size (initialized at random, named for its size and
// replica) on its coll stream. Shares are the replicas' micro-batches: the
// all-reduces' weights (AllReduceWeights); nil for the plain mean.
func AllReduces(sizes []int, devices int, shares []int) *plans.Plan {
	p := &plans.Plan{
		Version: plans.Version, Model: "allreduces", Strategy: fmt.Sprintf("dp=%d", devices),
		Batch: devices, MicroBatch: 1, MB: 1, DP: devices, PP: 1, Optimizer: "sgd", Seed: 7,
		Images: graph.Spec{Shape: graph.Shape{devices, 1}, DType: graph.F32},
	}
	if shares != nil {
		p.Shares, p.MB, p.Batch = shares, 0, 0
		for _, m := range shares {
			p.MB = max(p.MB, m)
			p.Batch += m
		}
		p.Images.Shape[0] = p.Batch
	}
	var total units.Bytes
	for _, n := range sizes {
		total += units.Bytes(4 * n)
	}
	for d := range devices {
		p.Devices = append(p.Devices, plans.Device{Name: fmt.Sprintf("cpu%d", d), Type: "cpu", Workers: 1, Memory: total})
		p.Streams = append(p.Streams, plans.Stream{Device: d, Name: "coll"})
		p.Memory = append(p.Memory, plans.Memory{Device: d, Peak: total, Persistent: total, Unshared: total})
	}
	for _, n := range sizes {
		t := plans.Task{ID: len(p.Tasks), Name: fmt.Sprintf("allreduce/%d", n), Kind: plans.AllReduce, Phase: "comm",
			Replica: -1, InPlace: true, Bytes: units.Bytes(4 * n), Key: fmt.Sprintf("allreduce(%d,%d)", devices, 4*n)}
		for d := range devices {
			off := units.Bytes(0)
			if len(p.Registers) >= devices {
				prev := &p.Registers[len(p.Registers)-devices]
				off = prev.Offset + prev.SlotBytes
			}
			spec := graph.Spec{Shape: graph.Shape{n}, DType: graph.F32}
			p.Registers = append(p.Registers, plans.Register{ID: len(p.Registers), Name: fmt.Sprintf("r%d/%d", d, n), Device: d,
				Spec: spec, SlotBytes: spec.Bytes(), Slots: 1, Offset: off, Persistent: true,
				Init: graph.Init{Kind: graph.Normal, Scale: 1}, Writers: []int{t.ID}})
			t.Writes = append(t.Writes, len(p.Registers)-1)
			t.Streams = append(t.Streams, d)
			p.Streams[d].Order = append(p.Streams[d].Order, t.ID)
		}
		p.Tasks = append(p.Tasks, t)
		p.Firings = append(p.Firings, plans.Firing{Task: t.ID, Micro: -1})
	}
	return p
}

// Feeder is runtime.Feeder, which this package cannot import.
type Feeder interface {
	Feed(iter, from, n int, images []float32, labels []int32) error
}

// StopFeeder feeds as its Feeder does, and closes Stop once iteration At
// is fed, on whichever rank feeds it first: a runner's Stop closing
// mid-run. With Reached set, it then waits (a minute at most) until
// Reached closes: another rank's stop has reached rank 0 while the run
// goes on, however fast the rest of the run would be.
type StopFeeder struct {
	Feeder
	At      int
	Stop    chan struct{}
	Once    *sync.Once
	Reached <-chan struct{}
}

func (f StopFeeder) Feed(iter, from, n int, images []float32, labels []int32) error {
	if iter == f.At {
		f.Once.Do(func() {
			close(f.Stop)
			if f.Reached != nil {
				select {
				case <-f.Reached:
				case <-time.After(time.Minute):
				}
			}
		})
	}
	return f.Feeder.Feed(iter, from, n, images, labels)
}

// Stops are the Stop channels of a multi-process run stopped by rank By:
// rank 0's, and By's (the same when By is 0). Ask, as rank 0's StopAsked,
// closes rank 0's once another rank asks.
type Stops struct {
	By      int
	Rank0   chan struct{}
	Stopper chan struct{} // rank By's
	asked   atomic.Int64  // the rank that asked, +1
}

// NewStops returns the Stops of a run stopped by rank by.
func NewStops(by int) *Stops {
	s := &Stops{By: by, Rank0: make(chan struct{})}
	s.Stopper = s.Rank0
	if by != 0 {
		s.Stopper = make(chan struct{})
	}
	return s
}

// Ask is rank 0's StopAsked: rank k asks it to stop.
func (s *Stops) Ask(k int) {
	if s.asked.CompareAndSwap(0, int64(k)+1) {
		close(s.Rank0)
	}
}

// Asked is the rank that asked rank 0 to stop, −1 if none did.
func (s *Stops) Asked() int { return int(s.asked.Load()) - 1 }

// FailFeeder feeds as its Feeder does, and fails with Err to feed
// iteration At or any later: a rank whose Run fails while its link stays
// up.
type FailFeeder struct {
	Feeder
	At  int
	Err error
}

func (f FailFeeder) Feed(iter, from, n int, images []float32, labels []int32) error {
	if iter >= f.At {
		return f.Err
	}
	return f.Feeder.Feed(iter, from, n, images, labels)
}

// Each calls run for ranks 0 … n−1 at once, as the processes of a
// multi-process run would run, and returns their results and errors once
// all have returned.
func Each[R any](n int, run func(rank int) (R, error)) ([]R, []error) {
	res := make([]R, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() { res[k], errs[k] = run(k) })
	}
	wg.Wait()
	return res, errs
}

// RunAll is Each, failing t with the first rank's error.
func RunAll[R any](t testing.TB, n int, run func(rank int) (R, error)) []R {
	t.Helper()
	res, errs := Each(n, run)
	for k, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", k, err)
		}
	}
	return res
}

// RunFailing runs n ranks at once, as Each, rank k calling run with
// feed, but rank failing with a FailFeeder of it that fails iteration 1
// with why; each under a hang guard of 30 s (ctx). It checks that every
// rank's Run fails: that rank's with its own error, every other's naming
// that rank and its error (not a stall, nor another rank), and returns
// the errors.
func RunFailing(t testing.TB, n, failing int, feed Feeder, why error, run func(ctx context.Context, rank int, feed Feeder) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, errs := Each(n, func(k int) (struct{}, error) {
		if k == failing {
			return struct{}{}, run(ctx, k, FailFeeder{Feeder: feed, At: 1, Err: why})
		}
		return struct{}{}, run(ctx, k, feed)
	})
	for k, err := range errs {
		require.ErrorContains(t, err, why.Error(), "rank %d", k)
		if k == failing {
			require.NotContains(t, err.Error(), "failed:", "rank %d: its own error", k)
			continue
		}
		require.Contains(t, err.Error(), fmt.Sprintf("runtime: rank %d failed: ", failing), "rank %d", k)
		require.NotContains(t, err.Error(), "stalled", "rank %d", k)
	}
	return errs
}
