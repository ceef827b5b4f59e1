package runtime

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/runtime/internal/plantest"
	"github.com/flowkit/flowkit/trace"
	"github.com/flowkit/flowkit/units"
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
	h := newMemHub(slices.Max(ranks) + 1)
	links := make([]Link, len(h.boxes))
	for k := range links {
		links[k] = memLink{h, k}
	}
	return runRanksOn(t, p, ranks, links, iters, runs)
}

// runRanksOn is runRanks over the given links, one a rank.
func runRanksOn(t *testing.T, p *plans.Plan, ranks []int, links []Link, iters, runs int) ([]*PlanRunner, []*RunResult) {
	t.Helper()
	n := len(links)
	rs := make([]*PlanRunner, n)
	for k := range rs {
		r, err := NewRankRunner(p, ranks, links[k])
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
	const gpt = "gpt:layers=2,hidden=32,heads=4,seq=8,vocab=64"
	const gpt3 = "gpt:layers=2,hidden=36,heads=4,seq=8,vocab=64" // ZeRO divides its weights by 3
	cases := []struct {
		strategy string
		ranks    []int
		model    string      // default mnist-cnn
		batch    int         // default 16
		dtype    graph.DType // default f32
	}{
		{"dp=2", []int{0, 1}, "", 0, 0},
		{"pp=2,mb=4,sched=1f1b", []int{0, 1}, "", 0, 0},
		{"dp=2,pp=2,mb=2", []int{0, 0, 1, 1}, "", 0, 0}, // replicas on ranks: all-reduces cross
		{"dp=2,pp=2,mb=2", []int{0, 1, 0, 1}, "", 0, 0}, // stages on ranks: transfers cross
		{"dp=2,pp=2,mb=2", []int{0, 1, 2, 0}, "", 0, 0}, // both, three ranks
		{"dp=3,mb=2:1:1", []int{0, 1, 1}, "", 0, 0},     // uneven; one rank holds two replicas
		{"pp=3,layers=1:2:1,mb=4", []int{2, 0, 1}, "", 0, 0},
		{"tp=2,pp=2,mb=2", []int{0, 1, 0, 1}, "mlp", 0, 0},     // tensor-parallel sums cross
		{"dp=2,tp=2", []int{0, 0, 1, 1}, "mlp", 0, 0},          // gradient all-reduces cross
		{"tp=2,sp=on,pp=2,mb=2", []int{0, 1, 1, 0}, gpt, 0, 0}, // all-gathers and reduce-scatters cross
		{"pp=2,vpp=2,mb=4", []int{0, 1}, "", 0, 0},
		{"dp=2,mb=2,zero=1", []int{0, 1}, "", 0, 0}, // ZeRO's reduce-scatters and all-gathers cross
		{"dp=2,mb=2,zero=2", []int{0, 1}, "", 0, 0}, // per micro-batch
		{"dp=2,mb=4,zero=3", []int{0, 1}, "", 0, 0}, // and the weights' gathers before forward and backward
		{"dp=2,pp=2,mb=2,zero=3", []int{0, 1, 1, 0}, "", 0, 0},
		{"dp=2,pp=2,mb=4,zero=3,prefetch=1", []int{0, 1, 1, 0}, "", 0, 0}, // gathers ahead, bounded by other ranks' releases
		{"dp=2,pp=2,mb=2,zero=2", []int{0, 0, 1, 1}, "mlp", 0, 0},
		{"dp=2,tp=2,mb=2,zero=3", []int{0, 0, 1, 1}, "mlp", 0, 0},     // ZeRO over each rank's replicas crosses
		{"dp=2,tp=2,sp=on,mb=2,zero=2", []int{0, 1, 1, 0}, gpt, 0, 0}, // so do the groups' sums
		// Three and four ranks: all-reduces in chunks, some of
		// several, some empty; ZeRO's parts to their ranks only.
		{"dp=3,mb=2", []int{0, 1, 2}, "mlp", 12, 0},
		{"dp=3,mb=3:1:2", []int{2, 0, 1}, "mlp", 12, 0},
		{"dp=4", []int{0, 1, 2, 3}, "", 0, 0},
		{"dp=4,mb=1:2:1:4", []int{0, 1, 2, 3}, "mlp", 16, 0},
		{"dp=4", []int{0, 1, 2, 3}, "mlp", 0, graph.BF16},
		{"dp=2,tp=2", []int{0, 1, 2, 3}, "mlp", 0, 0},
		{"dp=3,mb=2,zero=1", []int{0, 1, 2}, gpt3, 12, 0},
		{"dp=3,mb=2,zero=2", []int{0, 1, 2}, gpt3, 12, 0},
		{"dp=3,mb=2,zero=3", []int{0, 1, 2}, gpt3, 12, 0},
		{"dp=3,mb=2,zero=3,prefetch=1", []int{1, 2, 0}, gpt3, 12, graph.BF16},
		{"dp=3,mb=2:1:3,zero=1", []int{2, 0, 1}, gpt3, 12, 0}, // weighted
		{"dp=3,mb=2,zero=2", []int{0, 1, 2}, gpt3, 12, graph.BF16},
		{"dp=4,mb=2,zero=2", []int{0, 1, 2, 3}, "mlp", 16, 0},
		{"dp=2,mb=3:1,zero=2", []int{0, 1}, "mlp", 8, 0},                 // rounds: replica 1 sends zeros in the last two
		{"dp=3,mb=1:3:2,zero=3,prefetch=1", []int{2, 0, 1}, gpt3, 12, 0}, // and gives its parts to the others' gathers
		// Gradients all-reduced in buckets, packed and unpacked on each rank.
		{"dp=2,bucket=64KiB", []int{0, 1}, "", 0, 0},
		{"dp=3,mb=2:1:1,bucket=1GiB", []int{0, 1, 1}, "", 0, 0},
		{"dp=2,pp=2,mb=2,bucket=1GiB", []int{0, 1, 2, 0}, "", 0, 0},
		{"dp=2,tp=2,bucket=1GiB", []int{0, 1, 2, 3}, "mlp", 0, 0},
		{"dp=4,bucket=1MiB", []int{0, 1, 2, 3}, "mlp", 0, graph.BF16},
		{"dp=2,mb=2,zero=1,bucket=1GiB", []int{0, 1}, "", 0, 0},           // a bucket reduce-scattered
		{"dp=3,mb=2:1:3,zero=1,bucket=1GiB", []int{2, 0, 1}, gpt3, 12, 0}, // and one all-reduced, weighted
		{"dp=2,mb=2,zero=2,bucket=64KiB", []int{0, 1}, "mlp", 8, 0},       // weights gathered in buckets
	}
	for _, c := range cases {
		model := cmp.Or(c.model, "mnist-cnn")
		dtype := cmp.Or(c.dtype, graph.F32)
		t.Run(fmt.Sprintf("%s/%s/%v/%v", model, c.strategy, c.ranks, dtype), func(t *testing.T) {
			p := compileDType(t, model, c.strategy, cmp.Or(c.batch, 16), dtype)
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

// countLink counts the values a rank sends in collectives' messages.
type countLink struct {
	Link
	sent *atomic.Int64
}

func (l countLink) Send(to int, m *Message) error {
	if m.Kind == MsgPart || m.Kind == MsgReduced {
		l.sent.Add(int64(len(m.F)))
	}
	return l.Link.Send(to, m)
}

// meanInOrder is the all-reduce of vals (one a replica) as one process
// computes it, element by element: the members' sum in order, then the
// mean, or with weights their weighted sum.
func meanInOrder(vals [][]float32, weights []float64) []float32 {
	out := slices.Clone(vals[0])
	for e := range out {
		if weights == nil {
			acc := vals[0][e]
			for _, v := range vals[1:] {
				acc += v[e]
			}
			out[e] = 1 / float32(len(vals)) * acc
			continue
		}
		acc := float32(weights[0]) * vals[0][e]
		for j, v := range vals[1:] {
			acc += float32(weights[j+1]) * v[e]
		}
		out[e] = acc
	}
	return out
}

// An all-reduce over ranks, each reducing its chunk of the registers,
// gives every replica the bits one process computes: over 2, 3 and 4
// ranks, several replicas on a rank or one, the plain mean and a weighted
// one, registers smaller than the ranks (empty chunks), than a chunk, and
// of several chunks with a shorter last. With one replica a rank, the
// ranks together send 2(n−1) times the registers, where every rank
// sending its registers to every other sent n(n−1) times.
func TestRanksAllReduceChunks(t *testing.T) {
	sizes := []int{1, 3, 5, minChunk - 1, minChunk + 1, 3*minChunk + 5, 4*12345 + 2}
	cases := []struct {
		ranks  []int // by device, one replica a device
		shares []int // micro-batches by replica (nil: even)
	}{
		{[]int{0, 1}, nil},
		{[]int{1, 0}, []int{3, 1}},
		{[]int{0, 1, 2}, nil},
		{[]int{0, 1, 2}, []int{1, 2, 4}},
		{[]int{0, 1, 2, 3}, nil},
		{[]int{3, 1, 0, 2}, []int{3, 1, 2, 1}},
		{[]int{2, 0, 1, 0, 1}, nil}, // several replicas a rank, out of order
		{[]int{2, 0, 1, 0, 1}, []int{1, 2, 1, 3, 1}},
	}
	const iters = 2
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v/%v", c.ranks, c.shares), func(t *testing.T) {
			p := plantest.AllReduces(sizes, len(c.ranks), c.shares)
			initial, err := NewPlanRunner(p)
			require.NoError(t, err)
			one, err := NewPlanRunner(p)
			require.NoError(t, err)
			_, err = one.Run(context.Background(), iters, NewSyntheticFeeder(p.Images, 10, 64, 9))
			require.NoError(t, err)

			n := slices.Max(c.ranks) + 1
			h := newMemHub(n)
			links := make([]Link, n)
			sent := make([]atomic.Int64, n)
			for k := range links {
				links[k] = countLink{memLink{h, k}, &sent[k]}
			}
			rs, _ := runRanksOn(t, p, c.ranks, links, iters, 1)

			var total int64
			for ti, task := range p.Tasks {
				initials := make([][]float32, len(task.Writes))
				for i, w := range task.Writes {
					b, err := initial.value(w)
					require.NoError(t, err)
					initials[i] = b.F
				}
				weights := p.AllReduceWeights(&task)
				want := initials
				for range iters {
					mean := meanInOrder(want, weights)
					want = slices.Repeat([][]float32{mean}, len(want))
				}
				for i, w := range task.Writes {
					reg := &p.Registers[w]
					got, err := one.value(w)
					require.NoError(t, err)
					require.Equal(t, want[i], got.F, "%s in one process: the members summed in order", reg.Name)
					got, err = rs[c.ranks[reg.Device]].value(w)
					require.NoError(t, err)
					require.Equal(t, want[i], got.F, "%s on rank %d: the bits of one process", reg.Name, c.ranks[reg.Device])
				}
				if ti == len(p.Tasks)-1 && len(initials) > 2 {
					// The data tell orders apart: summed in another
					// order, the largest register gets other bits.
					rev, rw := slices.Clone(initials), slices.Clone(weights)
					slices.Reverse(rev)
					slices.Reverse(rw)
					require.NotEqual(t, meanInOrder(initials, weights), meanInOrder(rev, rw))
				}
				size := p.Registers[task.Writes[0]].Spec.Shape.NumElements()
				for ch := range n {
					lo, hi := chunkOf(size, n, ch)
					others := 0 // replicas not on the chunk's rank
					for _, k := range c.ranks {
						if k != ch {
							others++
						}
					}
					total += int64((hi - lo) * (others + n - 1))
				}
			}
			var all int64
			for k := range sent {
				all += sent[k].Load()
			}
			require.Equal(t, iters*total, all, "values sent by all ranks")
			if len(c.ranks) == n {
				elems := 0
				for _, s := range sizes {
					elems += s
				}
				require.Equal(t, int64(iters*2*(n-1)*elems), all, "2(n−1) times the registers")
			}
		})
	}
}

// With chunks of equal size, each of n ranks sends 2(n−1)/n of the
// register: its parts of the others' chunks, and its chunk to each.
func TestRanksAllReduceBytesPerRank(t *testing.T) {
	for n := 2; n <= 4; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			size := n * 3 * minChunk
			p := plantest.AllReduces([]int{size}, n, nil)
			h := newMemHub(n)
			links := make([]Link, n)
			sent := make([]atomic.Int64, n)
			for k := range links {
				links[k] = countLink{memLink{h, k}, &sent[k]}
			}
			runRanksOn(t, p, []int{0, 1, 2, 3}[:n], links, 1, 1)
			for k := range sent {
				require.Equal(t, int64(2*(n-1)*size/n), sent[k].Load(), "values rank %d sent", k)
			}
		})
	}
}

