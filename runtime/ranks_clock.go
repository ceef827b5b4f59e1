package runtime

import (
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/trace"
)

// alignClocks corrects the shifts that put each rank's events on rank 0's
// clock (shift[k], added to rank k's times) by what the ranks saw of each
// other. Measured offsets between hosts are uncertain by half a round trip
// and drift during a run; a merged trace with a rank's clock off by more
// than a message's latency breaks the plan's rules (a firing seems to
// start before what it waited for on another rank ended), and exec
// --compare would refuse the run. The ranks' events bound each pair's
// offset from both sides:
//
//   - a transfer lands after it was sent and before its sender heard so;
//   - an all-reduce's (all-gather's, reduce-scatter's) parts overlap: each
//     rank's part starts before the data of every other rank's part
//     reaches it and ends after;
//   - a firing that waits on another rank's (a plan edge between ranks)
//     starts after that one ended.
//
// Each is a difference constraint x_j − x_k ≤ c on the corrections x; the
// tightest of each pair is kept. If x = 0 meets them all (clocks in step
// by the measured offsets, always in one process or on one host), shift is
// left as it is. Otherwise the corrections are the shortest paths of the
// constraint graph from a source at distance 0 to every rank
// (Bellman-Ford): each rank moves only as far as a violated constraint
// makes it, and rank 0 stays put. Constraints that cannot all hold (a
// negative cycle: timestamps that contradict each other whatever the
// clocks) leave shift as it is, and the merged trace's check says what is
// wrong.
func alignClocks(p *plans.Plan, parts []*RankResult, shift []trace.Time) {
	if len(parts) < 2 {
		return
	}
	type key struct{ firing, iter int }
	type stamp struct {
		rank       int
		start, end trace.Time // on rank 0's clock by the measured shift
	}
	firing := map[[2]int32]int{}
	for f, fi := range p.Firings {
		firing[[2]int32{int32(fi.Task), int32(fi.Micro)}] = f
	}
	ran := map[key][]stamp{}  // by firing: the ranks that recorded it
	landed := map[key]stamp{} // transfers to another rank: when the data landed there
	iters := 0
	for k, part := range parts {
		for _, e := range part.Events {
			if f, ok := firing[[2]int32{e.Task, e.Micro}]; ok {
				id := key{f, int(e.Iter)}
				ran[id] = append(ran[id], stamp{k, e.Start + shift[k], e.End + shift[k]})
				iters = max(iters, int(e.Iter)+1)
			}
		}
		for _, e := range part.Landed {
			if f, ok := firing[[2]int32{e.Task, e.Micro}]; ok {
				landed[key{f, int(e.Iter)}] = stamp{k, e.End + shift[k], e.End + shift[k]}
			}
		}
	}

	// bound[[j, k]] = c: x_j − x_k ≤ c, the tightest seen.
	bound := map[[2]int]trace.Time{}
	add := func(j, k int, c trace.Time) {
		if j == k {
			return
		}
		if old, ok := bound[[2]int{j, k}]; !ok || c < old {
			bound[[2]int{j, k}] = c
		}
	}
	// after: some firing of to starts after from ended (a plan edge). The
	// merged end of from is the earliest of its ends (an all-reduce's
	// parts; a transfer's landing), the merged start of to the latest of
	// its starts: one pair on the same rank holds by itself, else the
	// first pair bounds the two ranks.
	after := func(from, to []stamp) {
		for _, a := range from {
			for _, b := range to {
				if a.rank == b.rank {
					return
				}
			}
		}
		a, b := from[0], to[0]
		add(a.rank, b.rank, b.start-a.end) // a.end + x_a ≤ b.start + x_b
	}
	for id, st := range ran {
		t := &p.Tasks[p.Firings[id.firing].Task]
		switch {
		case t.Kind == plans.Transfer:
			if l, ok := landed[id]; ok && len(st) == 1 {
				s := st[0]
				add(s.rank, l.rank, l.end-s.start) // sent before it landed
				add(l.rank, s.rank, s.end-l.end)   // landed before the sender heard so
			}
		case t.Kind.Collective():
			for _, u := range st {
				for _, v := range st {
					add(u.rank, v.rank, v.end-u.start) // u's part starts before v's ends
				}
			}
		}
	}
	edges, err := p.Deps()
	if err != nil {
		return
	}
	for _, e := range edges {
		for i := e.Delta; i < iters; i++ {
			from, to := ran[key{e.From, i - e.Delta}], ran[key{e.To, i}]
			if len(from) == 0 || len(to) == 0 {
				continue
			}
			if l, ok := landed[key{e.From, i - e.Delta}]; ok {
				from = append(from[:len(from):len(from)], l)
			}
			after(from, to)
		}
	}

	violated := false
	for _, c := range bound {
		violated = violated || c < 0
	}
	if !violated {
		return
	}
	x := make([]trace.Time, len(parts))
	for range len(parts) {
		changed := false
		for jk, c := range bound {
			if j, k := jk[0], jk[1]; x[k]+c < x[j] {
				x[j] = x[k] + c
				changed = true
			}
		}
		if !changed {
			for k := range shift {
				shift[k] += x[k] - x[0]
			}
			return
		}
	}
	// Still relaxing after as many rounds as ranks: a negative cycle.
}
