package runtime

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/plans"
)

// memHub connects ranks of one process as a Link connects processes:
// per-destination order, payloads copied, unbounded queues by run.
type memHub struct {
	mu    sync.Mutex
	boxes []map[int]*memBox // by rank, by run
	err   error
}

type memBox struct {
	q    []*Message
	ch   chan *Message
	wake chan struct{}
	gone bool
}

func newMemHub(n int) *memHub {
	h := &memHub{boxes: make([]map[int]*memBox, n)}
	for i := range h.boxes {
		h.boxes[i] = map[int]*memBox{}
	}
	return h
}

// box returns rank k's mailbox of run; h.mu is held.
func (h *memHub) box(k, run int) *memBox {
	b, ok := h.boxes[k][run]
	if !ok {
		b = &memBox{wake: make(chan struct{}, 1)}
		h.boxes[k][run] = b
	}
	return b
}

// fail breaks the hub: every Inbox closes.
func (h *memHub) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
	for _, runs := range h.boxes {
		for _, b := range runs {
			b.gone = true
			select {
			case b.wake <- struct{}{}:
			default:
			}
		}
	}
}

type memLink struct {
	h    *memHub
	rank int
}

func (l memLink) Rank() int { return l.rank }
func (l memLink) Size() int { return len(l.h.boxes) }
func (l memLink) Err() error {
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	return l.h.err
}

func (l memLink) Send(to int, m *Message) error {
	c := *m
	c.F, c.I = slices.Clone(m.F), slices.Clone(m.I)
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	if l.h.err != nil {
		return l.h.err
	}
	b := l.h.box(to, m.Run)
	if b.gone {
		return nil
	}
	b.q = append(b.q, &c)
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return nil
}

func (l memLink) Inbox(run int) <-chan *Message {
	l.h.mu.Lock()
	b := l.h.box(l.rank, run)
	b.ch = make(chan *Message)
	l.h.mu.Unlock()
	go func() {
		defer close(b.ch)
		for {
			l.h.mu.Lock()
			if b.gone {
				l.h.mu.Unlock()
				return
			}
			q := b.q
			b.q = nil
			l.h.mu.Unlock()
			for _, m := range q {
				b.ch <- m
			}
			if len(q) == 0 {
				<-b.wake
			}
		}
	}()
	return b.ch
}

func (l memLink) Forget(run int) {
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	b := l.h.box(l.rank, run)
	b.gone = true
	b.q = nil
	select {
	case b.wake <- struct{}{}:
	default:
	}
	// Drain what the pump still holds.
	if b.ch != nil {
		go func() {
			for range b.ch {
			}
		}()
	}
}