// Collectives over ranks send what the ranks need, no more: with one
// replica on each of n ranks, all of them together send 2(n−1) times an
// all-reduce's register, n−1 times a reduce-scatter's input (each rank
// its members' parts to their ranks) and n−1 times an all-gather's output
// (each rank its part to every other).
func TestRanksCollectiveBytes(t *testing.T) {
	const gpt3 = "gpt:layers=2,hidden=36,heads=4,seq=8,vocab=64"
	for _, strategy := range []string{"dp=3,mb=2", "dp=3,mb=2,zero=1", "dp=3,mb=2,zero=2", "dp=3,mb=2,zero=3,prefetch=1"} {
		t.Run(strategy, func(t *testing.T) {
			p := compile(t, gpt3, strategy, 12)
			const n, iters = 3, 2
			h := newMemHub(n)
			links := make([]Link, n)
			sent := make([]atomic.Int64, n)
			for k := range links {
				links[k] = countLink{memLink{h, k}, &sent[k]}
			}
			runRanksOn(t, p, []int{0, 1, 2}, links, iters, 1)
			want := 0
			for _, fi := range p.Firings {
				task := &p.Tasks[fi.Task]
				switch task.Kind {
				case plans.AllReduce:
					want += 2 * (n - 1) * p.Registers[task.Writes[0]].Spec.Shape.NumElements()
				case plans.ReduceScatter:
					want += (n - 1) * p.Registers[task.Reads[0].Reg].Spec.Shape.NumElements()
				case plans.AllGather:
					want += (n - 1) * p.Registers[task.Writes[0]].Spec.Shape.NumElements()
				}
			}
			var all int64
			for k := range sent {
				all += sent[k].Load()
			}
			require.Equal(t, int64(iters*want), all, "values sent by all ranks")
		})
	}
}

