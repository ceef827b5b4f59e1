package remote

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/runtime/internal/plantest"
)

// pair returns a coordinator and a worker in this process, over loopback.
func pair(b *testing.B) (coord, worker *Group) {
	g := groups(b, 2)
	return g[0], g[1]
}

// groups returns the n ranks of a world in this process, over loopback,
// closed at the end of the test.
func groups(tb testing.TB, n int) []*Group {
	tb.Helper()
	master, token := freeAddr(tb), "t"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs := make([]*Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 1; r < n; r++ {
		wg.Go(func() {
			gs[r], errs[r] = Join(ctx, Options{Rank: r, World: n, Master: master, Token: token, JoinTimeout: 5 * time.Second})
		})
	}
	gs[0], errs[0] = Coordinate(ctx, Options{World: n, Master: master, Token: token, JoinTimeout: 5 * time.Second})
	wg.Wait()
	tb.Cleanup(func() {
		for _, g := range gs {
			if g != nil {
				g.Close()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			tb.Fatalf("rank %d: %v", r, err)
		}
	}
	return gs
}

func benchmarkSend(b *testing.B, floats int) {
	coord, worker := pair(b)
	m := &runtime.Message{Kind: runtime.MsgData, F: make([]float32, floats)}
	inbox := coord.Link().Inbox(0)
	b.SetBytes(int64(4 * floats))
	for b.Loop() {
		if err := worker.Link().Send(0, m); err != nil {
			b.Fatal(err)
		}
		if _, ok := <-inbox; !ok {
			b.Fatal(coord.Err())
		}
	}
}

func BenchmarkSend_4KiB(b *testing.B)   { benchmarkSend(b, 1<<10) }
func BenchmarkSend_16MiB(b *testing.B)  { benchmarkSend(b, 4<<20) }
func BenchmarkSend_100MiB(b *testing.B) { benchmarkSend(b, 25<<20) }

// countLink counts the values a rank sends.
type countLink struct {
	runtime.Link
	sent *atomic.Int64
}

func (l countLink) Send(to int, m *runtime.Message) error {
	l.sent.Add(int64(len(m.F) + len(m.I)))
	return l.Link.Send(to, m)
}

// benchmarkAllReduce all-reduces a register of floats values over n ranks
// of one process, each a PlanRunner on its Group, over gRPC on loopback.
// It reports the bytes each rank sends per all-reduce.
func benchmarkAllReduce(b *testing.B, n, floats int) {
	p := plantest.AllReduces([]int{floats}, n, nil)
	gs := groups(b, n)
	sent := make([]atomic.Int64, n)
	rs := make([]*runtime.PlanRunner, n)
	ranks := make([]int, n)
	for k := range ranks {
		ranks[k] = k
	}
	for k, g := range gs {
		r, err := runtime.NewRankRunner(p, ranks, countLink{g.Link(), &sent[k]})
		if err != nil {
			b.Fatal(err)
		}
		rs[k] = r
	}
	feed := runtime.NewSyntheticFeeder(p.Images, 10, 64, 9)
	errs := make([]error, n)
	b.SetBytes(int64(4 * floats))
	for b.Loop() {
		var wg sync.WaitGroup
		for k, r := range rs {
			wg.Go(func() { _, errs[k] = r.Run(context.Background(), 1, feed) })
		}
		wg.Wait()
		for k, err := range errs {
			if err != nil {
				b.Fatalf("rank %d: %v", k, err)
			}
		}
	}
	var most int64
	for k := range sent {
		most = max(most, sent[k].Load())
	}
	b.ReportMetric(float64(4*most)/float64(b.N), "sent-B/rank")
}

// BenchmarkAllReduce is an all-reduce of 16 KiB (one chunk, reduced by
// the first rank) over 2 and 4 ranks, and of 1 and 16 MiB over 4: MB/s
// counts the register once, sent-B/rank is what the busiest rank sends
// (2(n−1)/n of the register in chunks; n−1 times it whole before).
func BenchmarkAllReduce(b *testing.B) {
	for _, n := range []int{2, 4} { // a bias, a norm's scale
		b.Run(fmt.Sprintf("n=%d/16KiB", n), func(b *testing.B) { benchmarkAllReduce(b, n, 4096) })
	}
	for _, size := range []int{1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("n=4/%dMiB", size>>20), func(b *testing.B) { benchmarkAllReduce(b, 4, size/4) })
	}
}