// runRanks runs p over len-of-ranks processes' worth of runners sharing a
// hub, iters iterations, runs times, and returns the runners and the merged
// result of each run.
func runRanks(t *testing.T, p *plans.Plan, ranks []int, iters, runs int) ([]*PlanRunner, []*RunResult) {
	t.Helper()
	n := slices.Max(ranks) + 1
	h := newMemHub(n)
	rs := make([]*PlanRunner, n)
	for k := range rs {
		r, err := NewRankRunner(p, ranks, memLink{h, k})
		require.NoError(t, err)
		rs[k] = r
	}
	feed := NewSyntheticFeeder(p.Images, 10, 64, 9)
	var out []*RunResult
	for range runs {
		parts := make([]*RankResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for k, r := range rs {
			wg.Go(func() {
				res, err := r.Run(context.Background(), iters, feed)
				if err != nil {
					errs[k] = err
					return
				}
				parts[k] = res.Part
			})
		}
		wg.Wait()
		for k, err := range errs {
			require.NoError(t, err, "rank %d", k)
		}
		res, err := MergeRanks(p, parts, make([]time.Duration, n))
		require.NoError(t, err)
		out = append(out, res)
	}
	return rs, out
}

// A plan split over ranks computes the bits one process computes, and its
// merged trace keeps every rule of the plan: transfers between pipeline
// stages and all-reduces between replicas on different ranks, even and
// uneven, with runs continuing from one another.
func TestRanksMatchOneProcess(t *testing.T) {
	cases := []struct {
		strategy string
		ranks    []int
		model    string // default mnist-cnn
	}{
		{"dp=2", []int{0, 1}, ""},
		{"pp=2,mb=4,sched=1f1b", []int{0, 1}, ""},
		{"dp=2,pp=2,mb=2", []int{0, 0, 1, 1}, ""}, // replicas on ranks: all-reduces cross
		{"dp=2,pp=2,mb=2", []int{0, 1, 0, 1}, ""}, // stages on ranks: transfers cross
		{"dp=2,pp=2,mb=2", []int{0, 1, 2, 0}, ""}, // both, three ranks
		{"dp=3,mb=2:1:1", []int{0, 1, 1}, ""},     // uneven; one rank holds two replicas
		{"pp=3,layers=1:2:1,mb=4", []int{2, 0, 1}, ""},
		{"tp=2,pp=2,mb=2", []int{0, 1, 0, 1}, "mlp"},                                                 // tensor-parallel sums cross
		{"dp=2,tp=2", []int{0, 0, 1, 1}, "mlp"},                                                      // gradient all-reduces cross
		{"tp=2,sp=on,pp=2,mb=2", []int{0, 1, 1, 0}, "gpt:layers=2,hidden=32,heads=4,seq=8,vocab=64"}, // all-gathers and reduce-scatters cross
		{"pp=2,vpp=2,mb=4", []int{0, 1}, ""},
		{"dp=2,mb=2,zero=1", []int{0, 1}, ""}, // ZeRO's reduce-scatters and all-gathers cross
		{"dp=2,mb=2,zero=2", []int{0, 1}, ""}, // per micro-batch
		{"dp=2,mb=4,zero=3", []int{0, 1}, ""}, // and the weights' gathers before forward and backward
		{"dp=2,pp=2,mb=2,zero=3", []int{0, 1, 1, 0}, ""},
		{"dp=2,pp=2,mb=4,zero=3,prefetch=1", []int{0, 1, 1, 0}, ""}, // gathers ahead, bounded by other ranks' releases
		{"dp=2,pp=2,mb=2,zero=2", []int{0, 0, 1, 1}, "mlp"},
		{"dp=2,tp=2,mb=2,zero=3", []int{0, 0, 1, 1}, "mlp"},                                                 // ZeRO over each rank's replicas crosses
		{"dp=2,tp=2,sp=on,mb=2,zero=2", []int{0, 1, 1, 0}, "gpt:layers=2,hidden=32,heads=4,seq=8,vocab=64"}, // so do the groups' sums
	}
	for _, c := range cases {
		model := cmp.Or(c.model, "mnist-cnn")
		t.Run(fmt.Sprintf("%s/%s/%v", model, c.strategy, c.ranks), func(t *testing.T) {
			p := compile(t, model, c.strategy, 16)
			one, err := NewPlanRunner(p)
			require.NoError(t, err)
			feed := NewSyntheticFeeder(p.Images, 10, 64, 9)
			var want []float64
			for range 2 {
				res, err := one.Run(context.Background(), 3, feed)
				require.NoError(t, err)
				want = append(want, res.Loss...)
			}
			rs, results := runRanks(t, p, c.ranks, 3, 2)
			var got []float64
			for _, res := range results {
				require.NoError(t, p.CheckTrace(res.Trace), "the merged trace obeys the plan")
				got = append(got, res.Loss...)
			}
			require.InDeltaSlice(t, want, got, 1e-6, "losses")
			for i, reg := range p.Registers {
				if !reg.Persistent {
					continue
				}
				w, err := one.value(i)
				require.NoError(t, err)
				g, err := rs[c.ranks[reg.Device]].value(i)
				require.NoError(t, err)
				require.Equal(t, w.F, g.F, "%s on %s: the same bits as one process", reg.Name, p.Devices[reg.Device].Name)
			}
		})
	}
}

// A failing link stops every rank with its error, never a hang.
func TestRanksLinkFailure(t *testing.T) {
	p := compile(t, "mnist-cnn", "dp=2,pp=2,mb=2", 16)
	ranks := []int{0, 1, 0, 1}
	h := newMemHub(2)
	var rs []*PlanRunner
	for k := range 2 {
		r, err := NewRankRunner(p, ranks, memLink{h, k})
		require.NoError(t, err)
		rs = append(rs, r)
	}
	// Rank 1 never runs: rank 0 waits for it until the link fails.
	go func() {
		time.Sleep(200 * time.Millisecond)
		h.fail(fmt.Errorf("rank 1 died"))
	}()
	_, err := rs[0].Run(context.Background(), 5, NewSyntheticFeeder(p.Images, 10, 64, 9))
	require.ErrorContains(t, err, "rank 1 died")
}

// Ranks are checked against the plan and the link.
func TestNewRankRunnerErrors(t *testing.T) {
	p := compile(t, "mlp", "dp=2", 8)
	h := newMemHub(2)
	_, err := NewRankRunner(p, []int{0}, memLink{h, 0})
	require.ErrorContains(t, err, "1 ranks given for the plan's 2 devices")
	_, err = NewRankRunner(p, []int{0, 2}, memLink{h, 0})
	require.ErrorContains(t, err, "device cpu1 is placed on rank 2, outside the 2 ranks")
	_, err = NewRankRunner(p, []int{0, 0}, memLink{h, 0})
	require.ErrorContains(t, err, "rank 1 has none of the plan's 2 devices")
}