// The simulator prices an all-reduce across processes by the chunks the
// runtime splits it into (cost.DirectChunks, in bytes of 4-byte values).
func TestChunksAsCostPricesThem(t *testing.T) {
	for _, n := range []int{2, 3, 4, 7} {
		for _, size := range []int{1, 100, 4096, 4097, 9000, 16383, 49382, 1 << 20} {
			priced := cost.DirectChunks(units.Bytes(4*size), n)
			require.Len(t, priced, n)
			for c := range n {
				lo, hi := chunkOf(size, n, c)
				require.Equal(t, units.Bytes(4*(hi-lo)), priced[c], "size %d, %d ranks, chunk %d", size, n, c)
			}
		}
	}
}

// Clocks out of step, by the merge's offsets or by the gap between a
// rank's wall and monotonic readings, are put back in step by what the
// ranks saw of each other: the merged trace keeps the plan's rules (a
// transfer lands after it is sent and before its sender hears so, an
// all-reduce's parts overlap, a firing waited for by another rank ends
// before that rank's starts), and a transfer to another rank stays within
// its sender's span.
func TestMergeRanksClockSkew(t *testing.T) {
	for _, strategy := range []string{"pp=2,mb=4,sched=1f1b", "dp=2,mb=2", "dp=2,pp=2,mb=2"} {
		t.Run(strategy, func(t *testing.T) {
			p, parts := rankParts(t, strategy)
			n := len(parts)
			exact, err := MergeRanks(p, parts, make([]time.Duration, n))
			require.NoError(t, err)
			require.NoError(t, p.CheckTrace(exact.Trace))
			for _, skew := range []time.Duration{-50 * time.Millisecond, -5 * time.Millisecond, -time.Millisecond, 0, time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond} {
				offsets := make([]time.Duration, n)
				offsets[n-1] = skew
				merged, err := MergeRanks(p, parts, offsets)
				require.NoError(t, err)
				require.NoError(t, p.CheckTrace(merged.Trace), "rank %d's clock %v off", n-1, skew)
				for _, e := range merged.Trace.Events {
					require.LessOrEqual(t, e.Start, e.End, "%s: rank %d's clock %v off", p.Tasks[e.Task].Name, n-1, skew)
				}
				// The skew is undone, not only hidden: the run takes as
				// long as on the clocks in step (to the slack of the
				// ranks' exchanges, microseconds here, a few milliseconds
				// on a loaded machine).
				require.InDelta(t, sum(exact.Steps).Seconds(), sum(merged.Steps).Seconds(), 0.010, "rank %d's clock %v off", n-1, skew)
			}
		})
	}
}

// sum is the total of ds.
func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

// Any offsets of the ranks' clocks are undone by alignClocks; timestamps
// that contradict each other whatever the clocks (transfers both ways that
// land before they were sent) leave the shifts as they were.
func TestAlignClocks(t *testing.T) {
	p, parts := rankParts(t, "dp=2,pp=2,mb=2")
	n := len(parts)
	exact, err := MergeRanks(p, parts, make([]time.Duration, n))
	require.NoError(t, err)
	rapid.Check(t, func(rt *rapid.T) {
		offsets := make([]time.Duration, n)
		for k := 1; k < n; k++ {
			offsets[k] = time.Duration(rapid.Int64Range(-int64(time.Second), int64(time.Second)).Draw(rt, "offset"))
		}
		merged, err := MergeRanks(p, parts, offsets)
		require.NoError(rt, err)
		require.NoError(rt, p.CheckTrace(merged.Trace), "offsets %v", offsets)
		require.InDelta(rt, sum(exact.Steps).Seconds(), sum(merged.Steps).Seconds(), 0.010, "offsets %v", offsets)
	})

	contradict := make([]*RankResult, n)
	for k, part := range parts {
		c := *part
		c.Landed = slices.Clone(part.Landed)
		for i := range c.Landed {
			c.Landed[i].Start -= trace.Time(time.Second)
			c.Landed[i].End -= trace.Time(time.Second)
		}
		contradict[k] = &c
	}
	shift := []trace.Time{0, 1, 2, 3}
	alignClocks(p, contradict, shift)
	require.Equal(t, []trace.Time{0, 1, 2, 3}, shift, "a negative cycle moves no clock")
}

// rankParts runs three iterations of the mlp under strategy (batch 16)
// with one rank per device, in this process, and returns the plan and
// the ranks' results.
func rankParts(t *testing.T, strategy string) (*plans.Plan, []*RankResult) {
	p := compile(t, "mlp", strategy, 16)
	n := len(p.Devices)
	h := newMemHub(n)
	rs := make([]*PlanRunner, n)
	ranks := make([]int, n)
	for k := range ranks {
		ranks[k] = k
	}
	for k := range rs {
		r, err := NewRankRunner(p, ranks, memLink{h, k})
		require.NoError(t, err)
		rs[k] = r
	}
	res := runRanksTogether(t, rs, 3, NewSyntheticFeeder(p.Images, 10, 64, 9))
	parts := make([]*RankResult, n)
	for k := range parts {
		parts[k] = res[k].Part
	}
	return p, parts
}
